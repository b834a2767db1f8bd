#!/usr/bin/env python3
"""deploy/monitoring/ against Debian's Prometheus and a real tpserve, on loopback.

  monitoring_test.py TPSERVE PROMTOOL PROMETHEUS

1. promtool: `check config` on the bare-host and Kubernetes scrape configurations (Debian builds
   Prometheus without Kubernetes service discovery, so the Kubernetes one is checked with its
   kubernetes_sd_configs swapped for a static target: the relabelling and the rest as written),
   `check rules`, `test rules` (every alert firing and not), `check metrics` on a live /metrics.
2. Two servers: `serving` (TP=2, so that AllReduces run) takes load from loadgen, with shared
   prompt prefixes; `failing` (--debug-fault fail@0) fails its engine on its first request and keeps
   reporting NOT_SERVING for --failure-exit-seconds. Prometheus scrapes both every second and
   evaluates deploy/monitoring/rules/tpserve.rules.yml every second.
3. Every query of every panel of deploy/monitoring/grafana/tpserve-dashboard.json (Grafana's
   variables replaced) must return data, and a few must return what the load implies (tokens/s and
   AllReduce latency above 0, the collectives' share between 0 and 1). Every expression of the rules
   must evaluate; a recording rule must return data, and every series an alert reads must exist.
4. The engine-failed alert must become pending for `failing`, and only for it.
Prints "monitoring: all passed" when every check passed. Bounded: about 30 s.
"""
import json
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

try:
    import yaml
except ImportError:
    sys.exit("monitoring: Python's yaml module is not installed: apt-get install python3-yaml (scripts/setup.sh does)")

REPO = pathlib.Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy/monitoring"
TPSERVE, PROMTOOL, PROMETHEUS = sys.argv[1:4]
# Grafana's variables in the dashboard's queries, as Grafana would fill them in for "All" servers.
GRAFANA_VARIABLES = {"$__rate_interval": "20s", "$instance": ".+"}

failures = []
children = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return condition


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, stdin=None):
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=60)


def start_serve(name, extra):
    """`tpserve serve` on loopback; returns (grpc target, metrics address) once it says it is ready."""
    proc = subprocess.Popen([TPSERVE, "serve", "--model", "tiny", "--load-format", "dummy", "--device", "cpu",
                             "--port", "0", "--metrics-port", "0", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    children.append(proc)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if "tpserve ready: grpc " in line:
            words = line.split("tpserve ready: grpc ")[1].split()
            # Keep draining its log so that it never blocks on a full pipe.
            subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
            return words[0], words[2]
    sys.exit(f"monitoring: the {name} server did not become ready")


def query(prometheus, expr):
    """Prometheus' instant query: (status, result list)."""
    url = f"http://{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    except urllib.error.HTTPError as error:
        body = json.loads(error.read())
    return body.get("status"), body.get("data", {}).get("result", []), body.get("error", "")


def values(result):
    return [float(series["value"][1]) for series in result]


def promtool_checks(work, serving_metrics):
    out = run([PROMTOOL, "check", "config", str(MONITORING / "prometheus.yml")])
    check(out.returncode == 0, f"promtool check config prometheus.yml: {out.stdout}{out.stderr}")
    # Kubernetes: the same config with a static target where Debian's Prometheus has no kubernetes_sd.
    config = yaml.safe_load((MONITORING / "kubernetes/prometheus-kubernetes.yml").read_text())
    for job in config["scrape_configs"]:
        check("kubernetes_sd_configs" in job, f"kubernetes config: job {job['job_name']} discovers pods")
        job.pop("kubernetes_sd_configs", None)
        job["static_configs"] = [{"targets": ["127.0.0.1:9090"]}]
    config["rule_files"] = [str(MONITORING / "rules/tpserve.rules.yml")]
    swapped = work / "prometheus-kubernetes.yml"
    swapped.write_text(yaml.safe_dump(config))
    out = run([PROMTOOL, "check", "config", str(swapped)])
    check(out.returncode == 0, f"promtool check config kubernetes/prometheus-kubernetes.yml: {out.stdout}{out.stderr}")
    out = run([PROMTOOL, "check", "rules", str(MONITORING / "rules/tpserve.rules.yml")])
    check(out.returncode == 0, f"promtool check rules: {out.stdout}{out.stderr}")
    out = subprocess.run([PROMTOOL, "test", "rules", "tpserve.rules.test.yml"], cwd=MONITORING / "rules",
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0 and "SUCCESS" in out.stdout, f"promtool test rules: {out.stdout}{out.stderr}")
    scraped = urllib.request.urlopen(f"http://{serving_metrics}/metrics", timeout=10).read().decode()
    out = run([PROMTOOL, "check", "metrics"], stdin=scraped)
    check(out.returncode == 0, f"promtool check metrics on a live /metrics: {out.stdout}{out.stderr}")


def dashboard_queries():
    dashboard = json.loads((MONITORING / "grafana/tpserve-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            check("$" not in expr, f"panel '{panel['title']}': a Grafana variable this test does not know: {expr}")
            yield panel["title"], target.get("legendFormat", ""), expr


def rule_expressions():
    rules = yaml.safe_load((MONITORING / "rules/tpserve.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield rule.get("record") or rule["alert"], "record" in rule, rule["expr"]


def series_names(expr):
    """The metric names an expression reads (functions, keywords and label names excluded)."""
    without_matchers = re.sub(r"\{[^}]*\}", "", expr)
    without_ranges = re.sub(r"\[[^\]]*\]", "", without_matchers)
    words = re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()", without_ranges)
    keywords = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
                "count_values", "le", "job", "instance", "bytes", "part", "code", "finish_reason"}
    return sorted({w for w in words if w not in keywords and not re.fullmatch(r"[0-9.e]+", w)})


def main():
    work = pathlib.Path(tempfile.mkdtemp(prefix="tpserve-monitoring-"))
    started = time.monotonic()
    try:
        serving_target, serving_metrics = start_serve("serving", ["--tp", "2"])
        failing_target, failing_metrics = start_serve("failing", ["--debug-fault", "fail@0",
                                                                  "--failure-exit-seconds", "60"])
        prometheus = f"127.0.0.1:{free_port()}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(MONITORING / "rules/tpserve.rules.yml")],
            "scrape_configs": [{"job_name": "tpserve",
                                "static_configs": [{"targets": [serving_metrics, failing_metrics]}]}],
        }
        (work / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        children.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address={prometheus}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w")))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"http://{prometheus}/-/ready", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            sys.exit(f"monitoring: Prometheus did not become ready: {(work / 'prometheus.log').read_text()[-500:]}")
        # Its scrape manager takes up new targets every 5 s: wait for the first scrape of both.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(query(prometheus, 'up{job="tpserve"} == 1')[1]) < 2:
            time.sleep(0.25)
        check(len(query(prometheus, 'up{job="tpserve"} == 1')[1]) == 2, "Prometheus scrapes both servers")

        # Load over several scrapes (a rate needs two samples of a series): 40 requests at 8 a second,
        # two groups of shared 64-token prefixes (prefix-cache hits), 16 tokens each.
        load = run([TPSERVE, "loadgen", "--server", serving_target, "--rate", "8", "--requests", "40",
                    "--prompt-tokens", "16", "--output-tokens", "16", "--shared-prefix-tokens", "64",
                    "--prefix-groups", "2", "--warmup", "0", "--json"])
        check(load.returncode == 0, f"loadgen: {load.stderr[-300:]}")
        failed = run([TPSERVE, "client", "--target", failing_target, "--prompt", "fail here", "--max-tokens", "4"])
        check(failed.returncode != 0 and "UNAVAILABLE" in failed.stdout + failed.stderr,
              f"the failing server's request fails UNAVAILABLE ({(failed.stdout + failed.stderr)[-200:]!r})")
        promtool_checks(work, serving_metrics)
        time.sleep(3)  # the last samples scraped and the rules evaluated on them

        for title, legend, expr in dashboard_queries():
            status, result, error = query(prometheus, expr)
            if not check(status == "success" and result, f"panel '{title}' ({legend}) returns data: {expr} {error}"):
                continue
            finite = [v for v in values(result) if v == v]
            if title == "Tokens per second":
                check(finite and max(finite) > 0, f"panel '{title}' ({legend}): above 0 after the load ({finite})")
            if title == "AllReduce latency by message size":  # a size seen in one scrape only has no rate
                check(finite and min(finite) > 0, f"panel '{title}' ({legend}): sizes above 0 ({finite})")
            if title == "Collectives' share of step time":
                check(finite and 0 < finite[0] < 1, f"panel '{title}': between 0 and 1 ({finite})")
            if title == "Prefix cache hit rate":
                check(finite and finite[0] > 0, f"panel '{title}': shared prefixes hit ({finite})")
        for name, recording, expr in rule_expressions():
            status, result, error = query(prometheus, expr)
            check(status == "success", f"rule {name} evaluates: {error}")
            if recording:
                check(bool(result), f"recording rule {name} returns data")
            for series in series_names(expr):
                status, result, _ = query(prometheus, series)
                check(status == "success" and result, f"rule {name}: series {series} exists")

        # The engine-failed alert: pending (for: 1m) on the failing server, not on the serving one.
        pending = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            alerts = json.loads(urllib.request.urlopen(f"http://{prometheus}/api/v1/alerts", timeout=10).read())
            pending = [(a["labels"].get("instance"), a["state"]) for a in alerts["data"]["alerts"]
                       if a["labels"].get("alertname") == "TpserveEngineFailed"]
            if pending:
                break
            time.sleep(0.5)
        check(pending == [(failing_metrics, "pending")],
              f"TpserveEngineFailed is pending for the failing server ({failing_metrics}) only: {pending}")
        others = [a["labels"]["alertname"] for a in alerts["data"]["alerts"]
                  if a["labels"].get("alertname") != "TpserveEngineFailed"]
        check(not others, f"no other alert under this load: {others}")
    finally:
        for child in children:
            child.send_signal(signal.SIGKILL)
            child.wait()
        shutil.rmtree(work, ignore_errors=True)
    print(f"monitoring: {time.monotonic() - started:.1f} s", flush=True)
    if failures:
        print(f"monitoring: {len(failures)} failed")
        return 1
    print("monitoring: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Static checks of deploy/: the fields each Kubernetes kind needs for tpserve to run as designed,
and the Dockerfiles' inputs. No cluster, no image build.

  check_deploy.py [--tpserve BINARY] [--repo DIR]

With --tpserve, every flag the manifests pass must be one `tpserve serve --help` lists, and the
images' ports must be serve's defaults. The OpenAI-compatible HTTP API has no default port (it is off
unless --http-port is given): deploy/ serves it on HTTP_PORT everywhere. Prints one line per failure
and "deploy: all passed" when there is none.
"""
import argparse
import pathlib
import re
import subprocess
import sys

try:
    import yaml
except ImportError:
    sys.exit("deploy: Python's yaml module is not installed: apt-get install python3-yaml (scripts/setup.sh does)")

REPO = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
GPU = "nvidia.com/gpu"
LWS_VARIABLES = ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")
# Folders the CMake files name only in test commands: configuring does not read them.
NAMED_BY_TESTS_ONLY = {"scripts", "deploy"}
# The membership flags: given, they win over the LeaderWorkerSet variables.
MEMBERSHIP_FLAGS = ("--nnodes", "--node-rank", "--rendezvous")
# The HTTP API's port in deploy/ (vLLM's default): the images EXPOSE it, the serving pods pass it as
# --http-port and name it 'http', the Services publish it, and docs/DEPLOY.md sends OpenAI clients to
# http://SERVICE:8000/v1.
HTTP_PORT = 8000

failures = []


def fail(where, message):
    failures.append(f"{where}: {message}")
    print(f"FAIL {where}: {message}")


def rel(path):
    return str(pathlib.Path(path).relative_to(REPO))


# ---- what the code says -------------------------------------------------------------------------

def code_facts():
    """The rendezvous port and the variables tpserve reads, from comm/group_membership.*."""
    header = (REPO / "comm/group_membership.h").read_text()
    source = (REPO / "comm/group_membership.cc").read_text()
    port = int(re.search(r"kDefaultRendezvousPort\s*=\s*(\d+)", header).group(1))
    variables = set(re.findall(r'"([A-Z_]+)"', source.split("MembershipEnvironment()")[1].split("}")[0]))
    read_env = set()
    for path in list(REPO.glob("*/**/*.cc")) + list(REPO.glob("*/**/*.h")):
        if path.parts[len(REPO.parts)].startswith(("build", ".")):
            continue
        read_env.update(re.findall(r'getenv\("([A-Z_]+)"\)', path.read_text(errors="replace")))
    return port, variables, read_env


def serve_help(binary):
    """serve's flags and their defaults, from --help."""
    text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    flags = {}
    for match in re.finditer(r"^\s+(?:-\w,)?(--[a-z0-9-]+)(?:\s+\S+?(?:=(\S+))?)?\s", text, re.M):
        flags[match.group(1)] = match.group(2)
    return flags


# ---- Kubernetes ---------------------------------------------------------------------------------

def parse_args(args):
    """--flag=value / --flag value / --switch into {flag: value}, counting repeats as failures."""
    parsed, repeats = {}, []
    i = 1 if args and not args[0].startswith("-") else 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            i += 1
            continue
        if "=" in arg:
            name, value = arg.split("=", 1)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            name, value = arg, args[i + 1]
            i += 1
        else:
            name, value = arg, None
        if name in parsed:
            repeats.append(name)
        parsed[name] = value
        i += 1
    return parsed, repeats


def resolve(value, variables):
    """$(VAR) references as Kubernetes expands them in args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: str(variables.get(m.group(1), m.group(0))), value)


def container_variables(container, configmaps, where):
    """The variables a container's args may reference: its env and its envFrom ConfigMaps' keys."""
    variables = {}
    for ref in container.get("envFrom", []):
        name = ref.get("configMapRef", {}).get("name")
        if name not in configmaps:
            fail(where, f"envFrom names ConfigMap '{name}', which no manifest beside it defines")
            continue
        variables.update(configmaps[name])
    for env in container.get("env", []):
        variables[env["name"]] = env.get("value", f"<{env['name']}>")
    return variables


def check_probe(probe, kind, grpc_port, where):
    if not probe:
        fail(where, f"no {kind}Probe")
        return
    command = probe.get("exec", {}).get("command", [])
    if command[:2] != ["tpserve", "health"]:
        fail(where, f"{kind}Probe runs {command[:2]}, not `tpserve health` (native gRPC probes cannot speak TLS)")
        return
    flags, _ = parse_args(command[1:])
    target = flags.get("--target", "127.0.0.1:50051")
    if target.rsplit(":", 1)[-1] != str(grpc_port):
        fail(where, f"{kind}Probe targets {target}, the server listens on port {grpc_port}")
    health_timeout = float(flags.get("--timeout", 5))
    if probe.get("timeoutSeconds", 1) <= health_timeout:
        fail(where, f"{kind}Probe timeoutSeconds {probe.get('timeoutSeconds', 1)} does not exceed "
                    f"`tpserve health --timeout {health_timeout:g}`: kubelet would kill the probe before it answers")


def check_server_pod(pod_spec, pod_meta, configmaps, facts, where, role):
    """A pod that runs `tpserve serve`. role: server (one process), leader or worker. Returns the
    container's resolved flags."""
    containers = pod_spec.get("containers", [])
    served = [c for c in containers if (c.get("args") or [None])[0] == "serve"]
    if len(served) != 1:
        fail(where, f"expected one container whose args start with 'serve', found {len(served)}")
        return None
    container = served[0]
    where = f"{where} container {container.get('name')}"
    if not container.get("image"):
        fail(where, "no image")
    variables = container_variables(container, configmaps, where)
    args = container["args"]
    for reference in re.findall(r"\$\(([^)]*)\)", " ".join(args)):
        if reference not in variables:
            fail(where, f"args reference $({reference}), which neither env nor envFrom defines: "
                        "Kubernetes would pass it literally")
    flags, repeats = parse_args([resolve(a, variables) for a in args])
    for name in repeats:
        fail(where, f"{name} is given twice")
    if facts["serve_flags"] is not None:
        for name in flags:
            if name not in facts["serve_flags"]:
                fail(where, f"{name} is not a flag of `tpserve serve`")

    limits = container.get("resources", {}).get("limits", {})
    gpus = limits.get(GPU)
    if not isinstance(gpus, int) or gpus < 1:
        fail(where, f"resources.limits['{GPU}'] is {gpus!r}, not a whole number of GPUs")
        gpus = None
    requested = container.get("resources", {}).get("requests", {}).get(GPU)
    if requested is not None and requested != gpus:
        fail(where, f"requests['{GPU}'] {requested} differs from limits {gpus} (Kubernetes refuses that)")

    uid = pod_spec.get("securityContext", {}).get("runAsUser")
    if pod_spec.get("securityContext", {}).get("runAsNonRoot") is not True or uid != facts["image_uid"]:
        fail(where, f"the pod must run as non-root, as the image's user {facts['image_uid']} (runAsUser {uid})")
    if container.get("securityContext", {}).get("allowPrivilegeEscalation") is not False:
        fail(where, "allowPrivilegeEscalation is not false")

    drain = int(flags.get("--drain-seconds") or facts["defaults"].get("--drain-seconds", 30))
    grace = pod_spec.get("terminationGracePeriodSeconds", 30)
    if grace <= drain + 2:
        fail(where, f"terminationGracePeriodSeconds {grace} leaves no room for --drain-seconds {drain} "
                    "plus the server's 2 s shutdown: in-flight requests would be killed")
    mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
    if "/dev/shm" not in mounts:
        fail(where, "no /dev/shm volume (NCCL's shared-memory transport outgrows the container default)")

    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    grpc_port = int(flags.get("--port") or facts["defaults"].get("--port", 50051))
    metrics_port = int(flags.get("--metrics-port") or facts["defaults"].get("--metrics-port", 9090))
    http_port = None
    if role == "worker":
        # A follower serves nothing: a health probe would fail for ever. It may carry the leader's
        # --http-port (its args must equal the leader's): it starts no front end, so binds nothing.
        for kind in ("startup", "readiness", "liveness"):
            if f"{kind}Probe" in container:
                fail(where, f"a worker has no gRPC server to answer its {kind}Probe")
        if "http" in ports:
            fail(where, f"a worker declares container port 'http' {ports['http']}, but serves no HTTP API")
    else:
        if flags.get("--host") != "0.0.0.0":
            fail(where, f"--host is {flags.get('--host')!r}: the Service cannot reach a loopback listener")
        if flags.get("--metrics-host") != "0.0.0.0":
            fail(where, f"--metrics-host is {flags.get('--metrics-host')!r}: Prometheus cannot scrape loopback")
        for kind in ("startup", "readiness", "liveness"):
            check_probe(container.get(f"{kind}Probe"), kind, grpc_port, where)
        if ports.get("grpc") != grpc_port or ports.get("metrics") != metrics_port:
            fail(where, f"container ports {ports} do not name grpc {grpc_port} and metrics {metrics_port}")
        http_port = check_http(flags, ports, (grpc_port, metrics_port), where)
        annotations = (pod_meta or {}).get("annotations", {})
        if annotations.get("prometheus.io/scrape") != "true" or annotations.get("prometheus.io/port") != str(metrics_port):
            fail(where, f"the pod's prometheus.io annotations do not point at the metrics port {metrics_port}")
    return {"flags": flags, "args": args, "gpus": gpus, "ports": ports, "container": container, "http_port": http_port}


def check_http(flags, ports, other_ports, where):
    """The OpenAI-compatible HTTP API of a serving pod: --http-port given, fixed, the container port
    'http', and a model name clients can know. Returns the port (None when unusable)."""
    if "--http-port" not in flags:
        fail(where, "no --http-port: the OpenAI-compatible HTTP API is off (serve has no default port)")
        return None
    value = flags["--http-port"]
    if value is None or not value.isdigit():
        fail(where, f"--http-port {value!r} is not a port number")
        return None
    port = int(value)
    if port == 0:
        fail(where, "--http-port 0 picks a free port, which no container port or Service can name")
        return None
    if port != HTTP_PORT:
        fail(where, f"--http-port {port} is not deploy/'s HTTP port {HTTP_PORT} (the images EXPOSE it, the docs "
                    "send clients to it)")
    if port in other_ports:
        fail(where, f"--http-port {port} is also the gRPC or metrics port")
    if ports.get("http") != port:
        fail(where, f"container port 'http' is {ports.get('http')}, not --http-port {port}")
    if not flags.get("--served-model-name"):
        fail(where, "no --served-model-name: clients would have to send the model directory's name")
    return port


def check_deployment(doc, configmaps, facts, where):
    spec = doc["spec"]
    template = spec["template"]
    labels = template.get("metadata", {}).get("labels", {})
    selector = spec.get("selector", {}).get("matchLabels", {})
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        fail(where, f"selector {selector} does not match the pod labels {labels}")
    server = check_server_pod(template["spec"], template.get("metadata"), configmaps, facts, where, "server")
    if server and server["gpus"]:
        tp = server["flags"].get("--tp")
        if tp != str(server["gpus"]):
            fail(where, f"--tp {tp} is not the pod's {server['gpus']} GPUs (one process: one rank per GPU)")
        for name in MEMBERSHIP_FLAGS:
            if name in server["flags"]:
                fail(where, f"{name} in a single-process Deployment")
    return {"labels": labels, "ports": server["ports"] if server else {},
            "http_port": server["http_port"] if server else None}


def check_leaderworkerset(doc, configmaps, facts, where):
    if doc.get("apiVersion") != "leaderworkerset.x-k8s.io/v1":
        fail(where, f"apiVersion {doc.get('apiVersion')}")
    spec = doc["spec"]
    template = spec.get("leaderWorkerTemplate", {})
    size = template.get("size")
    if not isinstance(size, int) or size < 2:
        fail(where, f"size {size!r}: a multi-node group has at least 2 pods")
        size = None
    if template.get("restartPolicy") != "RecreateGroupOnPodRestart":
        fail(where, f"restartPolicy {template.get('restartPolicy')!r}: a group that lost a member cannot go on; "
                    "RecreateGroupOnPodRestart restarts all of it")
    if spec.get("startupPolicy", "LeaderCreated") != "LeaderCreated":
        fail(where, "startupPolicy LeaderReady: the leader is ready only after its workers join, which would never start")
    missing = set(LWS_VARIABLES) - facts["membership_variables"]
    if missing:
        fail(where, f"tpserve no longer reads {sorted(missing)} (comm/group_membership.cc): the group cannot form")
    pods = {}
    for role, key in (("leader", "leaderTemplate"), ("worker", "workerTemplate")):
        pod = template.get(key)
        if not pod:
            fail(where, f"no {key}")
            continue
        pod_where = f"{where} {role}"
        member = check_server_pod(pod["spec"], pod.get("metadata"), configmaps, facts, pod_where, role)
        if not member:
            continue
        pods[role] = member
        for name in MEMBERSHIP_FLAGS:
            if name in member["flags"]:
                fail(pod_where, f"{name} given: flags win over LWS_* variables, so every pod would claim the same place")
        env = {e["name"]: e for e in member["container"].get("env", [])}
        for name in (*LWS_VARIABLES, "MASTER_ADDR", "WORLD_SIZE", "RANK"):
            if name in env:
                fail(pod_where, f"env sets {name}, which LWS (or torchrun) owns")
        bind = member["flags"].get("--bind-address")
        pod_ip = env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if "$(POD_IP)" not in " ".join(member["args"]) or bind is None or pod_ip != "status.podIP":
            fail(pod_where, "--bind-address must be $(POD_IP) from fieldRef status.podIP: Gloo tells peers this address")
        waits = [c for c in pod["spec"].get("initContainers", [])
                 if "LWS_LEADER_ADDRESS" in " ".join(c.get("command", []) + c.get("args", []))]
        if not waits:
            fail(pod_where, "no init container waits for LWS_LEADER_ADDRESS to resolve (tpserve resolves it once)")
        if size and member["gpus"] and member["flags"].get("--tp") != str(size * member["gpus"]):
            fail(pod_where, f"--tp {member['flags'].get('--tp')} is not size {size} x {member['gpus']} GPUs per pod")
    if "leader" in pods:
        if pods["leader"]["ports"].get("rendezvous") != facts["rendezvous_port"]:
            fail(f"{where} leader", f"no containerPort 'rendezvous' {facts['rendezvous_port']} "
                                    "(the port tpserve takes when LWS_LEADER_ADDRESS names none)")
    if "leader" in pods and "worker" in pods and pods["leader"]["args"] != pods["worker"]["args"]:
        fail(where, "leader and worker args differ: the members' fingerprints (TP, timeouts, ...) must match")
    leader_labels = {"leaderworkerset.sigs.k8s.io/name": doc["metadata"]["name"],
                     "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    return {"labels": leader_labels, "ports": pods.get("leader", {}).get("ports", {}),
            "http_port": pods.get("leader", {}).get("http_port")}


def check_service(doc, workloads, where):
    selector = doc["spec"].get("selector", {})
    target = next((w for w in workloads if selector and all(w["labels"].get(k) == v for k, v in selector.items())), None)
    if target is None:
        fail(where, f"selector {selector} matches no serving pod defined beside it")
        return
    for port in doc["spec"].get("ports", []):
        target_port = port.get("targetPort", port.get("port"))
        if isinstance(target_port, str) and target_port not in target["ports"]:
            fail(where, f"targetPort '{target_port}' is not a named port of the pod ({sorted(target['ports'])})")
    names = {p.get("name") for p in doc["spec"].get("ports", [])}
    if not {"grpc", "metrics", "http"} <= names:
        fail(where, f"ports {sorted(names)}: expected grpc, metrics and http")
    http = next((p for p in doc["spec"].get("ports", []) if p.get("name") == "http"), None)
    if http is not None:
        target_port = http.get("targetPort", http.get("port"))
        resolved = target["ports"].get(target_port) if isinstance(target_port, str) else target_port
        if target["http_port"] is not None and resolved != target["http_port"]:
            fail(where, f"port http's targetPort {target_port!r} is {resolved}, not the pod's --http-port "
                        f"{target['http_port']}")
        if http.get("port") != HTTP_PORT:
            fail(where, f"port http is {http.get('port')}, not {HTTP_PORT} (clients use http://SERVICE:{HTTP_PORT}/v1)")


def check_kubernetes(facts):
    folders = sorted({p.parent for p in (DEPLOY / "kubernetes").rglob("*.yaml")})
    if not folders:
        fail("deploy/kubernetes", "no manifests")
    kinds_seen = set()
    for folder in folders:
        docs = []
        for path in sorted(folder.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc is None:
                    continue
                where = f"{rel(path)} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
                if not doc.get("apiVersion") or not doc.get("kind") or not doc.get("metadata", {}).get("name"):
                    fail(where, "apiVersion, kind and metadata.name are required")
                    continue
                docs.append((where, doc))
                kinds_seen.add(doc["kind"])
        configmaps = {}
        for where, doc in docs:
            if doc["kind"] == "ConfigMap":
                data = doc.get("data", {})
                for key, value in data.items():
                    if not isinstance(value, str):
                        fail(where, f"{key}: {value!r} is not a string (Kubernetes refuses it)")
                    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                        fail(where, f"{key} is not a valid variable name for envFrom")
                    if key in facts["read_env"] or key in facts["membership_variables"]:
                        fail(where, f"{key} is a variable tpserve itself reads; as a flag's key it would change its behaviour")
                configmaps[doc["metadata"]["name"]] = data
        workloads = []
        for where, doc in docs:
            if doc["kind"] == "Deployment":
                workloads.append(check_deployment(doc, configmaps, facts, where))
            elif doc["kind"] == "LeaderWorkerSet":
                workloads.append(check_leaderworkerset(doc, configmaps, facts, where))
        for where, doc in docs:
            if doc["kind"] == "Service":
                check_service(doc, workloads, where)
    for kind in ("ConfigMap", "Deployment", "Service", "LeaderWorkerSet"):
        if kind not in kinds_seen:
            fail("deploy/kubernetes", f"no {kind}")


# ---- Dockerfiles ---------------------------------------------------------------------------------

def dockerfile_instructions(path):
    """(instruction, arguments) pairs, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            lines.append(current)
            current = ""
    return [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if " " in l.strip() else "") for l in lines]


def dockerignore_allows(path):
    """Our .dockerignore is an allowlist: '*', then '!PATH' for each path the builds read."""
    allowed = [l[1:].rstrip("/") for l in (REPO / ".dockerignore").read_text().splitlines() if l.startswith("!")]
    return any(path == a or path.startswith(a + "/") for a in allowed)


def setup_packages():
    text = (REPO / "scripts/setup.sh").read_text()
    block = text.split("PACKAGES=(", 1)[1].split(")", 1)[0]
    return {w for line in block.splitlines() for w in line.split("#")[0].split()}


def check_dockerfile(path, facts):
    where = rel(path)
    instructions = dockerfile_instructions(path)
    stages = [i for i, (op, _) in enumerate(instructions) if op == "FROM"]
    if len(stages) < 2:
        fail(where, "not multi-stage (a build stage and a runtime)")
        return
    build, runtime = instructions[stages[0]:stages[1]], instructions[stages[-1]:]
    copied = set()
    for op, rest in instructions:
        if op in ("ADD", "COPY"):
            words = [w for w in rest.split() if not w.startswith("--")]
            if "--from=" in rest:
                continue
            for source in words[:-1]:
                copied.add(source.rstrip("/"))
                if not (REPO / source).exists():
                    hint = " (run scripts/fetch_assets.sh)" if source.startswith(".assets") else ""
                    fail(where, f"copies {source}, which does not exist{hint}")
                if not dockerignore_allows(source.rstrip("/")):
                    fail(where, f"copies {source}, which .dockerignore keeps out of the context")
    # Every folder the top-level CMakeLists.txt adds is needed to configure.
    top = (REPO / "CMakeLists.txt").read_text()
    for folder in re.findall(r"add_subdirectory\((\w+)\)", top):
        if folder not in copied:
            fail(where, f"the build does not copy {folder}/, which CMakeLists.txt adds")
    for folder in sorted({m for f in REPO.glob("*/**/CMakeLists.txt") if not f.parts[len(REPO.parts)].startswith("build")
                          for m in re.findall(r"CMAKE_SOURCE_DIR\}/(\w+)/", f.read_text())} - NAMED_BY_TESTS_ONLY):
        if folder not in copied:
            fail(where, f"the build does not copy {folder}/, which a CMakeLists.txt compiles from")
    # setup.sh's libraries and tools, less those only tests' extras and instruments use.
    build_text = " ".join(rest for op, rest in build if op == "RUN")
    not_needed = {"libbenchmark-dev": "standalone benchmarks (off)", "libopenmpi-dev": "the MPI peer (off)"}
    for package in sorted(setup_packages()):
        needed = package.endswith("-dev") or package in {"cmake", "ninja-build", "pkg-config", "build-essential",
                                                         "protobuf-compiler", "protobuf-compiler-grpc"}
        if needed and package not in not_needed and not re.search(rf"(?<![\w.-]){re.escape(package)}(?![\w.-])", build_text):
            fail(where, f"the build stage does not install {package}, which scripts/setup.sh does")
    ops = {op: rest for op, rest in runtime}
    user = ops.get("USER", "").split(":")[0]
    if not user.isdigit() or int(user) == 0:
        fail(where, f"runtime USER {user!r}: a numeric non-root uid (Kubernetes' runAsNonRoot checks numbers)")
    else:
        facts.setdefault("image_uids", set()).add(int(user))
    health = ops.get("HEALTHCHECK", "")
    if '"tpserve", "health"' not in health:
        fail(where, "no HEALTHCHECK running `tpserve health`")
    if '"tpserve"' not in ops.get("ENTRYPOINT", ""):
        fail(where, "the runtime's ENTRYPOINT is not tpserve")
    exposed = {int(p) for p in ops.get("EXPOSE", "").split()}
    wanted = {int(facts["defaults"].get("--port", 50051)), int(facts["defaults"].get("--metrics-port", 9090)),
              facts["rendezvous_port"], HTTP_PORT}
    if not wanted <= exposed:
        fail(where, f"EXPOSE {sorted(exposed)} lacks {sorted(wanted - exposed)}")
    target = re.search(r'"--target", "[^"]*:(\d+)"', health)
    if target and int(target.group(1)) != int(facts["defaults"].get("--port", 50051)):
        fail(where, f"HEALTHCHECK probes port {target.group(1)}, serve listens on {facts['defaults'].get('--port')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tpserve", help="the tpserve binary: check flags against `serve --help`")
    parser.add_argument("--repo", help="the checkout to check (default: this one; the self-test's copies)")
    options = parser.parse_args()
    global REPO, DEPLOY
    if options.repo:
        REPO = pathlib.Path(options.repo).resolve()
        DEPLOY = REPO / "deploy"
    port, membership_variables, read_env = code_facts()
    serve_flags = serve_help(options.tpserve) if options.tpserve else None
    facts = {"rendezvous_port": port, "membership_variables": membership_variables, "read_env": read_env,
             "serve_flags": serve_flags,
             "defaults": {k: v for k, v in (serve_flags or {}).items() if v is not None}}
    dockerfiles = sorted((DEPLOY / "docker").glob("Dockerfile*"))
    if len(dockerfiles) < 2:
        fail("deploy/docker", "expected a CPU and a CUDA Dockerfile")
    for path in dockerfiles:
        check_dockerfile(path, facts)
    uids = facts.get("image_uids", set())
    facts["image_uid"] = next(iter(uids)) if len(uids) == 1 else None
    if len(uids) > 1:
        fail("deploy/docker", f"the images run as different users {sorted(uids)}")
    check_kubernetes(facts)
    checked = f"{len(dockerfiles)} Dockerfiles, {len(list((DEPLOY / 'kubernetes').rglob('*.yaml')))} manifests"
    if failures:
        print(f"deploy: {len(failures)} failed ({checked})")
        return 1
    print(f"deploy: all passed ({checked}{', flags from ' + options.tpserve if options.tpserve else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

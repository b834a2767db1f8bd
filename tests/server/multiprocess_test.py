#!/usr/bin/env python3
"""Multi-process tensor parallelism with real processes, on loopback and across two network
namespaces joined by a veth pair: members give the same tokens and logprobs as one process at the
same TP; a mismatched member is refused on both sides; a killed follower fails the leader quickly,
and a killed leader ends its followers; a serve group's prefix cache hits across its two processes
and changes no token.

    multiprocess_test.py TPSERVE_BINARY
"""
import json
import os
import urllib.request
import shutil
import signal
import socket
import subprocess
import sys
import time

TPSERVE = sys.argv[1]
COMMON = ["generate", "--model", "tiny", "--load-format", "dummy", "--device", "cpu", "--prompt",
          "The capital of France is", "--logprobs", "2", "--json"]
failures = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)


def group(members, tp, extra=(), follower_extra=(), max_tokens=16):
    """Starts followers 1..members-1, then runs the leader; returns (leader result, follower procs)."""
    port = free_port()
    flags = lambda i: ["--tp", str(tp), "--nnodes", str(members), "--node-rank", str(i), "--rendezvous",
                       f"127.0.0.1:{port}", "--group-timeout-ms", "10000"]
    followers = [subprocess.Popen([TPSERVE, *COMMON, "--max-tokens", str(max_tokens), *flags(i), *follower_extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(1, members)]
    leader = subprocess.run([TPSERVE, *COMMON, "--max-tokens", str(max_tokens), *flags(0), *extra],
                            capture_output=True, text=True, timeout=120)
    return leader, followers


def wait_until_following(follower, seconds=60):
    """Reads the follower's log until it follows the leader's steps (the group is up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = follower.stderr.readline()
        if not line:
            return False
        if "following the leader's steps" in line:
            return True
    return False


def outputs(stdout):
    return json.loads(stdout)["outputs"]


for members in (2, 4):
    single = subprocess.run([TPSERVE, *COMMON, "--max-tokens", "16", "--tp", str(members)],
                            capture_output=True, text=True, timeout=120, check=True)
    leader, followers = group(members, members)
    codes = [f.wait(timeout=60) for f in followers]
    check(leader.returncode == 0, f"{members} members: the leader finished ({leader.stderr[-300:]!r})")
    check(codes == [0] * (members - 1), f"{members} members: every follower exited 0 at shutdown ({codes})")
    if leader.returncode == 0:
        check(outputs(leader.stdout) == outputs(single.stdout),
              f"{members} processes x 1 rank: the same tokens and logprobs as one process at TP={members}")

# Two members of two ranks each: the ranks that share a process meet in memory and one Gloo
# connection joins the members; still bitwise the single process at TP=4.
single_tp4 = subprocess.run([TPSERVE, *COMMON, "--max-tokens", "16", "--tp", "4"], capture_output=True, text=True,
                            timeout=120, check=True)
leader, followers = group(2, 4)
codes = [f.wait(timeout=60) for f in followers]
check(leader.returncode == 0 and codes == [0], f"2 members x 2 ranks: both finished ({leader.stderr[-300:]!r})")
if leader.returncode == 0:
    check(outputs(leader.stdout) == outputs(single_tp4.stdout),
          "2 processes x 2 ranks: the same tokens and logprobs as one process at TP=4")

# A member that loaded something else is refused, with the difference on both sides.
leader, followers = group(2, 2, follower_extra=["--block-size", "8"])
follower_err = followers[0].communicate(timeout=60)[1]
check(leader.returncode != 0 and "different model or flags" in leader.stderr,
      "a mismatched follower: the leader refuses it by name")
check(followers[0].returncode != 0 and "different model or flags" in follower_err,
      f"a mismatched follower: the follower says why too ({follower_err[-300:]!r})")

# A follower killed mid-stream: the leader fails within the timeout, with a non-zero exit.
port = free_port()
flags = lambda i: ["--tp", "2", "--nnodes", "2", "--node-rank", str(i), "--rendezvous", f"127.0.0.1:{port}",
                   "--group-timeout-ms", "5000"]
LONG = ["--max-tokens", "2000", "--batch", "16", "--ignore-eos"]  # ~10 s of decoding here
follower = subprocess.Popen([TPSERVE, *COMMON, *LONG, *flags(1)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
leader = subprocess.Popen([TPSERVE, *COMMON, *LONG, *flags(0)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
check(wait_until_following(follower), "a killed follower: the group came up")
time.sleep(1)
check(leader.poll() is None, "a killed follower: the leader was still decoding when the follower was killed")
follower.send_signal(signal.SIGKILL)
killed_at = time.monotonic()
try:
    leader_err = leader.communicate(timeout=30)[1]
    check(leader.returncode != 0, f"a killed follower: the leader exits non-zero ({leader.returncode})")
    check(time.monotonic() - killed_at < 15, f"... within {time.monotonic() - killed_at:.1f} s of the kill")
    check("Gloo" in leader_err or "UNAVAILABLE" in leader_err, f"... saying the group failed ({leader_err[-300:]!r})")
except subprocess.TimeoutExpired:
    leader.kill()
    check(False, "a killed follower: the leader hung")

# A leader killed mid-stream: the follower exits.
port = free_port()
follower = subprocess.Popen([TPSERVE, *COMMON, *LONG, *flags(1)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
leader = subprocess.Popen([TPSERVE, *COMMON, *LONG, *flags(0)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
check(wait_until_following(follower), "a killed leader: the group came up")
time.sleep(1)
check(follower.poll() is None, "a killed leader: the follower was still following when the leader was killed")
leader.send_signal(signal.SIGKILL)
try:
    follower.communicate(timeout=30)
    check(follower.returncode != 0, f"a killed leader: the follower exits non-zero ({follower.returncode})")
except subprocess.TimeoutExpired:
    follower.kill()
    check(False, "a killed leader: the follower hung")


# The server as leader: a follower killed while a request streams takes the engine-failed path —
# the request gets UNAVAILABLE, the leader reports NOT_SERVING and exits with status 3 by itself
# (--failure-exit-seconds) for its supervisor to restart the group. An idle leader notices too
# (its heartbeat), which the second run checks.
def serve_leader_loses_follower(while_streaming, stall=False):
    what = "serve as leader, follower " + ("stopped (SIGSTOP)" if stall else "killed") + \
        (" mid-stream" if while_streaming else " while idle")
    port = free_port()
    serve_flags = lambda i: ["serve", "--model", "tiny", "--load-format", "dummy", "--device", "cpu", "--tp", "2",
                             "--nnodes", "2", "--node-rank", str(i), "--rendezvous", f"127.0.0.1:{port}",
                             "--group-timeout-ms", "5000", "--port", "0", "--metrics-port", "0",
                             "--failure-exit-seconds", "2"]
    follower = subprocess.Popen([TPSERVE, *serve_flags(1)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    leader = subprocess.Popen([TPSERVE, *serve_flags(0)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    leader_log = []
    target = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and target is None:
        line = leader.stderr.readline()
        if not line:
            break
        leader_log.append(line)
        if "tpserve ready: grpc " in line:
            target, _, metrics = line.split("tpserve ready: grpc ")[1].split()[:3]
    check(target is not None, f"{what}: ready with a follower ({''.join(leader_log)[-300:]!r})")
    if target is None:
        leader.kill()
        follower.kill()
        return
    client = None
    if while_streaming:
        client = subprocess.Popen([TPSERVE, "client", "--target", target, "--prompt", "keep going", "--max-tokens",
                                   "2040", "--ignore-eos", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
    time.sleep(2)
    if client:
        check(client.poll() is None, f"{what}: the request was still streaming at the kill")
    watch_members = not stall and not while_streaming
    if watch_members:
        before = scrape_values(metrics, ("tpserve_group_size", "tpserve_group_members", "tpserve_engine_healthy"))
        check(before == [2, 2, 1], f"{what}: the leader's /metrics counts 2 of 2 members, healthy ({before})")
    follower.send_signal(signal.SIGSTOP if stall else signal.SIGKILL)
    if not stall:
        follower.wait()
    killed_at = time.monotonic()
    if watch_members:
        # Its rendezvous connection closed with it: the leader counts one member at once, before the
        # heartbeat fails the engine (2 s of NOT_SERVING follow, then exit 3).
        seen = None
        while time.monotonic() - killed_at < 5 and leader.poll() is None:
            try:
                seen = scrape_values(metrics, ("tpserve_group_members",))
            except OSError:
                break
            if seen == [1]:
                break
            time.sleep(0.05)
        check(seen == [1], f"{what}: the leader's tpserve_group_members drops to 1 ({seen})")
    try:
        if client:
            client_out, client_err = client.communicate(timeout=30)
            check(client.returncode != 0 and "UNAVAILABLE" in client_out + client_err,
                  f"{what}: the in-flight request got UNAVAILABLE ({(client_out + client_err)[-200:]!r})")
        rest = leader.communicate(timeout=30)[1]
        exited_after = time.monotonic() - killed_at
        check(leader.returncode == 3, f"{what}: the leader exits with status 3 by itself ({leader.returncode})")
        check(exited_after < 20, f"... {exited_after:.1f} s later (detection, then NOT_SERVING for 2 s)")
        check("NOT_SERVING" in rest, f"... after reporting NOT_SERVING ({rest[-300:]!r})")
    except subprocess.TimeoutExpired:
        for p in (client, leader):
            if p:
                p.kill()
        check(False, f"{what}: the client or the leader hung")
    if stall:
        follower.kill()
        follower.wait()


def scrape_values(address, names):
    """The values of unlabelled samples `names` on http://address/metrics, in order (None if absent)."""
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and line[0] != "#"}
    return [values.get(name) for name in names]


def start_serve(extra, name):
    """Starts `serve` with `extra` flags; returns (process, grpc target, metrics address) once ready."""
    proc = subprocess.Popen([TPSERVE, "serve", "--model", "tiny", "--load-format", "dummy", "--device", "cpu",
                             "--port", "0", "--metrics-port", "0", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        if "tpserve ready: grpc " in line:
            words = line.split("tpserve ready: grpc ")[1].split()
            return proc, words[0], words[2]
    check(False, f"{name}: serve became ready ({''.join(log)[-300:]!r})")
    proc.kill()
    return proc, None, None


def serve_group_prefix_cache():
    """Requests that share a long prefix, one after another, through a two-process TP=2 group with
    the prefix cache on (the default) and through one process at TP=2 with it off: the same tokens,
    greedy and seeded, and the group's leader counts cache hits."""
    system = "You are a careful assistant who answers in one short sentence. " * 6
    prompts = [(system + "What is the capital of France?", []), (system + "Name a prime number.", []),
               (system + "What is the capital of France?", []),
               (system + "What is the capital of France?", ["--temperature", "0.8", "--seed", "7"])]
    port = free_port()
    group_flags = lambda i: ["--tp", "2", "--nnodes", "2", "--node-rank", str(i), "--rendezvous", f"127.0.0.1:{port}",
                             "--group-timeout-ms", "10000"]
    follower = subprocess.Popen([TPSERVE, "serve", "--model", "tiny", "--load-format", "dummy", "--device", "cpu",
                                 "--port", "0", "--metrics-port", "0", *group_flags(1)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = {}
    for name, extra in (("group, cache on", group_flags(0)), ("one process, cache off", ["--tp", "2", "--prefix-caching", "off"])):
        proc, target, metrics = start_serve(extra, name)
        if target is None:
            follower.kill()
            return
        outputs_of_run = []
        for prompt, sampling in prompts:
            out = subprocess.run([TPSERVE, "client", "--target", target, "--prompt", prompt, "--max-tokens", "8",
                                  "--ignore-eos", *sampling, "--json"], capture_output=True, text=True, timeout=60)
            outputs_of_run.append(json.loads(out.stdout)["token_ids"] if out.returncode == 0 else out.stderr[-200:])
        hits = scrape_values(metrics, ("tpserve_prefix_cache_hits_total",))[0]
        runs[name] = (outputs_of_run, -1 if hits is None else hits)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    follower.communicate(timeout=30)
    group_outputs, group_hits = runs["group, cache on"]
    single_outputs, single_hits = runs["one process, cache off"]
    check(all(isinstance(o, list) and len(o) == 8 for o in group_outputs + single_outputs),
          f"every request was served ({group_outputs + single_outputs!r:.300})")
    check(group_outputs == single_outputs, "a TP=2 group with the prefix cache gives the tokens of one process "
                                           "without it, greedy and seeded")
    check(group_hits > 0 and single_hits == 0,
          f"the group's leader counts prefix cache hits ({group_hits:g} tokens; off: {single_hits:g})")


serve_group_prefix_cache()
serve_leader_loses_follower(while_streaming=True)
serve_leader_loses_follower(while_streaming=False)
# A stalled follower (alive, silent): the leader's collective gives up after --group-timeout-ms (5 s).
serve_leader_loses_follower(while_streaming=True, stall=True)

def across_network_namespaces(expected):
    """The 2-member run with each member in its own network namespace, joined by a veth pair with
    private addresses that exist only inside the namespaces: the traffic crosses a real network
    stack and never leaves this machine. Needs root with CAP_NET_ADMIN; only CI may skip it."""
    if shutil.which("ip") is None:  # scripts/setup.sh installs it
        check(False, "two network namespaces: 'ip' is not installed (apt-get install iproute2; scripts/setup.sh does)")
        return
    tag = str(os.getpid() % 100000)
    names = [f"tps-a-{tag}", f"tps-b-{tag}"]
    addresses = ["10.199.0.1", "10.199.0.2"]
    setup = [["ip", "netns", "add", names[0]], ["ip", "netns", "add", names[1]],
             ["ip", "link", "add", f"tpa{tag}", "type", "veth", "peer", "name", f"tpb{tag}"],
             ["ip", "link", "set", f"tpa{tag}", "netns", names[0]], ["ip", "link", "set", f"tpb{tag}", "netns", names[1]],
             ["ip", "-n", names[0], "addr", "add", addresses[0] + "/24", "dev", f"tpa{tag}"],
             ["ip", "-n", names[1], "addr", "add", addresses[1] + "/24", "dev", f"tpb{tag}"],
             ["ip", "-n", names[0], "link", "set", f"tpa{tag}", "up"], ["ip", "-n", names[1], "link", "set", f"tpb{tag}", "up"],
             ["ip", "-n", names[0], "link", "set", "lo", "up"], ["ip", "-n", names[1], "link", "set", "lo", "up"]]
    try:
        for command in setup:
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                why = f"cannot make network namespaces ({' '.join(command)}: {result.stderr.strip()})"
                if os.environ.get("CI"):
                    print("skip network namespaces in CI: " + why, flush=True)
                else:
                    check(False, why)
                return
        port = free_port()
        flags = lambda i: ["--tp", "2", "--nnodes", "2", "--node-rank", str(i), "--rendezvous", f"{addresses[0]}:{port}",
                           "--bind-address", addresses[i], "--group-timeout-ms", "10000"]
        follower = subprocess.Popen(["ip", "netns", "exec", names[1], TPSERVE, *COMMON, "--max-tokens", "16", *flags(1)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        leader = subprocess.run(["ip", "netns", "exec", names[0], TPSERVE, *COMMON, "--max-tokens", "16", *flags(0)],
                                capture_output=True, text=True, timeout=120)
        follower.wait(timeout=60)
        check(leader.returncode == 0 and follower.returncode == 0,
              f"two network namespaces over a veth pair: both members finished ({leader.stderr[-200:]!r})")
        if leader.returncode == 0:
            check(outputs(leader.stdout) == expected,
                  "two network namespaces: the same tokens and logprobs as one process at TP=2")
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def hostile_members():
    """The rendezvous under hostile use (issue 27): a member with another secret is refused by name; with
    the same secret (one from a file, one from the environment) the group forms, and a second process
    with a member's --node-rank ends within the group timeout instead of waiting for ever; SIGTERM
    ends a serve member still waiting for its group."""
    secret_file = f"/tmp/tpserve-group-secret-{os.getpid()}"
    with open(secret_file, "w") as f:
        f.write("multiprocess-test-secret-0123456789\n")
    try:
        port = free_port()
        flags = lambda i: ["--tp", "2", "--nnodes", "2", "--node-rank", str(i), "--rendezvous", f"127.0.0.1:{port}",
                           "--group-timeout-ms", "4000"]
        env = lambda secret: {**os.environ, "TPSERVE_GROUP_SECRET": secret}
        leader = subprocess.Popen([TPSERVE, *COMMON, "--max-tokens", "16", *flags(0), "--group-secret-file", secret_file],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stranger = subprocess.run([TPSERVE, *COMMON, "--max-tokens", "16", *flags(1)], capture_output=True, text=True,
                                  timeout=60, env=env("another-secret-0123456789"))
        _, leader_err = leader.communicate(timeout=60)
        check(stranger.returncode != 0 and "wrong group secret" in stranger.stderr,
              f"a member with another secret is refused by name ({stranger.stderr[-200:]!r})")
        check(leader.returncode != 0, "... and the leader, whose member never came, gives up within the group timeout")

        port = free_port()
        follower = subprocess.Popen([TPSERVE, *COMMON, "--max-tokens", "200", "--ignore-eos", *flags(1)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=env("multiprocess-test-secret-0123456789"))
        leader = subprocess.Popen([TPSERVE, *COMMON, "--max-tokens", "200", "--ignore-eos", *flags(0),
                                   "--group-secret-file", secret_file],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        formed = wait_until_following(follower)
        started = time.monotonic()
        duplicate = subprocess.run([TPSERVE, *COMMON, "--max-tokens", "16", *flags(1)], capture_output=True, text=True,
                                   timeout=60, env=env("multiprocess-test-secret-0123456789"))
        waited = time.monotonic() - started
        leader_out, _ = leader.communicate(timeout=120)
        follower.communicate(timeout=60)
        check(formed and leader.returncode == 0 and follower.returncode == 0,
              "the same secret from a file and from TPSERVE_GROUP_SECRET: the group forms and finishes")
        check(duplicate.returncode != 0 and waited < 30,
              f"a duplicate --node-rank 1 ends in {waited:.1f} s, not a year ({duplicate.stderr[-160:]!r})")

        port = free_port()
        waiting = subprocess.Popen([TPSERVE, "serve", "--model", "tiny", "--load-format", "dummy", "--device", "cpu",
                                    "--port", "0", "--metrics-port", "0", "--tp", "2", "--nnodes", "2", "--node-rank",
                                    "1", "--rendezvous", f"127.0.0.1:{port}", "--group-timeout-ms", "600000"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        waiting.send_signal(signal.SIGTERM)
        try:
            waiting.communicate(timeout=10)
            check(waiting.returncode == 128 + signal.SIGTERM,
                  f"SIGTERM ends a serve member waiting for its group (exit {waiting.returncode})")
        except subprocess.TimeoutExpired:
            waiting.kill()
            waiting.communicate()
            check(False, "SIGTERM ends a serve member waiting for its group (it was still there 10 s later)")
    finally:
        os.remove(secret_file)


single_tp2 = subprocess.run([TPSERVE, *COMMON, "--max-tokens", "16", "--tp", "2"], capture_output=True, text=True,
                            timeout=120, check=True)
hostile_members()
across_network_namespaces(outputs(single_tp2.stdout))

print("multiprocess: " + ("all passed" if not failures else f"{len(failures)} failed"))
sys.exit(1 if failures else 0)

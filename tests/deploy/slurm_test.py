#!/usr/bin/env python3
"""deploy/slurm/tpserve.sbatch against stand-ins for Slurm, the resolver and tpserve.

The stand-ins (on PATH ahead of the real tools): `scontrol show hostnames` expands the job's node
list; `srun` runs the command once per node with SLURM_NODEID / SLURMD_NODENAME set, as Slurm does
with --ntasks-per-node=1, and records its own flags; `getent ahostsv4` and `ip -4 -o route get` /
`ip -4 -o addr show dev` answer from a table of node addresses; the stand-in tpserve records its
arguments. Checked: every node gets --nnodes N, its own --node-rank, the first node's rendezvous, its
own address as --bind-address, --tp N x GPUs per node, --http-port from TPSERVE_HTTP_PORT (8000 by
default, none when it is empty), and the user's flags unchanged; the flags the script derives are
refused.

  slurm_test.py [SBATCH_SCRIPT]
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "deploy/slurm/tpserve.sbatch"

NODES = ["gpu-a07", "gpu-a08", "gpu-b01"]
ADDRESSES = {"gpu-a07": "10.20.0.7", "gpu-a08": "10.20.0.8", "gpu-b01": "10.20.1.1"}
IB_ADDRESSES = {"gpu-a07": "192.168.7.7", "gpu-a08": "192.168.7.8", "gpu-b01": "192.168.8.1"}

STANDINS = {
    # Slurm's own expansion of "gpu-a[07-08],gpu-b01" is what the script must rely on.
    "scontrol": r"""#!/usr/bin/env bash
[[ "$1 $2" == "show hostnames" ]] || { echo "scontrol stand-in: unexpected $*" >&2; exit 1; }
[[ "$3" == "gpu-a[07-08],gpu-b01" ]] || { echo "scontrol stand-in: node list '$3'" >&2; exit 1; }
printf '%s\n' NODES_HERE
""",
    "srun": r"""#!/usr/bin/env bash
flags=()
while [[ $# -gt 0 && $1 == --* ]]; do flags+=("$1"); shift; done
printf '%s\n' "${flags[@]}" > "$STANDIN_OUT/srun-flags"
if [[ -n ${TPSERVE_PROMETHEUS_TARGETS_DIR:-} ]]; then  # what Prometheus would find while the job runs
  cat "$TPSERVE_PROMETHEUS_TARGETS_DIR"/*.json > "$STANDIN_OUT/targets-during" 2>/dev/null || true
fi
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
pids=()
for i in "${!nodes[@]}"; do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 SLURMD_NODENAME=${nodes[$i]} "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
""",
    "getent": r"""#!/usr/bin/env bash
[[ $1 == ahostsv4 ]] || exit 2
case "$2" in
ADDRESS_CASES
  *) exit 2 ;;
esac
""",
    # `ip -4 -o route get ADDR`: the source address is the calling node's own.
    "ip": r"""#!/usr/bin/env bash
[[ "$1 $2" == "-4 -o" ]] || { echo "ip stand-in: unexpected $*" >&2; exit 1; }
case "$3 $4" in
  "route get")
    case "$SLURMD_NODENAME" in
SOURCE_CASES
    esac ;;
  "addr show")
    [[ "$5 $6" == "dev ib0" ]] || exit 1
    case "$SLURMD_NODENAME" in
IB_CASES
    esac ;;
  *) exit 1 ;;
esac
""",
    "tpserve": r"""#!/usr/bin/env bash
python3 -c 'import json, os, sys; json.dump({"args": sys.argv[1:], "node": os.environ["SLURMD_NODENAME"],
  "nccl_debug": os.environ.get("NCCL_DEBUG"), "secret": os.environ.get("TPSERVE_GROUP_SECRET")}, open(os.path.join(os.environ["STANDIN_OUT"],
  "tpserve-" + os.environ["SLURM_NODEID"] + ".json"), "w"))' "$@"
""",
}


def write_standins(directory: pathlib.Path) -> None:
    cases = {
        "NODES_HERE": " ".join(NODES),
        "ADDRESS_CASES": "\n".join(f'  {n}) echo "{a}     STREAM {n}" ;;' for n, a in ADDRESSES.items()),
        "SOURCE_CASES": "\n".join(f'      {n}) echo "$5 dev eth0 src {a} uid 1000" ;;' for n, a in ADDRESSES.items()),
        "IB_CASES": "\n".join(f'      {n}) echo "5: ib0    inet {a}/16 brd 192.168.255.255 scope global ib0" ;;'
                              for n, a in IB_ADDRESSES.items()),
    }
    for name, text in STANDINS.items():
        for key, value in cases.items():
            text = text.replace(key, value)
        path = directory / name
        path.write_text(text)
        path.chmod(0o755)


def run_job(work: pathlib.Path, args, extra_env=None):
    out = work / "out"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    env = {
        "PATH": f"{work / 'bin'}:{os.environ['PATH']}",
        "HOME": str(work),
        "STANDIN_OUT": str(out),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu-a[07-08],gpu-b01",
        "SLURMD_NODENAME": NODES[0],  # the batch step runs on the allocation's first node
        "TPSERVE_BIN": str(work / "bin" / "tpserve"),
        "NCCL_DEBUG": "INFO",
    }
    env.update(extra_env or {})
    result = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
    members = {}
    for path in out.glob("tpserve-*.json"):
        record = json.loads(path.read_text())
        members[int(path.stem.split("-")[1])] = record
    srun_flags = (out / "srun-flags").read_text().split() if (out / "srun-flags").exists() else []
    return result, members, srun_flags


def flag(args, name):
    assert args.count(name) == 1, f"{name} appears {args.count(name)} times in {args}"
    return args[args.index(name) + 1]


failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


with tempfile.TemporaryDirectory(prefix="tpserve-slurm-") as tmp:
    work = pathlib.Path(tmp)
    (work / "bin").mkdir()
    write_standins(work / "bin")
    user_args = ["--model", "/shared/models/Llama 3.1 70B", "--host", "0.0.0.0", "--stop-words", "a'b \"c\""]

    # Three nodes, default addresses: each node's route source towards the first node.
    result, members, srun_flags = run_job(work, user_args)
    check(result.returncode == 0, f"the job failed ({result.returncode}): {result.stderr}")
    check(sorted(members) == [0, 1, 2], f"members that ran: {sorted(members)}")
    check("--ntasks-per-node=1" in srun_flags and "--kill-on-bad-exit=1" in srun_flags and "--ntasks=3" in srun_flags,
          f"srun flags: {srun_flags}")
    check("3 node(s) (gpu-a07 gpu-a08 gpu-b01), rendezvous gpu-a07:29500, tp 24 (8 per node), http 8000"
          in result.stdout,
          f"the job log: {result.stdout!r}")
    for rank, member in sorted(members.items()):
        args = member["args"]
        check(args[0] == "serve", f"member {rank}: subcommand {args[0]}")
        check(flag(args, "--nnodes") == "3", f"member {rank}: --nnodes {flag(args, '--nnodes')}")
        check(flag(args, "--node-rank") == str(rank), f"member {rank}: --node-rank {flag(args, '--node-rank')}")
        check(member["node"] == NODES[rank], f"member {rank} ran on {member['node']}")
        check(flag(args, "--rendezvous") == "gpu-a07:29500", f"member {rank}: --rendezvous {flag(args, '--rendezvous')}")
        check(flag(args, "--bind-address") == ADDRESSES[NODES[rank]],
              f"member {rank}: --bind-address {flag(args, '--bind-address')}")
        check(flag(args, "--tp") == "24", f"member {rank}: --tp {flag(args, '--tp')}")
        # Every member: a follower ignores it (it starts no front end), and the args stay alike.
        check(flag(args, "--http-port") == "8000", f"member {rank}: --http-port {flag(args, '--http-port')}")
        check(args[-len(user_args):] == user_args, f"member {rank}: the user's flags became {args[-len(user_args):]}")
        check(member["nccl_debug"] == "INFO", f"member {rank}: NCCL_DEBUG {member['nccl_debug']}")
    # One rendezvous secret per job, the same on every member, made when none is given.
    secrets = {member["secret"] for member in members.values()}
    check(len(secrets) == 1 and re.fullmatch(r"[0-9a-f]{64}", next(iter(secrets)) or ""),
          f"the members' TPSERVE_GROUP_SECRET: {secrets}")
    _, again, _ = run_job(work, user_args)
    check({member["secret"] for member in again.values()}.isdisjoint(secrets), "a second job made the same secret")
    _, given, _ = run_job(work, user_args, {"TPSERVE_GROUP_SECRET": "the-users-own-secret-0123456789"})
    check({member["secret"] for member in given.values()} == {"the-users-own-secret-0123456789"},
          "a TPSERVE_GROUP_SECRET given to sbatch is the members'")

    # An interface by name, another port and 4 GPUs per node.
    result, members, _ = run_job(work, ["--model", "/m"], {"TPSERVE_BIND_INTERFACE": "ib0", "TPSERVE_RENDEZVOUS_PORT": "31000",
                                                           "TPSERVE_GPUS_PER_NODE": "4", "TPSERVE_HTTP_PORT": "8080"})
    check(result.returncode == 0, f"the ib0 job failed: {result.stderr}")
    for rank, member in sorted(members.items()):
        check(flag(member["args"], "--bind-address") == IB_ADDRESSES[NODES[rank]],
              f"ib0 member {rank}: --bind-address {flag(member['args'], '--bind-address')}")
        check(flag(member["args"], "--rendezvous") == "gpu-a07:31000", f"ib0 member {rank}: rendezvous")
        check(flag(member["args"], "--tp") == "12", f"ib0 member {rank}: --tp {flag(member['args'], '--tp')}")
        check(flag(member["args"], "--http-port") == "8080", f"ib0 member {rank}: --http-port")

    # Prometheus targets: the leader's /metrics at the user's --metrics-port, there while the job runs.
    targets = work / "prometheus.d"
    targets.mkdir()
    result, members, _ = run_job(work, ["--model", "/m", "--metrics-port", "9191", "--metrics-host", "0.0.0.0"],
                                 {"TPSERVE_PROMETHEUS_TARGETS_DIR": str(targets)})
    during = work / "out" / "targets-during"
    check(result.returncode == 0 and during.exists(), f"the job with a targets dir: {result.returncode} {result.stderr!r}")
    if during.exists():
        check(json.loads(during.read_text()) == [{"targets": ["gpu-a07:9191"], "labels": {"slurm_job_id": "4242"}}],
              f"the Prometheus targets file: {during.read_text()!r}")
    check(not list(targets.iterdir()), f"the targets file outlives the job: {list(targets.iterdir())}")
    result, _, _ = run_job(work, ["--model", "/m", "--metrics-port=9292"], {"TPSERVE_PROMETHEUS_TARGETS_DIR": str(targets)})
    check(during.exists() and "gpu-a07:9292" in during.read_text(), "--metrics-port=N form: the targets file names it")

    # TPSERVE_HTTP_PORT set but empty: no HTTP API.
    result, members, _ = run_job(work, ["--model", "/m"], {"TPSERVE_HTTP_PORT": ""})
    check(result.returncode == 0 and sorted(members) == [0, 1, 2] and "http off" in result.stdout,
          f"the job without HTTP: status {result.returncode}, {result.stdout!r} {result.stderr!r}")
    for rank, member in sorted(members.items()):
        check("--http-port" not in member["args"], f"no-HTTP member {rank}: {member['args']}")

    # A port that is not a number is refused before anything runs.
    result, members, _ = run_job(work, ["--model", "/m"], {"TPSERVE_HTTP_PORT": "http"})
    check(result.returncode == 2 and not members and "not a port number" in result.stderr,
          f"TPSERVE_HTTP_PORT=http: status {result.returncode}, members {sorted(members)}, {result.stderr!r}")

    # The flags the allocation decides are refused before anything runs.
    for refused in (["--tp", "8"], ["--tp=8"], ["--nnodes", "2"], ["--node-rank=1"], ["--rendezvous", "h:1"],
                    ["--bind-address", "10.0.0.1"]):
        result, members, _ = run_job(work, ["--model", "/m", *refused])
        check(result.returncode == 2 and not members and "comes from the allocation" in result.stderr,
              f"{refused}: status {result.returncode}, members {sorted(members)}, {result.stderr!r}")
    for refused in (["--http-port", "9000"], ["--http-port=9000"]):
        result, members, _ = run_job(work, ["--model", "/m", *refused])
        check(result.returncode == 2 and not members and "comes from TPSERVE_HTTP_PORT" in result.stderr,
              f"{refused}: status {result.returncode}, members {sorted(members)}, {result.stderr!r}")

    # A member that fails fails the job.
    (work / "bin" / "tpserve").write_text("#!/usr/bin/env bash\n[[ $SLURM_NODEID != 2 ]]\n")
    result, _, _ = run_job(work, ["--model", "/m"])
    check(result.returncode != 0, "a failed member did not fail the job")

if failures:
    print(f"slurm: {len(failures)} failed")
    sys.exit(1)
print("slurm: all passed")

#!/usr/bin/env python3
"""check_deploy.py catches what it claims to: each case copies what the checker reads into a
scratch checkout, breaks one thing, and expects the checker to fail naming it (and the unbroken
copy to pass).

  check_deploy_selftest.py [TPSERVE_BINARY]
"""
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
CHECKER = REPO / "tests/deploy/check_deploy.py"
TPSERVE = sys.argv[1] if len(sys.argv) > 1 else None

SINGLE = "deploy/kubernetes/single-node/deployment.yaml"
SINGLE_CONFIG = "deploy/kubernetes/single-node/configmap.yaml"
SINGLE_SERVICE = "deploy/kubernetes/single-node/service.yaml"
LWS = "deploy/kubernetes/multi-node/leaderworkerset.yaml"
LWS_CONFIG = "deploy/kubernetes/multi-node/configmap.yaml"
LWS_SERVICE = "deploy/kubernetes/multi-node/service.yaml"
CPU = "deploy/docker/Dockerfile"
CUDA = "deploy/docker/Dockerfile.cuda"

# (file, text, replacement, what the failure must say)
CASES = [
    (SINGLE, "nvidia.com/gpu: 8", "cpu: 8", "resources.limits['nvidia.com/gpu']"),
    (SINGLE, "livenessProbe:\n            exec:\n              command: [tpserve, health,",
     "livenessProbe:\n            exec:\n              command: [grpc_health_probe, -addr,", "not `tpserve health`"),
    (SINGLE, "timeoutSeconds: 5\n            failureThreshold: 2", "timeoutSeconds: 3\n            failureThreshold: 2",
     "readinessProbe timeoutSeconds 3 does not exceed"),
    (SINGLE, "- --metrics-host=0.0.0.0", "- --metrics-port=9091", "--metrics-host is None"),
    (SINGLE, "- --tp=$(TPSERVE_TP)", "- --tp=$(TPSERVE_TP_TYPO)", "$(TPSERVE_TP_TYPO), which neither env nor envFrom"),
    (SINGLE, "runAsUser: 10001", "runAsUser: 0", "must run as non-root"),
    (SINGLE, "mountPath: /dev/shm", "mountPath: /dev/shared", "no /dev/shm volume"),
    (SINGLE_CONFIG, 'TPSERVE_DRAIN_SECONDS: "30"', 'TPSERVE_DRAIN_SECONDS: "60"',
     "terminationGracePeriodSeconds 45 leaves no room for --drain-seconds 60"),
    (SINGLE_CONFIG, 'TPSERVE_TP: "8"', 'TPSERVE_TP: "4"', "--tp 4 is not the pod's 8 GPUs"),
    (SINGLE_CONFIG, 'TPSERVE_MAX_QUEUE: "256"', "TPSERVE_MAX_QUEUE: 256", "is not a string"),
    (SINGLE_CONFIG, "NCCL_DEBUG: WARN", "NCCL_DEBUG: WARN\n  TPSERVE_ASSETS: /x", "a variable tpserve itself reads"),
    (SINGLE_SERVICE, "targetPort: metrics", "targetPort: prometheus", "targetPort 'prometheus' is not a named port"),
    (SINGLE_SERVICE, "app.kubernetes.io/component: server\n  ports", "app.kubernetes.io/component: frontend\n  ports",
     "matches no serving pod"),
    (LWS, "restartPolicy: RecreateGroupOnPodRestart", "restartPolicy: None", "restartPolicy 'None'"),
    (LWS, "startupPolicy: LeaderCreated", "startupPolicy: LeaderReady", "startupPolicy LeaderReady"),
    (LWS, "- --bind-address=$(POD_IP)", "- --bind-address=$(POD_IP)\n              - --nnodes=2",
     "--nnodes given: flags win over LWS_* variables"),
    (LWS, "fieldPath: status.podIP", "fieldPath: status.hostIP", "--bind-address must be $(POD_IP)"),
    (LWS, "containerPort: 29500", "containerPort: 29501", "no containerPort 'rendezvous' 29500"),
    (LWS, "size: 2", "size: 3", "--tp 16 is not size 3 x 8 GPUs per pod"),
    (LWS, "args: *serve-args", "args: [serve, --tp=16]", "leader and worker args differ"),
    (LWS, "            env: *member-env", "            env:\n              - name: LWS_GROUP_SIZE\n                value: \"4\"",
     "env sets LWS_GROUP_SIZE"),
    (LWS, "            volumeMounts: *member-mounts\n        volumes: *member-volumes",
     "            volumeMounts: *member-mounts\n            livenessProbe:\n              exec:\n                command: [tpserve, health]\n        volumes: *member-volumes",
     "a worker has no gRPC server to answer its livenessProbe"),
    (LWS, 'until getent hosts "$LWS_LEADER_ADDRESS"', "sleep 5", "no init container waits for LWS_LEADER_ADDRESS"),
    (LWS_CONFIG, 'TPSERVE_TP: "16"', 'TPSERVE_TP: "8"', "--tp 8 is not size 2 x 8 GPUs per pod"),
    (LWS_SERVICE, 'leaderworkerset.sigs.k8s.io/worker-index: "0"', 'leaderworkerset.sigs.k8s.io/worker-index: "1"',
     "matches no serving pod"),
    ("comm/group_membership.cc", '"LWS_WORKER_INDEX", "MASTER_ADDR"', '"LWS_INDEX", "MASTER_ADDR"',
     "tpserve no longer reads ['LWS_WORKER_INDEX']"),
    ("comm/group_membership.h", "kDefaultRendezvousPort = 29500", "kDefaultRendezvousPort = 29400",
     "no containerPort 'rendezvous' 29400"),
    # The OpenAI-compatible HTTP API: --http-port = container port 'http' = the Service's target, EXPOSEd.
    (SINGLE, "            - --http-port=8000  # the OpenAI-compatible HTTP API (/v1/..., /health) on --host\n", "",
     "no --http-port: the OpenAI-compatible HTTP API is off"),
    (SINGLE, "- --http-port=8000", "- --http-port=8001", "container port 'http' is 8000, not --http-port 8001"),
    (SINGLE, "- --http-port=8000", "- --http-port=0", "--http-port 0 picks a free port"),
    (SINGLE, "- --http-port=8000", "- --http-port=50051", "--http-port 50051 is also the gRPC or metrics port"),
    (SINGLE, "containerPort: 8000", "containerPort: 8080", "container port 'http' is 8080, not --http-port 8000"),
    (SINGLE, "            - --served-model-name=$(TPSERVE_SERVED_MODEL_NAME)\n", "", "no --served-model-name"),
    (SINGLE_CONFIG, "TPSERVE_SERVED_MODEL_NAME: ", "TPSERVE_MODEL_NAME: ",
     "$(TPSERVE_SERVED_MODEL_NAME), which neither env nor envFrom"),
    (SINGLE_SERVICE, "targetPort: http", "targetPort: 8080",
     "port http's targetPort 8080 is 8080, not the pod's --http-port 8000"),
    (SINGLE_SERVICE, "port: 8000", "port: 80", "port http is 80, not 8000"),
    (SINGLE_SERVICE, "    - name: http\n      port: 8000\n", "    - name: web\n      port: 8000\n",
     "expected grpc, metrics and http"),
    (LWS, "              - --http-port=8000\n", "", "leader container tpserve: no --http-port"),
    (LWS, "              - name: http\n                containerPort: 8000\n", "",
     "container port 'http' is None, not --http-port 8000"),
    (LWS, "            args: *serve-args\n",
     "            args: *serve-args\n            ports:\n              - name: http\n                containerPort: 8000\n",
     "a worker declares container port 'http' 8000"),
    (LWS_SERVICE, "targetPort: http", "targetPort: rendezvous", "port http's targetPort 'rendezvous' is 29500"),
    (CPU, "EXPOSE 50051 9090 29500 8000", "EXPOSE 50051 9090 29500", "lacks [8000]"),
    (CUDA, "EXPOSE 50051 9090 29500 8000", "EXPOSE 50051 9090 29500", "lacks [8000]"),
    (CPU, "COPY planner planner", "COPY planer planner", "copies planer, which does not exist"),
    (CPU, "COPY planner planner\n", "", "does not copy planner/, which CMakeLists.txt adds"),
    (CPU, "HEALTHCHECK --interval", "LABEL healthcheck=none\n# --interval", "no HEALTHCHECK running `tpserve health`"),
    (CPU, "USER 10001:10001", "USER root", "runtime USER 'root'"),
    (CUDA, "EXPOSE 50051 9090 29500", "EXPOSE 50051 9090", "lacks [29500]"),
    (CUDA, " libgloo-dev", "", "does not install libgloo-dev"),
    ("scripts/setup.sh", "libgloo-dev", "libgloo-dev libhttp2-dev", "does not install libhttp2-dev"),
    ("CMakeLists.txt", "add_subdirectory(planner)", "add_subdirectory(planner)\nadd_subdirectory(chat)",
     "does not copy chat/"),
    (".dockerignore", "!server/\n", "", "copies server, which .dockerignore keeps out"),
]
if TPSERVE:  # the flags are checked against `serve --help` only with the binary
    CASES.append((SINGLE, "- --drain-seconds=", "- --drain-secs=", "--drain-secs is not a flag of `tpserve serve`"))

# What the checker reads: the sources (the variables tpserve reads, the folders CMake compiles from)
# and the build's inputs; the tokenizers are stood in for by an empty folder.
# The source folders: those the top-level CMakeLists.txt adds and those a CMakeLists.txt compiles from
# (clients/), so that a new folder is copied too.
FOLDERS = sorted({"deploy", "cmake", *re.findall(r"add_subdirectory\((\w+)\)", (REPO / "CMakeLists.txt").read_text()),
                  *(m for f in REPO.glob("*/**/CMakeLists.txt") if not f.relative_to(REPO).parts[0].startswith("build")
                    for m in re.findall(r"CMAKE_SOURCE_DIR\}/(\w+)/", f.read_text()))})
FILES = ["CMakeLists.txt", ".dockerignore", "scripts/setup.sh"]


def scratch(root: pathlib.Path) -> None:
    for folder in FOLDERS:
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    (root / ".assets/tokenizers").mkdir(parents=True)


def run_checker(root):
    command = [sys.executable, str(CHECKER), "--repo", str(root)] + (["--tpserve", TPSERVE] if TPSERVE else [])
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


failed = 0
with tempfile.TemporaryDirectory(prefix="tpserve-deploy-selftest-") as tmp:
    clean = pathlib.Path(tmp) / "clean"
    scratch(clean)
    result = run_checker(clean)
    if result.returncode != 0:
        print(f"FAIL the unbroken copy does not pass:\n{result.stdout}{result.stderr}")
        failed += 1
    for i, (name, text, replacement, expected) in enumerate(CASES):
        root = pathlib.Path(tmp) / f"case{i}"
        scratch(root)
        path = root / name
        original = path.read_text()
        if original.count(text) < 1:
            print(f"FAIL case {i}: {name} no longer contains {text!r}; update the case")
            failed += 1
            continue
        path.write_text(original.replace(text, replacement, 1))
        result = run_checker(root)
        if result.returncode == 0 or expected not in result.stdout:
            print(f"FAIL case {i} ({name}: {text!r} -> {replacement!r}): expected a failure naming {expected!r}, got "
                  f"status {result.returncode}:\n{result.stdout}{result.stderr}")
            failed += 1
        shutil.rmtree(root)

if failed:
    print(f"deploy selftest: {failed} of {len(CASES) + 1} failed")
    sys.exit(1)
print(f"deploy selftest: all {len(CASES)} breakages caught")

#!/usr/bin/env bash
# Smoke test of a built CPU image: it starts, runs as its non-root user, serves a dummy model on the
# container's own loopback (--network none: no traffic leaves it), answers `tpserve health`, its
# HEALTHCHECK, a completion and /metrics, and drains to exit 0 on SIGTERM. Then a two-container
# group configured as LeaderWorkerSet configures it (LWS_* variables, one network namespace):
# it serves, and killing the worker makes the leader exit 3. Not in CI (image builds are not);
# docs/DEPLOY.md shows how it was run.
#
#   deploy/docker/smoke_test.sh [IMAGE] [RUNTIME...]     (default: localhost/tpserve:cpu podman)
#   deploy/docker/smoke_test.sh tpserve:cpu docker
#   deploy/docker/smoke_test.sh localhost/tpserve:cpu podman --storage-driver vfs --runtime runc
# TPSERVE_SMOKE_RUN_ARGS: extra `run` flags, split on spaces (e.g. --ulimit values a sandbox allows).
set -euo pipefail
IMAGE="${1:-localhost/tpserve:cpu}"
shift || true
RUNTIME=("$@")
[[ ${#RUNTIME[@]} -gt 0 ]] || RUNTIME=(podman)
read -r -a RUN_ARGS <<< "${TPSERVE_SMOKE_RUN_ARGS:-}"
NAME="tpserve-smoke-$$"
WORKER="tpserve-smoke-worker-$$"

step() { echo "smoke: $*"; }
cleanup() {  # one at a time: podman stops at a name it no longer has
  local name
  for name in "$WORKER" "$NAME"; do "${RUNTIME[@]}" rm -f "$name" >/dev/null 2>&1 || true; done
}
wait_serving() {
  for _ in $(seq 120); do
    if "${RUNTIME[@]}" exec "$NAME" tpserve health --target 127.0.0.1:50051 --timeout 2 >/dev/null 2>&1; then break; fi
    sleep 1
  done
  "${RUNTIME[@]}" exec "$NAME" tpserve health --target 127.0.0.1:50051
}
trap cleanup EXIT
trap 'exit 1' INT TERM PIPE  # through the EXIT trap: no container left running

step "tpserve --version"
"${RUNTIME[@]}" run --rm --network none "${RUN_ARGS[@]}" "$IMAGE" --version

step "the image's HEALTHCHECK and user"
inspected="$("${RUNTIME[@]}" image inspect --format '{{json .Config.Healthcheck}} user={{.Config.User}}' "$IMAGE")"
echo "$inspected"
grep -q '"tpserve","health"' <<< "$inspected"

step "serve a dummy tiny model (TP 2) on the container's loopback"
"${RUNTIME[@]}" run -d --name "$NAME" --network none "${RUN_ARGS[@]}" "$IMAGE" \
  serve --model tiny --load-format dummy --tp 2 --host 127.0.0.1 --drain-seconds 10 >/dev/null
wait_serving
logs="$("${RUNTIME[@]}" logs "$NAME" 2>&1)"
grep 'tpserve ready' <<< "$logs"

step "runs as uid 10001"
[[ "$("${RUNTIME[@]}" exec "$NAME" id -u)" == 10001 ]]

if [[ "$(basename "${RUNTIME[0]}")" == podman ]]; then
  step "podman healthcheck run (the image's HEALTHCHECK)"
  "${RUNTIME[@]}" healthcheck run "$NAME" && echo healthy
fi

complete() {
  local reply
  reply="$("${RUNTIME[@]}" exec "$NAME" tpserve client --target 127.0.0.1:50051 --prompt "Once upon a time" \
           --max-tokens 4 --json)"
  echo "$reply"
  grep -q '"finish_reason":"FINISH_REASON_LENGTH"' <<< "$reply"
}

step "a completion"
complete

step "/metrics (bash's /dev/tcp: the image has no curl)"
metrics="$("${RUNTIME[@]}" exec "$NAME" bash -c 'exec 3<>/dev/tcp/127.0.0.1/9090;
  printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3; cat <&3')"
grep -m1 '^tpserve_' <<< "$metrics"

step "SIGTERM drains and exits 0"
"${RUNTIME[@]}" stop -t 30 "$NAME" >/dev/null
status="$("${RUNTIME[@]}" inspect --format '{{.State.ExitCode}}' "$NAME")"
logs="$("${RUNTIME[@]}" logs "$NAME" 2>&1)"
tail -2 <<< "$logs"
[[ $status == 0 ]] || { echo "smoke: exit status $status after SIGTERM" >&2; exit 1; }
"${RUNTIME[@]}" rm -f "$NAME" >/dev/null

step "a LeaderWorkerSet-style group: leader and worker containers, TP 2 across them"
group=(serve --model tiny --load-format dummy --tp 2 --host 127.0.0.1 --bind-address 127.0.0.1
       --group-timeout-ms 10000 --failure-exit-seconds 2)
"${RUNTIME[@]}" run -d --name "$NAME" --network none "${RUN_ARGS[@]}" -e LWS_LEADER_ADDRESS=127.0.0.1 \
  -e LWS_GROUP_SIZE=2 -e LWS_WORKER_INDEX=0 "$IMAGE" "${group[@]}" >/dev/null
"${RUNTIME[@]}" run -d --name "$WORKER" --network "container:$NAME" "${RUN_ARGS[@]}" \
  -e LWS_LEADER_ADDRESS=127.0.0.1 -e LWS_GROUP_SIZE=2 -e LWS_WORKER_INDEX=1 "$IMAGE" "${group[@]}" >/dev/null
wait_serving
logs="$("${RUNTIME[@]}" logs "$NAME" 2>&1)"
grep -m1 'LeaderWorkerSet environment' <<< "$logs"
complete

step "the worker dies: the leader turns NOT_SERVING and exits 3"
"${RUNTIME[@]}" kill "$WORKER" >/dev/null
status="$("${RUNTIME[@]}" wait "$NAME")"
logs="$("${RUNTIME[@]}" logs "$NAME" 2>&1)"
grep -m2 -E 'engine failed|exiting' <<< "$logs"
[[ $status == 3 ]] || { echo "smoke: the leader exited $status, not 3" >&2; exit 1; }
step "all passed"

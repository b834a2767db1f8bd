#!/usr/bin/env python3
"""The HTTP API under hostile load, each figure next to its peer from the same run. Starts `tpserve
serve` (tiny dummy model) on loopback and measures:

  - GET /health and a 2-token completion on the quiet server (the peer), then while N slow clients
    hold connections, each having sent part of a request head and trickling one more byte every
    second (goal: both answer within 1 s with 1,000 slow clients);
  - the same for the metrics port's GET /metrics with M slow clients (goal: within 1 s with 100);
  - a chunked body of --body-mib MiB sent to /v1/completions: how many bytes went out before the
    413 came back, and how much the server's resident memory grew (peer: its size before).

All traffic stays on 127.0.0.1, every loop is bounded in count and time, and the server is stopped
at the end.

    benchmarks/http_hostile.py [--tpserve build/server/tpserve] [--slow 1000] [--metrics-slow 100]
"""
import argparse
import http.client
import json
import re
import socket
import statistics
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--tpserve", default="build/server/tpserve")
parser.add_argument("--slow", type=int, default=1000, help="slow clients on the API port")
parser.add_argument("--metrics-slow", type=int, default=100, help="slow clients on the metrics port")
parser.add_argument("--probes", type=int, default=20)
parser.add_argument("--body-mib", type=int, default=200)
parser.add_argument("--json", action="store_true")
args = parser.parse_args()


def start_server():
    command = [args.tpserve, "serve", "--model", "tiny", "--load-format", "dummy", "--device", "cpu", "--port", "0",
               "--metrics-port", "0", "--http-port", "0", "--tp", "1", "--threads", "1", "--http-timeout-s", "60"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        match = re.search(r"tpserve ready: .* metrics [0-9.]+:(\d+) http [0-9.]+:(\d+)", line)
        if match:
            return process, int(match.group(2)), int(match.group(1))
    sys.exit("the server did not start: " + " ".join(command))


def timed_ms(port, method, path, body=None):
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"} if body else {}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    assert response.status == 200, (path, response.status)
    return (time.perf_counter() - start) * 1e3


def probe(port, metrics_port):
    completion = json.dumps({"prompt": "Hi", "max_tokens": 2})
    health, generate, metrics = [], [], []
    for _ in range(args.probes):
        health.append(timed_ms(port, "GET", "/health"))
        generate.append(timed_ms(port, "POST", "/v1/completions", completion))
        metrics.append(timed_ms(metrics_port, "GET", "/metrics"))
    return {name: {"median_ms": statistics.median(v), "max_ms": max(v)}
            for name, v in (("health", health), ("completion", generate), ("metrics", metrics))}


def open_slow(port, count, first):
    sockets = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(first)
        sockets.append(s)
    return sockets


def resident_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def chunked_body(port):
    """Sends up to --body-mib MiB chunked; returns (bytes sent before the answer, its status)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
    sent = 0
    s.setblocking(False)
    deadline = time.monotonic() + 30
    answer = b""
    while sent < args.body_mib << 20 and time.monotonic() < deadline:
        try:
            answer += s.recv(4096)
            break
        except BlockingIOError:
            pass
        try:
            sent += s.send(chunk)
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:
            break
    s.setblocking(True)
    s.settimeout(10)
    try:
        while b"\r\n" not in answer:
            more = s.recv(4096)
            if not more:
                break
            answer += more
    except OSError:
        pass
    s.close()
    status = int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return sent, status


process, port, metrics_port = start_server()
try:
    quiet = probe(port, metrics_port)
    slow = open_slow(port, args.slow, b"POST /v1/completions HTTP/1.1\r\n")
    metrics_slow = open_slow(metrics_port, args.metrics_slow, b"GET /metrics HTTP/1.1\r\n")
    for s in slow + metrics_slow:
        s.sendall(b"X")  # one more byte each: trickling, not idle
    loaded = probe(port, metrics_port)
    for s in slow + metrics_slow:
        s.close()
    resident_before = resident_kib(process.pid)
    sent, status = chunked_body(port)
    time.sleep(0.5)
    grown = resident_kib(process.pid) - resident_before
finally:
    process.terminate()
    process.wait(timeout=30)

report = {"slow_clients": args.slow, "metrics_slow_clients": args.metrics_slow, "quiet": quiet, "loaded": loaded,
          "chunked_body": {"offered_mib": args.body_mib, "sent_before_answer_bytes": sent, "status": status,
                           "resident_before_kib": resident_before, "resident_growth_kib": grown}}
if args.json:
    print(json.dumps(report, indent=2))
else:
    print(f"{args.slow} slow clients on the API port, {args.metrics_slow} on the metrics port "
          f"(each sent part of a head, then one byte more); {args.probes} probes each (goal: < 1000 ms)")
    print(f"{'probe':<12} {'quiet median':>13} {'quiet max':>10} {'loaded median':>14} {'loaded max':>11}")
    for name in ("health", "completion", "metrics"):
        print(f"{name:<12} {quiet[name]['median_ms']:>10.2f} ms {quiet[name]['max_ms']:>7.2f} ms "
              f"{loaded[name]['median_ms']:>11.2f} ms {loaded[name]['max_ms']:>8.2f} ms")
    print(f"chunked body offered {args.body_mib} MiB: {sent / 2**20:.2f} MiB sent before the answer "
          f"({status}); server resident {resident_before / 1024:.1f} MiB before, {grown / 1024:+.1f} MiB after")

#!/usr/bin/env python3
"""Many concurrent SSE streams on the OpenAI-compatible HTTP API, and whether /health still answers
quickly meanwhile. Starts `tpserve serve` (tiny dummy model by default, a batch as large as the
stream count) on loopback, measures GET /health latency on the idle server (the peer figure,
same run), then opens N streaming /v1/completions requests at once (one socket each, read by one
selector loop that only counts events) and, once every stream has received content, probes
/health again while all of them stream. Prints both medians and maxima, the streams that were
active during the probes, and the tokens/s the streams received.

    benchmarks/http_streams.py [--tpserve build/server/tpserve] [--streams 256] [--tokens 400]
"""
import argparse
import http.client
import json
import re
import selectors
import socket
import statistics
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--tpserve", default="build/server/tpserve")
parser.add_argument("--model", default="tiny", help="a known model name (dummy weights)")
parser.add_argument("--streams", type=int, default=256)
parser.add_argument("--tokens", type=int, default=400, help="max_tokens of each stream (ignore_eos)")
parser.add_argument("--probes", type=int, default=40)
parser.add_argument("--threads", type=int, default=2, help="the server's compute threads")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()


def start_server():
    command = [args.tpserve, "serve", "--model", args.model, "--load-format", "dummy", "--device", "cpu",
               "--port", "0", "--metrics-port", "0", "--http-port", "0", "--tp", "1", "--threads", str(args.threads),
               "--max-batch-size", str(args.streams), "--max-queue", str(2 * args.streams),
               "--max-batched-tokens", str(max(512, 8 * args.streams))]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        match = re.search(r"tpserve ready: .* http ([0-9.]+):(\d+)", line)
        if match:
            return process, int(match.group(2))
    sys.exit("the server did not start: " + " ".join(command))


def health_ms(port):
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/health")
    response = connection.getresponse()
    response.read()
    connection.close()
    assert response.status == 200, response.status
    return (time.perf_counter() - start) * 1e3


def probe(port, count):
    samples = []
    for _ in range(count):
        samples.append(health_ms(port))
        time.sleep(0.02)
    return samples


def open_stream(port):
    body = json.dumps({"prompt": "Hello", "max_tokens": args.tokens, "ignore_eos": True, "temperature": 0,
                       "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    sock.setblocking(False)
    return sock


def main():
    server, port = start_server()
    try:
        idle = probe(port, args.probes)
        selector = selectors.DefaultSelector()
        events = {}  # socket -> "data: " events seen so far
        tails = {}
        for _ in range(args.streams):
            sock = open_stream(port)
            selector.register(sock, selectors.EVENT_READ)
            events[sock] = 0
            tails[sock] = b""
        start = time.perf_counter()
        done = set()
        probes_during, active_during = [], []

        def pump(timeout):
            for key, _ in selector.select(timeout):
                sock = key.fileobj
                data = sock.recv(65536)
                text = tails[sock] + data
                events[sock] += text.count(b"data: ")
                tails[sock] = text[-8:]
                if b"data: [DONE]" in text or not data:
                    done.add(sock)
                    selector.unregister(sock)

        # Wait until every stream has content (past the role-less first event), then probe while they run.
        deadline = time.perf_counter() + 120
        while min(events.values()) < 2 and time.perf_counter() < deadline and len(done) < args.streams:
            pump(0.05)
        while len(probes_during) < args.probes and len(done) == 0 and time.perf_counter() < deadline:
            pump(0)
            active_during.append(args.streams - len(done))
            probes_during.append(health_ms(port))
            pump(0.01)
        while len(done) < args.streams and time.perf_counter() < deadline:
            pump(0.1)
        elapsed = time.perf_counter() - start
        token_events = sum(events.values()) - 2 * args.streams  # less the finish chunk and [DONE]
        result = {
            "streams": args.streams,
            "streams_finished": len(done),
            "health_idle_ms": {"median": statistics.median(idle), "max": max(idle)},
            "health_during_ms": {"median": statistics.median(probes_during) if probes_during else None,
                                 "max": max(probes_during) if probes_during else None,
                                 "probes": len(probes_during),
                                 "min_active_streams": min(active_during) if active_during else 0},
            "stream_events_per_s": token_events / elapsed,
            "elapsed_s": elapsed,
        }
        for sock in events:
            sock.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    during = result["health_during_ms"]
    print(f"{args.streams} concurrent SSE streams ({args.model}, {args.tokens} tokens each): "
          f"{result['streams_finished']} finished in {elapsed:.1f} s, {result['stream_events_per_s']:.0f} content events/s")
    print(f"GET /health idle:           median {result['health_idle_ms']['median']:.2f} ms, max {result['health_idle_ms']['max']:.2f} ms")
    print(f"GET /health during streams: median {during['median']:.2f} ms, max {during['max']:.2f} ms "
          f"({during['probes']} probes, >= {during['min_active_streams']} streams open; goal < 100 ms)")


main()

#!/usr/bin/env python3
"""N concurrent streaming clients against `bankml serve`: aggregate decode tokens/s and time to
first token at each N. Standard library only.

usage: scripts/bench_serve.py -m MODEL [--bin ./bankml] [--clients 1,2,4,8] [--tokens 32] [-t THREADS]
Starts `bankml serve --parallel MAX(N)` on 127.0.0.1 with a free port, runs each N once after a
warm-up request, prints one line per N, and stops the server with SIGTERM.
"""
import argparse
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time


def stream_one(port, tokens, seed, out):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": tokens, "ignore_eos": True, "stream": True,
                       "temperature": 0.8, "seed": seed})
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    n = 0
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            j = json.loads(ev[6:])
            if j["choices"] and j["choices"][0].get("finish_reason"):
                n = j["timings"]["predicted_n"]
            elif j["choices"] and j["choices"][0].get("text") and first is None:
                first = time.perf_counter() - t0
    out.append((first or 0.0, n, time.perf_counter() - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default="./bankml")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("-t", "--threads", default="")
    a = ap.parse_args()
    ns = [int(x) for x in a.clients.split(",")]
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "--parallel", str(max(ns)), "-c", "512"]
    if a.threads:
        cmd += ["-t", a.threads]
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    for line in srv.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready:" in line:
            print(line.strip(), file=sys.stderr)
            break
    if not port:
        sys.exit("bench_serve: the server did not start")
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
    stream_one(port, 4, 0, [])  # warm-up: page the weights in
    print(f"{'N':>3} {'aggregate t/s':>14} {'per stream t/s':>15} {'TTFT mean s':>12} {'TTFT max s':>11}")
    for n in ns:
        out = []
        ts = [threading.Thread(target=stream_one, args=(port, a.tokens, i, out)) for i in range(n)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        total = sum(o[1] for o in out)
        ttft = [o[0] for o in out]
        per = sum(o[1] / o[2] for o in out) / len(out)
        print(f"{n:>3} {total / wall:>14.2f} {per:>15.2f} {sum(ttft) / len(ttft):>12.3f} {max(ttft):>11.3f}")
    srv.send_signal(signal.SIGTERM)
    srv.wait(timeout=60)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""N concurrent streaming clients against `bankml serve`, and against llama-server on the same file
when given: aggregate decode tokens/s and time to first token at each N. Standard library only.

usage: scripts/bench_serve.py -m MODEL [--bin ./bankml] [--clients 1,2,4,8] [--tokens 32] [-t THREADS]
                              [--rounds R] [--llama-server PATH] [--ctx 512]

Starts each server on 127.0.0.1 with a free port and one slot per client of the largest N (context
--ctx per slot), sends one warm-up request, then for each N starts N clients at once, each streaming
a /v1/completions answer of --tokens tokens (ignore_eos, temperature 0.8, its own seed and prompt),
R rounds; prints one line per server and N (the round with the median aggregate rate) and stops the
server with SIGTERM. llama-server is asked not to reuse a cached prompt (cache_prompt: false), so
both servers evaluate every prompt.

  aggregate t/s   tokens streamed by all clients / wall time from the first request to the last token
  decode t/s      tokens streamed after every client has its first text / the time from then to the
                  last text: the rate of the decode steps alone, once all N generate
  TTFT            time from a client's request to its first streamed text (its prompt's evaluation,
                  and its wait behind the others')
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def stream_one(port, tokens, seed, llama, out):
    req = {"prompt": f"Once upon a time, client {seed} said", "max_tokens": tokens, "ignore_eos": True,
           "stream": True, "temperature": 0.8, "seed": seed}
    if llama:
        req["cache_prompt"] = False
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    c.request("POST", "/v1/completions", json.dumps(req), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    first = last = None
    n = 0
    times = []
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            ev = ev.strip()
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            j = json.loads(ev[6:])
            ch = j.get("choices") or [{}]
            if ch[0].get("text"):
                now = time.perf_counter()
                times.append(now)
                last = now
                if first is None:
                    first = now
            if ch[0].get("finish_reason"):
                n = (j.get("timings") or {}).get("predicted_n") or (j.get("usage") or {}).get("completion_tokens") or 0
    c.close()
    end = time.perf_counter()
    out.append({"t0": t0, "first": first or end, "last": last or end, "end": end, "n": n or len(times),
                "times": times})


def run_load(port, n, tokens, llama, seed0):
    out = []
    ts = [threading.Thread(target=stream_one, args=(port, tokens, seed0 + i, llama, out)) for i in range(n)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if len(out) != n:
        raise RuntimeError("a client failed")
    end = max(o["last"] for o in out)
    total = sum(o["n"] for o in out)
    # The decode window: from the moment every client has its first text to the last text. A text
    # event may carry more than one token (held back UTF-8 bytes): scale by the client's tokens/events.
    start = max(o["first"] for o in out)
    in_window = sum(sum(1 for t in o["times"] if t > start) * o["n"] / max(len(o["times"]), 1) for o in out)
    ttft = [o["first"] - o["t0"] for o in out]
    return {"agg": total / (max(o["end"] for o in out) - t0), "decode": in_window / max(end - start, 1e-9),
            "ttft_mean": statistics.mean(ttft), "ttft_max": max(ttft), "tokens": total}


def wait_health(port, proc, what, limit=600):
    end = time.time() + limit
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"bench_serve: {what} exited with status {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"bench_serve: {what} did not become ready")


def bench(name, cmd, env, port, ns, tokens, rounds, llama):
    print(f"# {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    log = open(f"/tmp/bench_serve.{name}.{os.getpid()}.log", "w")
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    rows = []
    try:
        wait_health(port, srv, name)
        stream_one(port, 4, 999, llama, [])  # warm-up: page the weights in
        for n in ns:
            runs = [run_load(port, n, tokens, llama, 100 * r) for r in range(rounds)]
            runs.sort(key=lambda x: x["agg"])
            rows.append((n, runs[len(runs) // 2]))
            r = rows[-1][1]
            print(f"#   N={n}: {r['agg']:.2f} t/s aggregate", file=sys.stderr, flush=True)
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default="./bankml")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--llama-server", default="")
    a = ap.parse_args()
    ns = [int(x) for x in a.clients.split(",")]
    slots = max(ns)
    results = []
    port = free_port()
    cmd = [a.bin, "serve", "-m", a.model, "--port", str(port), "--parallel", str(slots), "-c", str(a.ctx),
           "-t", a.threads]
    results.append(("bankml", bench("bankml", cmd, dict(os.environ), port, ns, a.tokens, a.rounds, False)))
    if a.llama_server:
        port = free_port()
        env = dict(os.environ)
        libdir = os.path.dirname(os.path.abspath(a.llama_server))
        env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        # llama-server's -c is the whole cache, shared out among its -np slots.
        cmd = [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
               "-c", str(a.ctx * slots), "-t", a.threads]
        results.append(("llama-server", bench("llama-server", cmd, env, port, ns, a.tokens, a.rounds, True)))
    print(f"{'server':<13} {'N':>3} {'aggregate t/s':>14} {'x N=1':>6} {'decode t/s':>11} {'TTFT mean s':>12} "
          f"{'TTFT max s':>11}")
    for name, rows in results:
        base = rows[0][1]["agg"] if rows and rows[0][0] == 1 else None
        for n, r in rows:
            ratio = f"{r['agg'] / base:.2f}" if base else "-"
            print(f"{name:<13} {n:>3} {r['agg']:>14.2f} {ratio:>6} {r['decode']:>11.2f} {r['ttft_mean']:>12.3f} "
                  f"{r['ttft_max']:>11.3f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Stuck clients against `--http`: `configs/decoupled.toml` (`--steps`, default 2500: long enough for
the stuck clients to be dropped and come back a few times) served with `--http`, runs
with and without 64 clients that connect and never read (16 sent `GET /metrics`, 8
`GET /status.json`, 40 sent nothing; each held 2.5 s, past the server's 2 s, then opened again),
alternating, with a scrape of /metrics every second beside. Prints each run's training seconds
(the run's "tokens in X s") and its slowest scrape.

usage: benchmarks/http_stuck_clients.py [--diloco build/apps/diloco] [--pairs 3] [--steps 2500]"""
import argparse
import os
import re
import socket
import subprocess
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser()
ap.add_argument("--diloco", default=os.path.join(SRC, "build/apps/diloco"))
ap.add_argument("--pairs", type=int, default=3)
ap.add_argument("--steps", type=int, default=2500)
args = ap.parse_args()
DILOCO = os.path.abspath(args.diloco)


def run(stuck):
    p = subprocess.Popen([DILOCO, "run", os.path.join(SRC, "configs/decoupled.toml"), "--http", "0",
                          "--set", f"train.steps={args.steps}"], cwd=SRC,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    for line in p.stdout:
        m = re.search(r"status page and metrics: http://127\.0\.0\.1:(\d+)/", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        raise SystemExit(f"{DILOCO} did not start its server (exit {p.wait()})")
    stop, opened, scrape_ms = threading.Event(), [0], []
    def hold(kind):  # one stuck client after another, each kept 2.5 s (past the server's 2 s)
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port))
                opened[0] += 1
                if kind: s.sendall(f"GET {kind} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                stop.wait(2.5)
                s.close()
            except OSError:
                time.sleep(0.05)
    threads = []
    if stuck:
        kinds = ["/metrics"] * 16 + ["/status.json"] * 8 + [None] * 40
        threads = [threading.Thread(target=hold, args=(k,), daemon=True) for k in kinds]
        for t in threads:
            t.start()
    def scrape():
        while not stop.is_set():
            t = time.monotonic()
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                while s.recv(65536):
                    pass
                s.close()
                scrape_ms.append((time.monotonic() - t) * 1e3)
            except OSError:
                pass
            time.sleep(1)
    threading.Thread(target=scrape, daemon=True).start()
    rest = p.stdout.read()  # read as it comes, to the end of the run
    p.wait()
    stop.set()
    m = re.search(r"tokens in ([0-9.]+) s", rest)
    return float(m.group(1)), opened[0], max(scrape_ms) if scrape_ms else float("nan")


for k in range(args.pairs):
    for stuck in (True, False):
        t, n, worst = run(stuck)
        print(f"{'with' if stuck else 'without'} stuck clients: {t:.1f} s of training, {n} stuck connections opened, "
              f"slowest 1 Hz scrape {worst:.0f} ms", flush=True)

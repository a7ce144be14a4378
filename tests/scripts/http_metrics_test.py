"""`diloco run --http`: scrapes /metrics over HTTP during a run with faults and checks that the
exposition parses (names, labels, values), that the counters move, that the faults, restarts and
commits show, that /status.json lists every island, and that clients that connect and never
read cost the run nothing (the run's steps go on while they hang on) and delay no other scrape:
64 of them held at once, a scrape is answered at once, and the server drops each after its 2 s.
With `--openblas` (a build with libtorch) it first checks that the process has OpenBLAS loaded,
the configuration whose static TLS once kept the server's threads from starting. The run is
long; it is stopped once everything is checked.

usage: http_metrics_test.py DILOCO SOURCE_DIR [--openblas]"""
import json
import re
import socket
import sys
import time
import urllib.request

import harness
from harness import fail

DILOCO, SRC = sys.argv[1], sys.argv[2]
OPENBLAS = "--openblas" in sys.argv[3:]
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def parse(text):
    """The exposition as {(name, labels): value}; fails on any line that is not Prometheus text."""
    samples, typed = {}, {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) < 4 or not NAME.match(parts[2]):
                fail(f"bad metadata line: {line}")
            if parts[1] == "TYPE":
                typed[parts[2]] = parts[3]
            continue
        m = SAMPLE.match(line)
        if not m:
            fail(f"not a sample line: {line!r}")
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if not NAME.match(name):
            fail(f"bad metric name {name}")
        pairs = tuple(sorted(LABEL.findall(labels)))
        if labels and "," .join(f'{k}="{v}"' for k, v in LABEL.findall(labels)) != labels[1:-1]:
            fail(f"bad labels: {line}")
        float(value)  # NaN and +Inf parse too
        samples[(name, pairs)] = float(value)
    for name, kind in typed.items():
        if kind == "counter" and not name.endswith("_total"):
            fail(f"counter {name} does not end in _total")
    return samples


def value(samples, name, **labels):
    key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
    if key not in samples:
        fail(f"no sample {name}{labels}")
    return samples[key]


run, base = harness.run_with_http(DILOCO, SRC, "train.steps=3000", "wan.enabled=true")
port = int(base.rsplit(":", 1)[1])
if OPENBLAS:
    with open(f"/proc/{run.p.pid}/maps") as f:
        blas = sorted({line.split()[-1] for line in f if "blas" in line.split()[-1]})
    if not any("openblas" in b for b in blas):
        fail(f"the run has no OpenBLAS loaded ({blas}): libopenblas0-pthread is not the system BLAS "
             "(scripts/setup.sh installs it)")
    print(f"serving with {', '.join(blas)} loaded")

# The first scrape may come before the server took the first round's figures: ask again until
# the evaluation is in (the run goes on meanwhile).
deadline = time.monotonic() + 30
while True:
    status, ctype, text = get(base + "/metrics")
    if status != 200 or not ctype.startswith("text/plain"):
        fail(f"/metrics answered {status} {ctype}")
    first = parse(text)
    if ("diloco_eval_loss", ()) in first or time.monotonic() > deadline:
        break
    time.sleep(0.1)
for name in ["diloco_global_round", "diloco_commits_total", "diloco_live_islands", "diloco_live_chips",
             "diloco_goodput_ratio", "diloco_global_downtime_seconds_total", "diloco_tokens_total",
             "diloco_stale_drops_total", "diloco_superseded_sends_total", "diloco_eval_loss", "diloco_commit_contributions_count",
             "diloco_contribution_staleness_rounds_count", "diloco_quorum_islands"]:
    value(first, name)
for i in range(3):
    value(first, "diloco_island_step", island=i)
    value(first, "diloco_island_tokens_per_second", island=i)
    value(first, "diloco_chip_step_seconds_count", island=i)
    for d in ("up", "down"):
        value(first, "diloco_link_bytes_total", site=f"island-{i}", direction=d)

# A client that connects and never sends or reads: the run goes on meanwhile.
stuck = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
held_at = time.monotonic()
steps_before = [value(first, "diloco_island_step", island=i) for i in range(3)]
run.wait_for(r"exited syncer reason", 90)  # the last fault (island 0's step 170) has fired
deadline = time.monotonic() + 30
while len(run.matches(r"\[root\] started syncer")) < 2:  # restarted by its supervisor
    if time.monotonic() > deadline or not run.alive():
        fail("the syncer was not restarted")
    time.sleep(0.05)
time.sleep(1.5)
status, _, text = get(base + "/metrics")
second = parse(text)
for s in stuck:
    s.close()
print(f"8 idle clients held {time.monotonic() - held_at:.1f} s while the run went on")

for name in ["diloco_commits_total", "diloco_tokens_total", "diloco_useful_chip_seconds_total",
             "diloco_provisioned_chip_seconds_total"]:
    if not value(second, name) > value(first, name):
        fail(f"{name} did not move: {value(first, name)} -> {value(second, name)}")
for i in range(3):
    if not value(second, "diloco_island_step", island=i) > steps_before[i]:
        fail(f"island {i} did not step while idle clients held the server")
    if not value(second, "diloco_link_bytes_total", site=f"island-{i}", direction="up") > \
            value(first, "diloco_link_bytes_total", site=f"island-{i}", direction="up"):
        fail(f"island {i}'s link carried nothing more")
for kind in ("chip", "island", "syncer"):
    if value(second, "diloco_faults_total", kind=kind) < 1:
        fail(f"no {kind} fault counted")
restarts = sum(v for (n, _), v in second.items() if n == "diloco_supervisor_restarts_total")
if restarts < 3:
    fail(f"only {restarts} supervisor restarts counted")
if value(second, "diloco_global_round") < value(first, "diloco_global_round"):
    fail("the global round went down")

status, ctype, text = get(base + "/status.json")
doc = json.loads(text)
if sorted(i["island"] for i in doc["islands"]) != [0, 1, 2] or not doc["commits"] or not doc["timeline"]:
    fail(f"status.json is incomplete: {text[:400]}")
status, ctype, page = get(base + "/")
if "status.json" not in page or not ctype.startswith("text/html"):
    fail("/ is not the status page")
if re.search(r"""(src|href)=["']?(https?:)?//""", page):
    fail("the status page loads something from another host")

# 64 stuck clients at once (some sent half a request, some a whole one and never read): a scrape
# is still answered at once, and the server drops each of them after its 2 s.
stuck = [socket.create_connection(("127.0.0.1", port)) for _ in range(64)]
for k, s in enumerate(stuck):
    if k % 4 == 1:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
    elif k % 4 == 2:
        s.sendall(b"GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n")  # never read
held_at = time.monotonic()
status, _, text = get(base + "/metrics")
answered = time.monotonic() - held_at
parse(text)
if status != 200 or answered > 1.0:
    fail(f"with 64 stuck clients /metrics took {answered:.2f} s (status {status})")
for s in stuck:
    s.settimeout(10)
    try:
        while s.recv(65536):  # an answer, then the end; or the end alone
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        fail(f"a stuck client was still connected {time.monotonic() - held_at:.1f} s after it connected")
    s.close()
dropped = time.monotonic() - held_at
if dropped > 4.0:
    fail(f"the stuck clients were dropped only after {dropped:.1f} s")
print(f"64 stuck clients: /metrics answered in {answered * 1e3:.0f} ms, all dropped within {dropped:.1f} s")

if not run.alive():
    fail(f"the run ended early ({run.p.returncode})")
print(f"metrics test: {len(second)} samples parsed, commits {value(first, 'diloco_commits_total'):.0f} -> "
      f"{value(second, 'diloco_commits_total'):.0f}, tokens {value(first, 'diloco_tokens_total'):.0f} -> "
      f"{value(second, 'diloco_tokens_total'):.0f}, {restarts:.0f} restarts; ok")
harness.cleanup()

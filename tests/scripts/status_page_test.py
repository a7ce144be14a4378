"""The live status page (`--http`, /) rendered by headless Chromium during a run: the DOM it builds
from /status.json lists every island, and each island's step advances between two renderings.

usage: status_page_test.py DILOCO SOURCE_DIR [CHROMIUM]"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import harness
from harness import fail

DILOCO, SRC = sys.argv[1], sys.argv[2]
CHROMIUM = sys.argv[3] if len(sys.argv) > 3 else shutil.which("chromium")
if not CHROMIUM:
    fail("chromium is not installed (scripts/setup.sh installs it)")
ISLANDS = 3  # configs/decoupled.toml


def render(url):
    """The page's DOM after Chromium ran its scripts for 3 s of virtual time (a few polls)."""
    profile = tempfile.mkdtemp(prefix="diloco-chromium-")
    harness.work_dirs.append(profile)
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--virtual-time-budget=3000", "--dump-dom", url]
    r = subprocess.run(args, capture_output=True, text=True, timeout=90)
    if r.returncode != 0:
        fail(f"chromium exited with {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def steps(dom):
    """Island → step, from the rows the page's script drew."""
    rows = re.findall(r'<tr class="island" id="island-(\d+)" data-island="\d+" data-step="(\d+)">', dom)
    return {int(i): int(s) for i, s in rows}


# Long enough for two renderings on a fast machine; a rendering takes seconds of Chromium's start.
run, base = harness.run_with_http(DILOCO, SRC, "train.steps=3000", "inner.warmup_steps=20")
url = base + "/"

first = steps(render(url))
if sorted(first) != list(range(ISLANDS)):
    fail(f"the page shows islands {sorted(first)}, expected 0..{ISLANDS - 1}")
ROUND = r"^\s+\d+\s+[0-9.]+\s+[0-9.]+\s+\d+"  # a row of the live table: a global round
rendered = start = harness.now()
while len(run.matches(ROUND, rendered)) < 3:  # three more global rounds after the first rendering
    if not run.alive():
        fail("the run ended before three more global rounds")
    if not run.progressing(start, 60):
        fail("no three global rounds within 60 s of the first rendering")
    time.sleep(0.05)
dom = render(url)
second = steps(dom)
if sorted(second) != list(range(ISLANDS)):
    fail(f"the second rendering shows islands {sorted(second)}")
for i in range(ISLANDS):
    if not second[i] > first[i]:
        fail(f"island {i}'s step did not advance on the page: {first[i]} -> {second[i]}")
for part in ('id="loss"', "<polyline", 'id="commits"', 'id="links"', 'id="timeline"'):
    if part not in dom:
        fail(f"the rendered page lacks {part}")
if re.search(r'id="round">-<', dom):
    fail("the page never filled in the global round")
code = run.wait_exit(120)
if code != 0:
    fail(f"the run exited with {code}")
print(f"status page test: islands {sorted(second)}, steps {first} -> {second}; ok")
harness.cleanup()

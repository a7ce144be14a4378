#!/usr/bin/env python3
"""A syncer restarted after some sites finished still ends the run (configs/sites.toml, loopback).

site-a and site-b train to their last step and exit; the syncer waits for site-c. The syncer is
killed with kill -9 and restarted on the same state: it must still know that site-a's and
site-b's islands finished. site-a started again is told it is done and exits 0 without
training; site-c then trains, and the syncer ends the run once it finished.

Then a run whose islands diverge (inner lr 1e30): site-a and site-b end with exit 1 naming the
divergence, and the syncer, told by the islands, ends the run instead of waiting for them. site-c,
started only then and retrying for ever (--max-attempts 0), is told by the syncer that the run is
over and exits 1 without training; the syncer, every site told, exits 1. With no syncer at all a
site keeps retrying until --max-attempts.

usage: sites_finish_test.py DILOCO SOURCE_DIR
"""
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Proc, cleanup, fail, mkcerts, now, work_dirs  # noqa: E402

DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
CONFIG = os.path.join(SRC, "configs", "sites.toml")
WORK = tempfile.mkdtemp(prefix="diloco-finish-")
work_dirs.append(WORK)
SHORT = ["--set", "train.steps=60"]
certs = os.path.join(WORK, "certs")
mkcerts(SRC, certs, "syncer", "site-a", "site-b", "site-c")
state = os.path.join(WORK, "state")


def syncer(label, listen, extra=()):
    p = Proc(label, cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--certs", certs, "--state", state, "--listen", listen]
             + SHORT + list(extra))
    return p, int(p.wait_for(r"listening on 127\.0\.0\.1:(\d+)", 60).group(1))


def site(name, port, label=None, extra=()):
    return Proc(label or name, cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", name, "--connect",
                                               f"127.0.0.1:{port}", "--certs", certs] + SHORT + list(extra))


s1, port = syncer("syncer", "127.0.0.1:0")
a, b = site("site-a", port), site("site-b", port)
for p in (a, b):
    if p.wait_exit(120) != 0:
        fail(f"{p.name} exited {p.p.returncode}")
    p.wait_for(r"done: site", 5)
if not s1.alive():
    fail("the syncer ended before site-c trained")
os.kill(s1.p.pid, signal.SIGKILL)
s1.p.wait()
print(f"{now():7.2f}s site-a and site-b finished; kill -9 of the syncer")

s2, _ = syncer("syncer-2", f"127.0.0.1:{port}")
s2.wait_for(r"syncer restored", 30)
again = site("site-a", port, label="site-a-again")
if again.wait_exit(60) != 0:
    fail(f"site-a started after its last step exited {again.p.returncode}")
again.wait_for(r"done: site site-a, islands 0 already finished", 5)
if again.matches(r"island 0 step \d+ train loss"):
    fail("site-a trained again after it had finished")
print(f"{now():7.2f}s site-a started again: told it is done, exited 0 without training")

c = site("site-c", port)
if c.wait_exit(120) != 0:
    fail(f"site-c exited {c.p.returncode}")
if s2.wait_exit(60) != 0:
    fail(f"the restarted syncer exited {s2.p.returncode}")
s2.wait_for(r"done: syncer", 5)
print(f"{now():7.2f}s the restarted syncer ended the run once site-c finished")

state = os.path.join(WORK, "state-diverging")
DIVERGE = ["--set", "inner.lr=1e30"]
# The syncer waits for the sites it has not told that the run is over at most
# net.timeout_ms + net.reconnect_max_ms: widened here so that a slow start of site-c fits.
s3, port = syncer("syncer-diverging", "127.0.0.1:0", DIVERGE + ["--set", "net.reconnect_max_ms=20000"])
sites = [site(n, port, label=f"{n}-diverging", extra=DIVERGE) for n in ("site-a", "site-b")]
STOPPED = r"run stopped: island \d diverged|run over, told by the syncer \(stopped\): island \d reported that it diverged"
for p in sites:
    if p.wait_exit(60) != 1:
        fail(f"{p.name} exited {p.p.returncode}, expected 1 (its island diverged)")
    p.wait_for(STOPPED, 5)
s3.wait_for(r"run stopped: island \d reported that it diverged", 30)
if not s3.alive():
    fail("the syncer of a diverging run ended before site-c, which never joined, was told the run is over")
print(f"{now():7.2f}s site-a and site-b diverged, the syncer ended the run; site-c starts only now")

# site-c joins after the run ended, retrying for ever (--max-attempts 0): it is told that the
# run is over and exits 1 at once, without training; the syncer, every site told, exits 1.
late = site("site-c", port, label="site-c-late", extra=DIVERGE + ["--max-attempts", "0"])
if late.wait_exit(30) != 1:
    fail(f"site-c, joining after the run ended, exited {late.p.returncode}, expected 1")
late.wait_for(r"run over, told by the syncer \(stopped\): island \d reported that it diverged", 5)
if late.matches(r"island \d step \d+ train loss"):
    fail("site-c trained after the run had ended")
s3.wait_for(r"site site-c joined after the run ended, told: run over \(stopped", 5)
if s3.wait_exit(30) != 1:
    fail(f"the syncer of a diverging run exited {s3.p.returncode}, expected 1")
s3.wait_for(r"run over \(stopped\): \d sites told", 5)
print(f"{now():7.2f}s site-c, joining late, was told the run is over and exited 1")

# With the syncer gone, a site told nothing retries for ever (the run may still be going):
# only --max-attempts ends it.
gone = site("site-c", port, label="site-c-no-syncer", extra=["--max-attempts", "3"])
if gone.wait_exit(30) != 3:
    fail(f"site-c with no syncer and --max-attempts 3 exited {gone.p.returncode}, expected 3")
print(f"PASS: a diverging run ends everywhere with exit 1, a late site included; {now():.0f} s")
cleanup()

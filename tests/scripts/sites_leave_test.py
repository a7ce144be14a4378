#!/usr/bin/env python3
"""A site leaves a running run gracefully on SIGTERM (configs/sites.toml, loopback, mutual TLS).

Three sites train; once site-b's island has been merged at least once, site-b gets SIGTERM. Its
island stops stepping, hands over its unsent progress, and site-b exits 0 once that was merged:
the syncer commits a round with island 1 after the signal, says site-b left (not lost), and
does not wait for it at the end. site-a and site-c train on to their last step and the syncer
ends the run with a loss below the start.

usage: sites_leave_test.py DILOCO SOURCE_DIR
"""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TIME_SCALE, Proc, cleanup, fail, mkcerts, now, work_dirs  # noqa: E402

DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
CONFIG = os.path.join(SRC, "configs", "sites.toml")
WORK = tempfile.mkdtemp(prefix="diloco-leave-")
work_dirs.append(WORK)
certs = os.path.join(WORK, "certs")
mkcerts(SRC, certs, "syncer", "site-a", "site-b", "site-c")


def commits_with(syncer, island, since):
    return [t for t, m in syncer.matches(r"commit round \d+ fragment \d+: islands ([\d,]*)", since)
            if island in {int(x) for x in m.group(1).split(",") if x}]


syncer = Proc("syncer", cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--certs", certs, "--state",
                                        os.path.join(WORK, "state"), "--listen", "127.0.0.1:0"])
port = int(syncer.wait_for(r"listening on 127\.0\.0\.1:(\d+)", 60).group(1))
initial = float(syncer.wait_for(r"initial eval loss ([0-9.]+)", 60).group(1))
sites = {n: Proc(n, cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", n, "--connect", f"127.0.0.1:{port}",
                                    "--certs", certs]) for n in ("site-a", "site-b", "site-c")}

start = now()
while not commits_with(syncer, 1, 0.0):
    if not syncer.progressing(start, 60):
        fail("no commit with site-b's island 1 before the signal")
    time.sleep(0.1)
b = sites["site-b"]
step_at = [int(m.group(1)) for _, m in b.matches(r"island 1 step (\d+) ")]
b.p.send_signal(signal.SIGTERM)
signalled = now()
print(f"{signalled:7.2f}s SIGTERM to site-b (island 1 at step {step_at[-1] if step_at else '?'})")
b.wait_for(r"leaving; its islands hand over their unsent progress", 10, signalled)
leaving = b.wait_for(r"island 1 leaving at step (\d+): (hands over the unsent progress of (\d+)|nothing unsent)", 30,
                     signalled)
unsent = int(leaving.group(3) or 0)
if b.wait_exit(60) != 0:
    fail(f"site-b exited {b.p.returncode} after SIGTERM, expected 0")
left = now()
b.wait_for(r"done: site site-b", 5)
# The syncer prints a commit from its watching thread, which may still be evaluating the round
# before: its line can come a little after the site, told of the merge, has exited.
handed = commits_with(syncer, 1, signalled)
wait_from = now()
while unsent and not handed and now() - wait_from < 15 * TIME_SCALE:
    time.sleep(0.1)
    handed = commits_with(syncer, 1, signalled)
if unsent and not handed:
    fail(f"no commit with island 1 after SIGTERM: the unsent progress of {unsent} fragment(s) was not merged "
         "before site-b left")
syncer.wait_for(r"site site-b left \(its islands finished\)", 15, signalled)
if syncer.matches(r"site site-b lost", signalled):
    fail("the syncer counted site-b's graceful leave as a lost site")
print(f"{left:7.2f}s site-b left with exit 0, {left - signalled:.1f} s after the signal at step "
      f"{leaving.group(1)}; " + (f"its unsent progress merged at {handed[0]:.2f} s" if unsent else "nothing was unsent"))

for n in ("site-a", "site-c"):
    if sites[n].wait_exit(150) != 0:
        fail(f"{n} exited {sites[n].p.returncode}")
done = syncer.wait_for(r"done: syncer, (\d+) global rounds, final eval loss ([0-9.]+)", 30)
if syncer.matches(r"final sync: not every island finished"):
    fail("the syncer waited for site-b's island at the end although it left")
if syncer.wait_exit(30) != 0:
    fail(f"the syncer exited {syncer.p.returncode}")
final = float(done.group(2))
if not final < initial:
    fail(f"final eval loss {final} not below the initial {initial}")
print(f"PASS: site-a and site-c trained on; final eval loss {final:.4f} < initial {initial:.4f}; {now():.0f} s")
cleanup()

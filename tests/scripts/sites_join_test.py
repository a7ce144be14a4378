#!/usr/bin/env python3
"""Sites that are not in the configuration join a running run (configs/join.toml: site-a holds
island 0, islands 1 and 2 are open; loopback, mutual TLS).

Once site-a's island has been merged, site-a's link is cut for 6 s (at both ends at once, on
site-a's clock, although the syncer started seconds earlier), and during the cut site-j
joins with one island: it is given open island 1, heals from the global parameters and
contributes (a commit holds island 1) while site-a's frames wait for the link. While it trains, four
joiners are refused and the run goes on: one under site-j's name (it has a live session), one
whose model differs, one asking for more islands than are open, and one whose certificate comes
from another CA (refused at the door). Then site-j leaves on SIGTERM: its island is open again at
once, and site-k joins, takes island 1 back and goes on from the step site-j reached (its data
part goes on with it). site-k is killed with -9: its island stays its own for net.join_lease_ms
(a joiner asking for two islands is refused), and site-k started again takes it back. Island 2
stays open all along and nobody waits for it: the run ends when site-a's and site-k's islands
have trained their steps.

usage: sites_join_test.py DILOCO SOURCE_DIR
"""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Proc, cleanup, fail, mkcerts, now, work_dirs  # noqa: E402

DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
WORK = tempfile.mkdtemp(prefix="diloco-join-")
work_dirs.append(WORK)
# configs/join.toml with site-a's link cut for 6 s from 4 s after its start: site-j joins during it.
CONFIG = os.path.join(WORK, "join.toml")
with open(os.path.join(SRC, "configs", "join.toml")) as src, open(CONFIG, "w") as out:
    # A lease long enough for a loaded machine to restart site-k within it, and steps enough for
    # site-a to train on after its partition heals on a fast machine too (300 steps took 10 s on a
    # 2-core Xeon: site-a finished inside its cut, and what it sent meanwhile came too stale to merge).
    text = src.read().replace("join_lease_ms = 10000.0", "join_lease_ms = 30000.0").replace("\nsteps = 300\n", "\nsteps = 900\n")
    if "steps = 900" not in text:
        fail("configs/join.toml no longer says steps = 300")
    out.write(text + '\n[[faults]]\nkill = "partition"\nsite = "site-a"\nat_s = 4.0\nduration_s = 6.0\n')
certs, strangers = os.path.join(WORK, "certs"), os.path.join(WORK, "other-ca")
mkcerts(SRC, certs, "syncer", "site-a", "site-j", "site-k", "site-m", "site-w")
mkcerts(SRC, strangers, "site-x")  # a CA of its own


def commits_with(syncer, island, since):
    # When each commit happened, not when its line came: the syncer prints commits after it has
    # evaluated the round before, a second late or more on a sanitized build.
    return [t for t, m in syncer.stamped(r"commit round \d+ fragment \d+: islands ([\d,]*)", since)
            if island in {int(x) for x in m.group(1).split(",") if x}]


def wait_commit_with(syncer, island, since, what):
    start = now()
    while not commits_with(syncer, island, since):
        if not syncer.progressing(start, 60):
            fail(f"no commit with island {island} {what}")
        time.sleep(0.1)


syncer = Proc("syncer", cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--certs", certs, "--state",
                                        os.path.join(WORK, "state"), "--listen", "127.0.0.1:0"])
port = int(syncer.wait_for(r"listening on 127\.0\.0\.1:(\d+)", 60).group(1))
syncer.wait_for(r"--join --islands N .*open islands 1,2", 10)
initial = float(syncer.wait_for(r"initial eval loss ([0-9.]+)", 60).group(1))
to = ["--connect", f"127.0.0.1:{port}"]


def site(name, *extra, certs_dir=certs):
    return Proc(name, cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", name, *to, "--certs", certs_dir, *extra])


a = site("site-a")
wait_commit_with(syncer, 0, 0.0, "from site-a")
cut = a.wait_for(r"^\s*[0-9.]+s  injected fault: .*partition", 30)
cut_at = a.stamped(r"injected fault: .*partition")[0][0]  # when it began, not when the test looked
print(f"{cut_at:7.2f}s site-a cut off: {cut.string.strip()}")
# The syncer's end of the link is cut on site-a's clock too (site-a's join request said where its
# clock stands), not at 4 s of the syncer's own, which started seconds earlier.
syncer.wait_for(r"injected fault: .*partition", 10)
syncer_cut_at = syncer.matches(r"injected fault: .*partition")[0][0]  # logged, not stamped: when it came
if abs(syncer_cut_at - cut_at) > 1.0:
    fail(f"the syncer cut site-a's link at {syncer_cut_at:.2f} s, site-a at {cut_at:.2f} s")
print(f"{syncer_cut_at:7.2f}s the syncer's end of site-a's link cut too")
joined_at = now()
j = site("site-j", "--join", "--islands", "1")
j.wait_for(r"joined the run with open islands 1$", 30)
syncer.wait_for(r"joiner site-j authenticated \(certificate CN=site-j, key proven\), takes open islands 1,", 10, joined_at)
j.wait_for(r"island 1 step \d+ ", 60)
wait_commit_with(syncer, 1, joined_at, "after site-j joined")
merged_at = commits_with(syncer, 1, joined_at)[0]
# Frames in flight when the cut began may still land; none sent during it does before it heals.
early = [t for t in commits_with(syncer, 0, cut_at + 1.0) if t < min(merged_at, cut_at + 5.0)]
if early:
    fail(f"site-a's island was merged at {early[0]:.2f} s while its link was cut")
print(f"{now():7.2f}s site-j joined with island 1 and was merged at {merged_at:.2f} s "
      f"({'during' if merged_at < cut_at + 6.0 else 'after'} site-a's partition)")
wait_commit_with(syncer, 0, cut_at + 6.0, "after site-a's partition healed")

# Refused joiners; the run goes on. The two that would retry get 6 attempts: four joiners dial at
# once, and on a slow (sanitized) build two connection time-outs could end one before the
# syncer ever saw it, leaving nothing to refuse.
refusals = [
    (site("site-j", "--join", "--islands", "1", "--max-attempts", "6"), 3,
     r"joiner 'site-j' already has a live session"),
    (site("site-w", "--join", "--islands", "1", "--set", "model.n_embd=64"), 4,
     r"joiner 'site-w' refused: its model differs: it brings .*, the run trains "),
    (site("site-m", "--join", "--islands", "3"), 4,
     r"joiner 'site-m' refused: it asks for 3 islands and 1 of the run's 2 open islands are free"),
    (site("site-x", "--join", "--islands", "1", "--max-attempts", "6", certs_dir=strangers), 3,
     r"certificate not trusted|TLS handshake failed"),
]
refused_at = now()
for p, code, said in refusals:
    if p.wait_exit(60) != code:
        fail(f"refused joiner {p.name} exited {p.p.returncode}, expected {code}")
    syncer.wait_for(said, 10, joined_at)
# site-a may have trained all its steps meanwhile (a fast machine): ending so is no stop.
a_finished = not a.alive() and a.p.returncode == 0 and a.matches(r"^done: site site-a, ")
if not j.alive() or not (a.alive() or a_finished):
    fail("a refused joiner stopped a site of the run")
wait_commit_with(syncer, 1, now(), "after the refusals")
print(f"{now():7.2f}s four joiners refused, each with its reason; the run went on")

# site-j leaves; site-k takes island 1 and goes on where site-j stopped.
j.p.send_signal(signal.SIGTERM)
left_at = now()
if j.wait_exit(60) != 0:
    fail(f"site-j exited {j.p.returncode} after SIGTERM, expected 0")
reached = int(j.wait_for(r"island 1 leaving at step (\d+)", 5).group(1))
# At once (the lease is 30 s): it left, it was not lost.
syncer.wait_for(r"joiner site-j's islands are open again", 3, left_at)
opened_at = syncer.matches(r"joiner site-j's islands are open again", left_at)[0][0]
if opened_at - left_at > 5.0:
    fail(f"site-j's island opened {opened_at - left_at:.1f} s after it left: held as if it were lost")
k = site("site-k", "--join", "--islands", "1")
k.wait_for(r"joined the run with open islands 1$", 30)
resumed = int(k.wait_for(r"island 1 resumes at step (\d+)", 10).group(1))
if not 0 < resumed <= reached:
    fail(f"site-k's island 1 resumed at step {resumed}, site-j left at step {reached}")
wait_commit_with(syncer, 1, now(), "after site-k joined")
print(f"{now():7.2f}s site-j left at step {reached}; site-k took island 1 at step {resumed}")

# kill -9 of site-k: island 1 stays site-k's for net.join_lease_ms (a joiner asking for two
# islands finds one free), and site-k started again takes it back and goes on.
k.p.kill()
k.wait_exit(10)
killed_at = now()
m = site("site-m", "--join", "--islands", "2")
k = site("site-k", "--join", "--islands", "1")
if m.wait_exit(60) != 4:
    fail(f"site-m exited {m.p.returncode} asking for 2 islands while island 1 is leased, expected 4")
syncer.wait_for(r"joiner 'site-m' refused: it asks for 2 islands and 1 of the run's 2 open islands are free", 10, killed_at)
k.wait_for(r"joined the run with open islands 1$", 60)
again = int(k.wait_for(r"island 1 resumes at step (\d+)", 10).group(1))
if again < resumed:
    fail(f"site-k started again resumed island 1 at step {again}, before {resumed}")
wait_commit_with(syncer, 1, now(), "after site-k came back")
if syncer.matches(r"joiner site-k's islands are open again", killed_at):
    fail("site-k's islands were opened while its lease ran")
print(f"{now():7.2f}s site-k killed (-9) and started again: island 1 kept for it, resumed at step {again}")

for p in (a, k):
    if p.wait_exit(180) != 0:
        fail(f"{p.name} exited {p.p.returncode}")
done = syncer.wait_for(r"done: syncer, (\d+) global rounds, final eval loss ([0-9.]+)", 60)
if syncer.wait_exit(30) != 0:
    fail(f"the syncer exited {syncer.p.returncode}")
if commits_with(syncer, 2, 0.0):
    fail("a commit holds island 2, which nobody took")
final = float(done.group(2))
if not final < initial:
    fail(f"final eval loss {final} not below the initial {initial}")
print(f"PASS: joined, refused four ways, left and re-taken; final eval loss {final:.4f} < initial {initial:.4f}; "
      f"{now():.0f} s")
cleanup()

#!/usr/bin/env python3
"""A run across processes killed whole with kill -9 resumes from its state directory and finishes
(configs/sites.toml, loopback, mutual TLS).

A syncer and three sites share one state directory (`--state`): the syncer keeps its state file
there every round (syncer.snapshot_every = 1), each site its islands' own states whenever they
send. Once rounds have been committed, every process is killed with SIGKILL. Started again with
the same commands, the syncer resumes at a round no earlier than one before the last it
committed, each site's island resumes from its own saved state, and the run finishes: every
process exits 0 and the final eval loss is below the initial one. The same directory under
another setting (train.H) is refused by the syncer and by a site, naming the setting.

usage: sites_resume_test.py DILOCO SOURCE_DIR
"""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Proc, cleanup, fail, mkcerts, now, work_dirs  # noqa: E402

DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
CONFIG = os.path.join(SRC, "configs", "sites.toml")
WORK = tempfile.mkdtemp(prefix="diloco-sites-resume-")
work_dirs.append(WORK)
certs = os.path.join(WORK, "certs")
mkcerts(SRC, certs, "syncer", "site-a", "site-b", "site-c")
STATE = os.path.join(WORK, "state")
SET = ["--set", "syncer.snapshot_every=1", "--set", "train.steps=150"]
SITES = ("site-a", "site-b", "site-c")
COMMIT = r"commit round (\d+) fragment"


def syncer(label, listen, extra=()):
    p = Proc(label, cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--certs", certs, "--state", STATE, "--listen", listen]
             + SET + list(extra))
    return p, int(p.wait_for(r"listening on 127\.0\.0\.1:(\d+)", 60).group(1))


def site(name, port, label=None, extra=()):
    return Proc(label or name, cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", name, "--connect", f"127.0.0.1:{port}",
                                               "--certs", certs, "--state", STATE] + SET + list(extra))


s1, port = syncer("syncer", "127.0.0.1:0")
initial = float(s1.wait_for(r"initial eval loss ([0-9.]+)", 60).group(1))
first = [site(n, port) for n in SITES]
# Rounds committed, and every site has written its islands' states at least once.
start = now()
while True:
    rounds = [int(m.group(1)) for _, m in s1.matches(COMMIT)]
    files = [os.path.exists(os.path.join(STATE, "sites", f"{n}.safetensors")) for n in SITES]
    if rounds and max(rounds) >= 4 and all(files):
        break
    if not s1.progressing(start, 60) or not all(p.alive() for p in first + [s1]):
        fail(f"no round 4 with every site's state written (rounds {rounds[-3:]}, site files {files})")
    time.sleep(0.05)
for p in first + [s1]:
    os.kill(p.p.pid, signal.SIGKILL)
    p.p.wait()
last = max(int(m.group(1)) for _, m in s1.matches(COMMIT))
print(f"{now():7.2f}s kill -9 of the syncer and every site after round {last}")

s2, _ = syncer("syncer-2", f"127.0.0.1:{port}")
restored = int(s2.wait_for(r"syncer restored .* at global round (\d+)", 30).group(1))
if restored < last - 1:
    fail(f"the syncer resumed at round {restored}, more than one round before {last}")
second = [site(n, port, label=f"{n}-2") for n in SITES]
for i, p in enumerate(second):
    step = int(p.wait_for(rf"island {i} resumes at step (\d+) from its own saved state", 60).group(1))
    if step <= 0:
        fail(f"{p.name}: island {i} resumed at step {step}")
print(f"{now():7.2f}s the syncer resumed at round {restored}; every island from its own saved state")
for p in second:
    if p.wait_exit(180) != 0:
        fail(f"{p.name} exited {p.p.returncode}")
if s2.wait_exit(60) != 0:
    fail(f"the resumed syncer exited {s2.p.returncode}")
done = s2.wait_for(r"done: syncer, (\d+) global rounds, final eval loss ([0-9.]+)", 5)
if int(done.group(1)) <= restored:
    fail(f"the resumed run ended at round {done.group(1)}, not past {restored}")
if not float(done.group(2)) < initial:
    fail(f"final eval loss {done.group(2)} is not below the initial {initial:.4f}")
rounds = [int(m.group(1)) for _, m in s2.matches(COMMIT)]
if rounds and min(rounds) <= restored - 1:
    fail(f"the resumed syncer committed round {min(rounds)}, before the round it resumed at ({restored})")
print(f"{now():7.2f}s the resumed run finished: round {done.group(1)}, final eval loss {done.group(2)} "
      f"(initial {initial:.4f})")

other = Proc("syncer-other", cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--certs", certs, "--state", STATE, "--listen",
                                             "127.0.0.1:0", "--set", "train.H=10"] + SET)
if other.wait_exit(60) == 0:
    fail("the syncer resumed the state directory under train.H = 10")
other.wait_for(r"train\.H is 20 in the state directory, 10 now", 5)
stranger = site("site-a", port, label="site-a-other", extra=["--set", "train.H=10"])
if stranger.wait_exit(60) == 0:
    fail("site-a resumed the state directory under train.H = 10")
stranger.wait_for(r"train\.H is 20 in the state directory, 10 now", 5)
print(f"{now():7.2f}s the same directory with train.H = 10: refused by the syncer and by a site, naming the setting")
cleanup()
print("PASS")

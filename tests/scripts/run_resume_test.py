#!/usr/bin/env python3
"""A whole run killed with kill -9 resumes from its state directory and continues its loss curve
(`diloco run configs/decoupled.toml --state DIR`).

The run writes its state every global round (syncer.snapshot_every = 1). Once it has committed
a few rounds it is killed with SIGKILL, the whole process at once. Started again with the same
command, it says where it resumes: at a round no earlier than one before the last it reported,
with islands past step 0, and the global parameters it resumes from evaluate to the loss it
reported for that round (or, if that row was not printed, within noise of the last one before
the kill). It then trains to the end: its rounds go on from there and it exits 0. The same
directory under another setting (train.H) is refused, naming the setting and both values.

usage: run_resume_test.py DILOCO SOURCE_DIR
"""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Proc, cleanup, fail, now, work_dirs  # noqa: E402

DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
CONFIG = os.path.join(SRC, "configs", "decoupled.toml")
WORK = tempfile.mkdtemp(prefix="diloco-resume-")
work_dirs.append(WORK)
STATE = os.path.join(WORK, "state")
ARGS = [DILOCO, "run", CONFIG, "--state", STATE, "--set", "syncer.snapshot_every=1"]
ROW = r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+\d+\s"  # round, train loss, eval loss, tok/s


def rows(p, since=0.0):
    return [(int(m.group(1)), float(m.group(3))) for _, m in p.matches(ROW, since)]


first = Proc("run", ARGS, cwd=WORK)
first.wait_for(ROW, 120)
start = now()
while max(r for r, _ in rows(first)) < 6:
    if not first.alive() or not first.progressing(start, 60):
        fail("the run did not reach global round 6")
    time.sleep(0.05)
os.kill(first.p.pid, signal.SIGKILL)
first.p.wait()
before = dict(rows(first))
last_round = max(before)
print(f"{now():7.2f}s kill -9 of the run after global round {last_round} (eval loss {before[last_round]:.4f})")
if not os.path.exists(os.path.join(STATE, "state.safetensors")) or not os.path.exists(os.path.join(STATE, "run.toml")):
    fail(f"no state in {STATE}: {os.listdir(STATE) if os.path.isdir(STATE) else 'no directory'}")

second = Proc("resumed", ARGS, cwd=WORK)
m = second.wait_for(r"resuming .* at global round (\d+) after ([0-9.]+) s: islands at steps \[([^\]]*)\], "
                    r"eval loss ([0-9.]+)", 120)
resumed_round, resumed_loss = int(m.group(1)), float(m.group(4))
steps = [int(s) for s in m.group(3).split(", ") if s != "-"]
print(f"{now():7.2f}s resumed at global round {resumed_round}, islands at steps {steps}, eval loss {resumed_loss:.4f}")
if resumed_round < last_round - 1:
    fail(f"resumed at round {resumed_round}: the run had reported round {last_round}, more than one round lost")
if not steps or max(steps) <= 0:
    fail(f"the islands' steps were not restored: {m.group(3)}")
if resumed_round in before:
    # The same global parameters: the same evaluation, to the digits printed.
    if abs(resumed_loss - before[resumed_round]) > 2e-4:
        fail(f"round {resumed_round} evaluated {before[resumed_round]:.4f} before the kill, {resumed_loss:.4f} resumed")
else:
    earlier = max(r for r in before if r <= resumed_round)
    if abs(resumed_loss - before[earlier]) > 0.05 * before[earlier]:
        fail(f"resumed eval loss {resumed_loss:.4f}, {before[earlier]:.4f} at round {earlier} before the kill")
after = second.wait_for(ROW, 120)
if int(after.group(1)) <= resumed_round - 1:
    fail(f"the resumed run reported round {after.group(1)} after resuming at {resumed_round}")
if abs(float(after.group(3)) - resumed_loss) > 0.1 * resumed_loss:
    fail(f"the first eval after resuming is {after.group(3)}, not within noise of {resumed_loss:.4f}")
if second.wait_exit(180) != 0:
    fail(f"the resumed run exited {second.p.returncode}")
done = second.wait_for(r"done: decoupled on actors, (\d+) global rounds, final eval loss ([0-9.]+)", 5)
if int(done.group(1)) <= resumed_round:
    fail(f"the resumed run ended at round {done.group(1)}, not past {resumed_round}")
if not float(done.group(2)) < resumed_loss:
    fail(f"final eval loss {done.group(2)} is not below the loss it resumed from ({resumed_loss:.4f})")
print(f"{now():7.2f}s the resumed run trained on to round {done.group(1)}, final eval loss {done.group(2)}")

other = Proc("other-config", ARGS + ["--set", "train.H=10"], cwd=WORK)
code = other.wait_exit(60)
if code == 0:
    fail("the state directory was resumed under train.H = 10")
other.wait_for(r"train\.H is 20 in the state directory, 10 now", 5)
if other.matches(ROW):
    fail("the run of another configuration trained")
print(f"{now():7.2f}s the same directory with train.H = 10: refused naming the setting (exit {code})")
cleanup()
print("PASS")

#!/usr/bin/env python3
"""A run with a replicated syncer, killed whole with SIGKILL (every replica and every site), is
started again with the same commands and finishes (configs/replicas.toml, loopback, mutual TLS,
a real etcd from the ctest fixture).

Each replica keeps its state directory and each site `--state`. Started again, the replicas elect
a leader that resumes no earlier than the newest round any replica held before the kill (a
replica elected behind another resigns), every site resumes its island from its own saved state,
and the run finishes: every site exits 0, the leader ends the run, the others end with it.

usage: replicas_resume_test.py DILOCO SOURCE_DIR (DILOCO_ETCD_FILE: the fixture's endpoint file)
"""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import LEADS, REPLICA_SITES, REPLICAS, Proc, cleanup, fail, now, replicas_run, work_dirs  # noqa: E402

DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
CONFIG = os.path.join(SRC, "configs", "replicas.toml")
ETCD = open(os.environ["DILOCO_ETCD_FILE"]).read().strip()
WORK = tempfile.mkdtemp(prefix="diloco-replicas-resume-")
work_dirs.append(WORK)
SITES = REPLICA_SITES
certs, SET = replicas_run(SRC, WORK, ETCD, f"replicas-resume-{os.getpid()}", "train.steps=250")
HOLDS = r"holds round (\d+) \(term"


def replica(name, label):
    return Proc(label, cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--replica", name, "--certs", certs,
                                       "--state", os.path.join(WORK, "state", name)] + SET)


def site(name, label):
    return Proc(label, cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", name, "--certs", certs,
                                       "--state", os.path.join(WORK, "sites")] + SET)


first = [replica(r, r) for r in REPLICAS]
start = now()
while not any(p.matches(LEADS) for p in first):
    if not all(p.progressing(start, 60) for p in first):
        fail("no replica leads")
    time.sleep(0.05)
sites = [site(s, s) for s in SITES]
start = now()
while True:
    held = [max([int(m.group(1)) for _, m in p.matches(HOLDS)] or [0]) for p in first]
    saved = [os.path.exists(os.path.join(WORK, "sites", "sites", f"{s}.safetensors")) for s in SITES]
    if sorted(held)[1] >= 5 and all(saved):  # the followers hold round 5, every site saved its island
        break
    if not any(p.progressing(start, 90) for p in first + sites):
        fail(f"no round 5 held by the followers with every site's state saved (held {held}, saved {saved})")
    time.sleep(0.05)
for p in first + sites:
    os.kill(p.p.pid, signal.SIGKILL)
    p.p.wait()
newest = max(max([int(m.group(1)) for _, m in p.matches(HOLDS)] or [0]) for p in first)
print(f"{now():7.2f}s kill -9 of every replica and every site; the newest round a follower held: {newest}")

again = [replica(r, r + "-2") for r in REPLICAS]
start = now()
while not any(p.matches(LEADS) for p in again):
    if not all(p.progressing(start, 60) for p in again):
        fail("no replica leads after the restart")
    time.sleep(0.05)
leader = next(p for p in again if p.matches(LEADS))
restored = int(leader.wait_for(r"syncer restored .* at global round (\d+)", 30).group(1))
if restored < newest:
    fail(f"{leader.name} resumed at round {restored}, older than round {newest} a replica held")
print(f"{now():7.2f}s {leader.name} leads again, resumed at round {restored}")
sites2 = [site(s, s + "-2") for s in SITES]
for i, p in enumerate(sites2):
    step = int(p.wait_for(rf"island {i} resumes at step (\d+) from its own saved state", 60).group(1))
    if step <= 0:
        fail(f"{p.name}: island {i} resumed at step {step}")
for p in sites2:
    if p.wait_exit(180) != 0:
        fail(f"{p.name} exited {p.p.returncode}")
for p in again:
    if p.wait_exit(60) != 0:
        fail(f"{p.name} exited {p.p.returncode}")
final = leader.wait_for(r"final eval loss ([0-9.]+) .*\(initial", 5)
print(f"{now():7.2f}s the resumed run finished: final eval loss {final.group(1)}")
cleanup()
print("PASS")

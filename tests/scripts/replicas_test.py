#!/usr/bin/env python3
"""A replicated syncer loses its leader twice, has a third one paused past its lease, and the run
goes on (configs/replicas.toml, three replicas and three sites on loopback, mutual TLS, a real
etcd from the ctest fixture).

The three start together; one leads, the other two follow it and hold its commits. Once the
sites have trained a few rounds, the leader is killed with SIGKILL: etcd elects another replica
after the lease, which resumes from the last commit it holds, and the sites move to it without
restarting. No round any island had heard of is lost (the base round each island held when it
re-joined, against the round the new leader resumed at). The killed replica is started again and
follows; then the second leader is killed too, and a third term begins (it comes back as a
follower as well: a replica leads only while it sees a majority of them). The third leader is then
paused with SIGSTOP past its lease: a fourth term begins, and the paused one, woken, finds its
lease gone, stops serving without committing again and follows. The run finishes: every site
exits 0, the last leader ends the run, the other replica ends with it. Rounds never go back
within a leader's life, terms only grow, and each new leader resumes at a round no older than
what it held when it was elected.

usage: replicas_test.py DILOCO SOURCE_DIR (DILOCO_ETCD_FILE: the fixture's endpoint file)
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
WORK = tempfile.mkdtemp(prefix="diloco-replicas-")
work_dirs.append(WORK)
SITES = REPLICA_SITES
certs, SET = replicas_run(SRC, WORK, ETCD, f"replicas-test-{os.getpid()}", "train.steps=500", "syncer.snapshot_every=1")
COMMIT = r"commit round (\d+) fragment"


def replica(name, label=None):
    return Proc(label or name, cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--replica", name, "--certs", certs,
                                               "--state", os.path.join(WORK, "state", name)] + SET)


def site(name):
    return Proc(name, cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", name, "--certs", certs] + SET)


def wait_until(what, cond, procs, timeout):
    start = now()
    while not cond():
        if not any(p.progressing(start, timeout) for p in procs):
            fail(f"no {what} within {timeout} s")
        time.sleep(0.05)


def replica_name(p):
    """The replica a process runs (syncer-a-2 is syncer-a started again)."""
    return p.name if p.name in REPLICAS else p.name.rsplit("-", 1)[0]


def commits(p):
    return [int(m.group(1)) for _, m in p.matches(COMMIT)]


def held(p):
    return [int(m.group(1)) for _, m in p.matches(r"holds round (\d+) \(term")]


# All three start together: a replica leads only seeing what a majority holds, so none leads alone.
first = [replica(r) for r in REPLICAS]
wait_until("a leader", lambda: any(p.matches(LEADS) for p in first), first, 60)
a = next(p for p in first if p.matches(LEADS))
term1 = int(a.matches(LEADS)[0][1].group(1))
b, c = [p for p in first if p is not a]
for f in (b, c):
    f.wait_for(r"follows %s \(term %d\)" % (a.name, term1), 60)
sites = [site(n) for n in SITES]
wait_until("round 4 committed and held by both followers",
           lambda: commits(a) and max(commits(a)) >= 4 and all(held(f) and max(held(f)) >= 3 for f in (b, c)),
           [a, b, c], 90)
time.sleep(0.5)
os.kill(a.p.pid, signal.SIGKILL)
a.p.wait()
print(f"{now():7.2f}s kill -9 of the leader {a.name} (term {term1}); followers held rounds {max(held(b))} and "
      f"{max(held(c))}")


def next_leader(candidates, older_term, since):
    found = []
    wait_until("new leader", lambda: any(p.matches(LEADS, since) for p in candidates) and
               (found.extend([p for p in candidates if p.matches(LEADS, since)]) or True), candidates, 60)
    p = found[0]
    t, m = p.matches(LEADS, since)[0]
    term, from_round = int(m.group(1)), int(m.group(2))
    if term <= older_term:
        fail(f"{p.name} leads under term {term}, not newer than {older_term}")
    return p, term, from_round, t


t_kill = now()
l2, term2, from2, t_led2 = next_leader([b, c], term1, t_kill)
restored = int(l2.wait_for(r"syncer restored .* at global round (\d+)", 30, since=t_kill).group(1))


def island_rounds(since):
    """The base rounds the sites' islands held when they re-joined after `since`: what they had
    heard of the dead leader's commits."""
    wait_until("every island re-joined", lambda: all(p.matches(r"re-joined the syncer \(base round", since) for p in sites),
               sites, 60)
    return [int(m.group(1)) for p in sites for _, m in p.matches(r"re-joined the syncer \(base round \d+, it held (\d+)\)", since)[:1]]


lost1 = max(0, max(island_rounds(t_kill)) - restored)
print(f"{now():7.2f}s {l2.name} leads (term {term2}) {t_led2 - t_kill:.2f} s after the kill, resumed at round "
      f"{restored}; the islands had heard of round {restored + lost1}: {lost1} round(s) lost")
if restored < from2:
    fail(f"{l2.name} resumed at round {restored}, older than the round {from2} it held")
if lost1 > 0:
    fail(f"{lost1} rounds the islands had heard of were lost on failover (a commit reaches them once replicated)")
# The killed replica comes back as a follower of the new leader.
a2 = replica(a.name, a.name + "-2")
a2.wait_for(r"follows %s \(term %d\)" % (replica_name(l2), term2), 60)
wait_until("more rounds under the second leader",
           lambda: [r for r in commits(l2) if r > restored + 3], [l2] + sites, 90)
other = c if l2 is b else b
wait_until("the followers holding the second leader's rounds",
           lambda: max(held(other) or [0]) > restored and max(held(a2) or [0]) > restored, [l2, other, a2], 60)
time.sleep(0.5)
os.kill(l2.p.pid, signal.SIGKILL)
l2.p.wait()
t_kill2 = now()
print(f"{now():7.2f}s kill -9 of the second leader {l2.name} (term {term2})")
l3, term3, from3, t_led3 = next_leader([other, a2], term2, t_kill2)
restored3 = int(l3.wait_for(r"syncer restored .* at global round (\d+)", 30, since=t_kill2).group(1))
lost2 = max(0, max(island_rounds(t_kill2)) - restored3)
print(f"{now():7.2f}s {l3.name} leads (term {term3}) {t_led3 - t_kill2:.2f} s after the kill, resumed at round "
      f"{restored3}; the islands had heard of round {restored3 + lost2}: {lost2} round(s) lost")
if restored3 < from3 or lost2 > 0:
    fail(f"{l3.name} resumed at round {restored3} (held {from3}; the islands had heard of {restored3 + lost2})")

# The second killed leader comes back as a follower too: a leader needs a majority of replicas up.
l2b = replica(replica_name(l2), replica_name(l2) + "-2")
l2b.wait_for(r"follows %s \(term %d\)" % (replica_name(l3), term3), 60)
# A leader paused past its lease (SIGSTOP) is replaced; woken, it finds its lease gone, stops
# serving without committing again and follows the newer term.
wait_until("more rounds under the third leader", lambda: [r for r in commits(l3) if r > restored3 + 2], [l3] + sites, 90)
os.kill(l3.p.pid, signal.SIGSTOP)
t_stop = now()
rest = [p for p in (other, a2, l2b) if p is not l3]
l4, term4, from4, t_led4 = next_leader(rest, term3, t_stop)
os.kill(l3.p.pid, signal.SIGCONT)
print(f"{now():7.2f}s {l3.name} paused (SIGSTOP) past its lease: {l4.name} leads (term {term4}) "
      f"{t_led4 - t_stop:.2f} s later; {l3.name} woken")
l3.wait_for(r"deposed: lost the etcd lease of term %d; stops serving" % term3, 30, since=t_stop)
l3.wait_for(r"follows %s \(term %d\)" % (replica_name(l4), term4), 60, since=t_stop)
stale_commits = [t for t, m in l3.matches(COMMIT, t_stop) if t > t_led4]
if stale_commits:
    fail(f"{l3.name} committed after {l4.name} was elected")
print(f"{now():7.2f}s {l3.name}: deposed, stopped serving, follows {l4.name}")
l3, term3 = l4, term4

for p in sites:
    if p.wait_exit(240) != 0:
        fail(f"{p.name} exited {p.p.returncode}")
for p in (other, a2, l2b):  # the last leader, the deposed one and the other follower
    if p.wait_exit(60) != 0:
        fail(f"{p.name} exited {p.p.returncode}")
    if p is not l3:
        p.wait_for(r"the run is over", 5)
# Rounds only grow within each leader's life, and each leader starts at or after the last one's resume.
for p in (l2, l3):
    rs = [int(m.group(1)) for _, m in p.matches(COMMIT, t_led4 if p is l3 else 0)]
    if any(y < x for x, y in zip(rs, rs[1:])):
        fail(f"{p.name}'s rounds went back: {rs}")
restored4 = int(l3.wait_for(r"syncer restored .* at global round (\d+)", 30, since=t_led4).group(1))
first4 = [int(m.group(1)) for _, m in l3.matches(COMMIT, t_led4)]
if first4 and min(first4) <= restored4:
    fail(f"{l3.name} committed round {min(first4)}, not past the round {restored4} it resumed at")
stale = sum(len(p.matches(r"deposed syncer leader")) for p in sites)
final = l3.wait_for(r"final eval loss ([0-9.]+)", 5)
print(f"{now():7.2f}s the run finished under term {term3}: final eval loss {final.group(1)}; "
      f"rounds lost on failover: {lost1} and {lost2}; stale sessions refused: {stale}")
if os.environ.get("REPLICAS_TEST_LOG"):
    with open(os.environ["REPLICAS_TEST_LOG"], "w") as out:
        for p in [a, b, c, a2, l2b] + sites:
            out.write(f"---- {p.name}\n{p.text()}\n")
cleanup()
print("PASS")

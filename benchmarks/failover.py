#!/usr/bin/env python3
"""failover: a replicated syncer (configs/replicas.toml: three replicas, three sites, mutual TLS on
loopback, leadership through a real etcd started for the benchmark) whose leader is killed with
SIGKILL every N seconds, against the same run undisturbed, in one invocation.

For each kill: the time from the leader's death to the next commit (by the new leader), the
rounds lost (rounds the islands had heard of that the new leader does not hold: the highest base
round any island re-joined with, minus the round the new leader resumed at), and the climb: the
highest eval loss of the 10 rounds after the resume over the loss at the resumed round, or the
last evaluated before it (what the
failover did to the model; the islands' catch-ups once overshot on the outer momentum: +18% and
+24%). For the run: its
wall time from the sites' start to their end against the undisturbed run's (the same steps, so
the same tokens: goodput relative to the undisturbed run is their ratio), and the final eval loss
of each, and goodput counted in tokens: the tokens of the contributions merged into the global
model (the last leader's count, which each snapshot carries across leaders) over the tokens the
sites trained; the failover run's against the undisturbed one's. The killed replica is started
again 2 s after each kill and follows the new leader.

Targets (issue "No single point of failure"): 0 committed rounds lost, goodput >= 98% of the
undisturbed run. Prints a table and ONE JSON object as its last line.

usage: failover.py DILOCO SOURCE_DIR [--steps 400] [--every 20] [--lease-ms 3000] [--no-baseline]
(FAILOVER_LOGS=DIR keeps every process's output there)
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

if any(a in ("-h", "--help") for a in sys.argv[1:]):
    print(__doc__.strip())
    sys.exit(0)
if len(sys.argv) < 3 or sys.argv[1].startswith("-") or sys.argv[2].startswith("-"):
    sys.exit("failover: want DILOCO SOURCE_DIR first (build/benchmarks/failover passes them)\n\n" + __doc__.strip())
DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(SRC, "tests", "scripts"))
from harness import LEADS, REPLICA_SITES, REPLICAS, Proc, cleanup, fail, now, procs, replicas_run, work_dirs  # noqa: E402

args = sys.argv[3:]
for a in args:
    if a.startswith("--") and a not in ("--steps", "--every", "--lease-ms", "--no-baseline"):
        sys.exit(f"failover: unknown option {a} (--help lists them)")


def opt(name, default):
    return type(default)(args[args.index(name) + 1]) if name in args else default


STEPS, EVERY, LEASE_MS = opt("--steps", 400), opt("--every", 20.0), opt("--lease-ms", 3000.0)
CLIMB_ROUNDS = 10
CONFIG = os.path.join(SRC, "configs", "replicas.toml")
SITES = REPLICA_SITES
WORK = tempfile.mkdtemp(prefix="diloco-bench-failover-")
work_dirs.append(WORK)
ETCD_DIR = os.path.join(WORK, "etcd")
FIXTURE = os.path.join(SRC, "tests", "scripts", "etcd_fixture.py")
if subprocess.run([sys.executable, FIXTURE, "start", ETCD_DIR], stdout=subprocess.DEVNULL).returncode != 0:
    sys.exit("failover: etcd did not start (scripts/setup.sh installs etcd-server)")
ETCD = open(os.path.join(ETCD_DIR, "endpoint")).read().strip()


def run(label, kill_every):
    del procs[:]
    certs, sets = replicas_run(SRC, WORK, ETCD, f"failover-{label}-{os.getpid()}", f"train.steps={STEPS}",
                               f"net.lease_ms={LEASE_MS}")
    state = tempfile.mkdtemp(dir=WORK)

    def replica(name, n=0):
        return Proc(f"{label}-{name}-{n}", cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--replica", name, "--certs", certs,
                                                          "--state", os.path.join(state, name)] + sets)

    live = {r: replica(r) for r in REPLICAS}  # together: none leads alone
    start = now()
    while not any(p.matches(LEADS) for p in live.values()):
        if now() - start > 60:
            fail(f"{label}: no replica leads")
        time.sleep(0.05)
    first = next(n for n, p in live.items() if p.matches(LEADS))
    for n, p in live.items():
        if n != first:
            p.wait_for(r"follows " + first, 60)
    t0 = now()
    sites = [Proc(f"{label}-{s}", cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", s, "--certs", certs] + sets)
             for s in SITES]
    kills, restarts = [], {}
    next_kill = None
    while any(p.p.poll() is None for p in sites):
        t = now()
        if kill_every and next_kill is None and any(p.matches(r"commit round") for p in live.values()):
            next_kill = t + kill_every
        if kill_every and next_kill is not None and t >= next_kill:
            leaders = [(p.matches(LEADS)[-1][0], name) for name, p in live.items() if p.p.poll() is None and p.matches(LEADS)]
            if leaders:
                _, name = max(leaders)
                p = live[name]
                os.kill(p.p.pid, signal.SIGKILL)
                p.p.wait()
                kills.append({"at": now(), "leader": name})
                restarts[name] = now() + 2.0
            next_kill = now() + kill_every
        for name, at in list(restarts.items()):
            if now() >= at:
                live[name] = replica(name, sum(1 for k in kills if k["leader"] == name))
                del restarts[name]
        if t - t0 > 900:
            fail(f"{label}: the run did not finish in 900 s")
        time.sleep(0.05)
    wall = now() - t0
    for p in sites:
        if p.p.returncode != 0:
            fail(f"{label}: {p.name} exited {p.p.returncode}")
    # The last leader ends the run and prints its summary.
    final, rounds, merged = None, None, None
    for p in live.values():
        if p.wait_exit(120) == 0 and p.matches(r"final eval loss ([0-9.]+)"):
            final = float(p.matches(r"final eval loss ([0-9.]+)")[-1][1].group(1))
            rounds = int(p.matches(r"done: syncer, (\d+) global rounds")[-1][1].group(1))
            merged = int(p.matches(r"(\d+) tokens merged since the run began")[-1][1].group(1))
    if final is None:
        fail(f"{label}: no replica printed the run's summary")
    # Goodput as the project defines it, counted in tokens: what the islands trained that reached
    # the global model (the last leader's count, kept in the replicated snapshots across leaders)
    # over what they trained (each site's own count).
    trained = sum(int(s.matches(r"done: site \S+, islands [\d,]+, (\d+) tokens in")[-1][1].group(1)) for s in sites)
    everyone = [p for p in procs if p.name.startswith(label + "-syncer")]
    # The eval loss of every round, whoever led it (each leader evaluates the rounds it commits);
    # a round a dead leader committed unreplicated and the next committed again: the later one.
    evals = {int(m.group(1)): float(m.group(2)) for _, m in sorted(
        (x for p in everyone for x in p.matches(r"round (\d+) eval loss ([0-9.]+)")), key=lambda x: x[0])}
    for k in kills:
        # The new leader: the first "leads" line after the kill; its first commit after it.
        after = sorted((m[0], p) for p in everyone for m in p.matches(LEADS, k["at"])[:1])
        if not after:
            fail(f"{label}: nobody led after the kill at {k['at']:.1f} s")
        t_lead, p = after[0]
        m = p.matches(LEADS, k["at"])[0][1]
        k["term"], k["new_leader"] = int(m.group(1)), p.name.split("-", 1)[1].rsplit("-", 1)[0]
        k["elected_s"] = t_lead - k["at"]
        commits = p.matches(r"^\s*([0-9.]+)s  commit round (\d+)", t_lead)
        # The commit's own timestamp (seconds since the leader's timeline began, at its "leads" line):
        # printing lags behind evaluations, the stamp does not.
        k["to_commit_s"] = (t_lead + float(commits[0][1].group(1)) - k["at"]) if commits else None
        restored = p.matches(r"syncer restored .* at global round (\d+)", t_lead)
        k["resumed_round"] = int(restored[0][1].group(1)) if restored else 0
        heard = [int(mm.group(1)) for s in sites for _, mm in s.matches(r"re-joined the syncer \(base round \d+, it held (\d+)\)", k["at"])[:1]]
        k["islands_heard"] = max(heard) if heard else k["resumed_round"]
        k["lost_rounds"] = max(0, k["islands_heard"] - k["resumed_round"])
        # What the failover did to the model: the highest eval loss of the CLIMB_ROUNDS rounds after
        # the resume over the loss at the resumed round (or the last one evaluated before it: a
        # leader killed mid-evaluation never printed its last), as a run learning undisturbed falls.
        after_resume = [evals[r] for r in range(k["resumed_round"] + 1, k["resumed_round"] + 1 + CLIMB_ROUNDS) if r in evals]
        before = [r for r in evals if r <= k["resumed_round"]]
        base_loss = evals[max(before)] if before else None
        k["climb"] = max(after_resume) / base_loss - 1 if after_resume and base_loss else None
    if os.environ.get("FAILOVER_LOGS"):  # every process's output, for a closer look
        os.makedirs(os.environ["FAILOVER_LOGS"], exist_ok=True)
        with open(os.path.join(os.environ["FAILOVER_LOGS"], f"{label}.log"), "w") as out:
            for p in procs:
                out.write(f"---- {p.name}\n{p.text()}\n")
    for p in procs:
        if p.p.poll() is None:
            p.p.kill()
    return {"wall_s": wall, "final_eval_loss": final, "rounds": rounds, "kills": kills, "merged_tokens": merged,
            "trained_tokens": trained, "goodput": merged / trained if trained else float("nan")}


base = run("undisturbed", 0) if "--no-baseline" not in args else {"wall_s": float("nan"), "final_eval_loss": float("nan"), "rounds": 0,
                                                                   "goodput": float("nan")}
hit = run("failover", EVERY)
subprocess.run([sys.executable, FIXTURE, "stop", ETCD_DIR], stdout=subprocess.DEVNULL)
to_commit = [k["to_commit_s"] for k in hit["kills"] if k["to_commit_s"] is not None]
lost = sum(k["lost_rounds"] for k in hit["kills"])
goodput = hit["goodput"] / base["goodput"]
wall_ratio = base["wall_s"] / hit["wall_s"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"failover: configs/replicas.toml, {STEPS} steps, leader killed every {EVERY:g} s, lease {LEASE_MS:g} ms; {cpu}")
print(f"{'kill':>4} {'at s':>7} {'leader':>9} {'new leader':>10} {'term':>5} {'elected s':>9} {'to commit s':>11} "
      f"{'resumed':>7} {'heard':>5} {'lost':>4} {'climb':>6}")
for i, k in enumerate(hit["kills"]):
    tc = f"{k['to_commit_s']:.2f}" if k["to_commit_s"] is not None else "-"
    cl = f"{100 * k['climb']:+.1f}%" if k["climb"] is not None else "-"
    print(f"{i + 1:>4} {k['at']:7.1f} {k['leader']:>9} {k['new_leader']:>10} {k['term']:>5} {k['elected_s']:9.2f} "
          f"{tc:>11} {k['resumed_round']:>7} {k['islands_heard']:>5} {k['lost_rounds']:>4} {cl:>6}")
print(f"undisturbed: {base['wall_s']:.1f} s, {base['rounds']} rounds, final eval loss {base['final_eval_loss']:.4f}, "
      f"goodput {100 * base['goodput']:.1f}% of the trained tokens merged")
print(f"failover:    {hit['wall_s']:.1f} s, {hit['rounds']} rounds, final eval loss {hit['final_eval_loss']:.4f}, "
      f"goodput {100 * hit['goodput']:.1f}% ({hit['merged_tokens']} of {hit['trained_tokens']} tokens merged), "
      f"{len(hit['kills'])} leaders killed")
if to_commit:
    print(f"death -> next commit: median {statistics.median(to_commit):.2f} s, max {max(to_commit):.2f} s")
print(f"climb: the highest eval loss of the {CLIMB_ROUNDS} rounds after each resume over the loss at the resumed round "
      f"(an undisturbed run's only falls, give or take its noise)")
print(f"committed rounds lost: {lost} (target 0); goodput vs undisturbed: {100 * goodput:.1f}% (target >= 98%); "
      f"wall time undisturbed / failover {wall_ratio:.3f}")
cleanup()
print(json.dumps({"benchmark": "failover", "cpu": cpu, "steps": STEPS, "kill_every_s": EVERY, "lease_ms": LEASE_MS,
                  "undisturbed": base, "failover": hit,
                  "to_commit_median_s": statistics.median(to_commit) if to_commit else None,
                  "to_commit_max_s": max(to_commit) if to_commit else None, "lost_rounds": lost,
                  "goodput_ratio": goodput, "wall_ratio": wall_ratio}))

#!/usr/bin/env python3
"""elastic: a run whose fleet changes under it, against a fixed fleet at equal tokens, in one
invocation (every process on loopback with mutual TLS, `diloco syncer` and `diloco site`).

Elastic: 4 islands of capacity, sites site-a and site-b in the configuration (islands 0 and 1),
islands 2 and 3 open (net.allow_join). When island 0 reaches 1/5 of its steps, site-j and site-k
join with one island each (`diloco site --join --islands 1`); at 3/5, site-j leaves (SIGTERM: it
hands over its unsent progress) and site-k is killed (kill -9, not started again: its island is
open again after net.join_lease_ms and the run does not wait for it). site-a and site-b train all
their steps.

Fixed: 4 islands, sites site-a..site-d in the configuration, each training the same number of
steps, chosen so that the fixed run trains as many tokens as the elastic one did (its tokens are
counted from the sites' own `done:` lines; the killed joiner's from its last step line).

Reports: each run's tokens, wall time and final eval loss (the syncer's held-out evaluation), the
elastic run's loss against the fixed one's, and each joiner's goodput from its join: the
chip-seconds of its steps whose contributions reached the global model (from its heal, when the
global parameters are in place, to its last step for the leaver, whose hand-over is merged; to its
last whole sync period, H steps, before the kill for the killed one) over the chip-seconds from
its process start to its end. Prints a table and ONE JSON object as its last line.

usage: benchmarks/elastic.py [--diloco build/apps/diloco] [--steps 300] [--H 20]
       (ELASTIC_LOGS=DIR keeps every process's output)
"""
import json
import os
import signal
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "tests", "scripts"))
from harness import Proc, cleanup, fail, mkcerts, now, procs, work_dirs  # noqa: E402

if any(a in ("-h", "--help") for a in sys.argv[1:]):
    print(__doc__.strip())
    sys.exit(0)
args = sys.argv[1:]
for a in args:
    if a.startswith("--") and a not in ("--diloco", "--steps", "--H"):
        sys.exit(f"elastic: unknown option {a} (--help lists them)")


def opt(name, default):
    return type(default)(args[args.index(name) + 1]) if name in args else default


DILOCO = os.path.abspath(opt("--diloco", os.path.join(SRC, "build", "apps", "diloco")))
STEPS, H = opt("--steps", 300), opt("--H", 20)
WORK = tempfile.mkdtemp(prefix="diloco-bench-elastic-")
work_dirs.append(WORK)
CERTS = os.path.join(WORK, "certs")
mkcerts(SRC, CERTS, "syncer", "site-a", "site-b", "site-c", "site-d", "site-j", "site-k")
LOGS = os.environ.get("ELASTIC_LOGS")


def config(path, steps, sites):
    text = f"""[train]
mode = "decoupled"
islands = 4
steps = {steps}
H = {H}

[inner]
lr = 1e-3
warmup_steps = 20

[islands]
chips = 1

[syncer]
snapshot_every = 2

[net]
listen = "127.0.0.1:0"
certs = "{CERTS}"
heartbeat_ms = 200.0
timeout_ms = 3000.0
reconnect_initial_ms = 100.0
reconnect_max_ms = 1000.0
allow_join = {"true" if len(sites) < 4 else "false"}
join_lease_ms = 5000.0
"""
    for name, island in sites:
        text += f'\n[[sites]]\nname = "{name}"\nislands = [{island}]\n'
    with open(path, "w") as f:
        f.write(text)
    return path


DONE_SITE = r"done: site (\S+), islands [\d,]+, (\d+) tokens in ([0-9.]+) s"
DONE_SYNCER = r"done: syncer, (\d+) global rounds, final eval loss ([0-9.]+)"


def step_lines(p, island):
    return [(t, int(m.group(1))) for t, m in p.matches(rf"island {island} step (\d+) train loss")]


def keep_logs(label):
    if not LOGS:
        return
    os.makedirs(LOGS, exist_ok=True)
    for p in procs:
        with open(os.path.join(LOGS, f"{label}-{p.name}.log"), "w") as f:
            f.write(p.text())


def start(label, cfg):
    del procs[:]
    state = tempfile.mkdtemp(dir=WORK)
    syncer = Proc(f"{label}-syncer", cwd=WORK, args=[DILOCO, "syncer", cfg, "--certs", CERTS, "--state", state])
    port = int(syncer.wait_for(r"listening on 127\.0\.0\.1:(\d+)", 60).group(1))
    syncer.wait_for(r"initial eval loss", 120)
    return syncer, ["--connect", f"127.0.0.1:{port}", "--certs", CERTS]


def finish(syncer, sites, label):
    for p in sites:
        if p.wait_exit(600) != 0:
            fail(f"{label}: {p.name} exited {p.p.returncode}")
    done = syncer.wait_for(DONE_SYNCER, 300)
    if syncer.wait_exit(60) != 0:
        fail(f"{label}: the syncer exited {syncer.p.returncode}")
    return int(done.group(1)), float(done.group(2))


def elastic():
    label = "elastic"
    cfg = config(os.path.join(WORK, "elastic.toml"), STEPS, [("site-a", 0), ("site-b", 1)])
    syncer, to = start(label, cfg)
    a = Proc(f"{label}-site-a", cwd=WORK, args=[DILOCO, "site", cfg, "--site", "site-a", *to])
    b = Proc(f"{label}-site-b", cwd=WORK, args=[DILOCO, "site", cfg, "--site", "site-b", *to])
    t0 = now()

    def wait_step(step):
        begun = now()
        while not any(s >= step for _, s in step_lines(a, 0)):
            if not a.progressing(begun, 120):
                fail(f"{label}: island 0 did not reach step {step}")
            time.sleep(0.05)

    wait_step(STEPS // 5)
    joiners = {}
    for name in ("site-j", "site-k"):
        joiners[name] = (now(), Proc(f"{label}-{name}", cwd=WORK,
                                     args=[DILOCO, "site", cfg, "--site", name, "--join", "--islands", "1", *to]))
    island = {}
    for name, (_, p) in joiners.items():
        island[name] = int(p.wait_for(r"joined the run with open islands (\d+)$", 60).group(1))
    wait_step(3 * STEPS // 5)
    j_start, j = joiners["site-j"]
    k_start, k = joiners["site-k"]
    j.p.send_signal(signal.SIGTERM)
    k.p.kill()
    k_end = now()
    k.wait_exit(10)
    if j.wait_exit(120) != 0:
        fail(f"{label}: site-j exited {j.p.returncode} after SIGTERM")
    j_end = now()
    left = int(j.wait_for(rf"island {island['site-j']} leaving at step (\d+)", 5).group(1))
    rounds, loss = finish(syncer, [a, b], label)
    wall = now() - t0
    tokens = {}
    for p in (a, b, j):
        m = p.wait_for(DONE_SITE, 5)
        tokens[m.group(1)] = int(m.group(2))
    per_step = tokens["site-a"] / STEPS
    k_steps = max([s for _, s in step_lines(k, island["site-k"])] or [0])
    tokens["site-k"] = int(k_steps * per_step)

    def goodput(p, i, started, ended, useful_steps, useful_until):
        # Its chip computes from its heal (the global parameters in place) on; what reached the
        # global model is what it computed until `useful_until`.
        heals = p.matches(rf"island {i} \(incarnation \d+\) healed to global round")
        if not heals:
            fail(f"{p.name}: island {i} never healed")
        healed = heals[0][0]
        return {"island": i, "start_to_heal_s": healed - started, "steps": useful_steps,
                "useful_s": useful_until - healed, "wall_s": ended - started,
                "goodput": (useful_until - healed) / (ended - started)}

    # What of the killed joiner reached the global model: its steps up to the last step line
    # printed before the last commit that merged its island before the kill (step lines come
    # every H steps; what it trained after that line and before its next merged send is lost).
    merged_at = [t for t, m in syncer.matches(r"commit round \d+ fragment \d+: islands ([\d,]*)")
                 if t <= k_end and island["site-k"] in {int(x) for x in m.group(1).split(",") if x}]
    before = [(t, s) for t, s in step_lines(k, island["site-k"]) if merged_at and t <= max(merged_at)]
    k_until, merged_k = max(before) if before else (k_start, 0)
    j_until = j.matches(rf"island {island['site-j']} leaving at step")[0][0]
    gp = {"site-j": goodput(j, island["site-j"], j_start, j_end, left, j_until),
          "site-k": goodput(k, island["site-k"], k_start, k_end, merged_k, k_until)}
    keep_logs(label)
    return {"tokens": sum(tokens.values()), "per_site_tokens": tokens, "tokens_per_step": per_step, "wall_s": wall,
            "rounds": rounds, "final_eval_loss": loss, "joiners": gp}


def fixed(steps):
    label = "fixed"
    cfg = config(os.path.join(WORK, "fixed.toml"), steps,
                 [("site-a", 0), ("site-b", 1), ("site-c", 2), ("site-d", 3)])
    syncer, to = start(label, cfg)
    sites = [Proc(f"{label}-{n}", cwd=WORK, args=[DILOCO, "site", cfg, "--site", n, *to])
             for n in ("site-a", "site-b", "site-c", "site-d")]
    t0 = now()
    rounds, loss = finish(syncer, sites, label)
    wall = now() - t0
    tokens = sum(int(p.wait_for(DONE_SITE, 5).group(2)) for p in sites)
    keep_logs(label)
    return {"steps": steps, "tokens": tokens, "wall_s": wall, "rounds": rounds, "final_eval_loss": loss}


e = elastic()
f = fixed(max(H, round(e["tokens"] / e["tokens_per_step"] / 4)))
ratio = e["final_eval_loss"] / f["final_eval_loss"] - 1.0
print(f"\n{'run':<10} {'tokens':>10} {'wall s':>8} {'rounds':>7} {'final eval loss':>16}")
print(f"{'elastic':<10} {e['tokens']:>10} {e['wall_s']:>8.1f} {e['rounds']:>7} {e['final_eval_loss']:>16.4f}")
print(f"{'fixed':<10} {f['tokens']:>10} {f['wall_s']:>8.1f} {f['rounds']:>7} {f['final_eval_loss']:>16.4f}")
print(f"elastic vs fixed 4-island run at equal tokens: eval loss {100 * ratio:+.2f}% "
      f"(tokens {e['tokens']} vs {f['tokens']}, {100 * (e['tokens'] / f['tokens'] - 1):+.1f}%)")
for name, g in e["joiners"].items():
    print(f"{name} (island {g['island']}): healed {g['start_to_heal_s']:.2f} s after its start; its first {g['steps']} "
          f"steps ({g['useful_s']:.1f} s) reached the global model, of {g['wall_s']:.1f} s from its start to its end: "
          f"goodput from its join {100 * g['goodput']:.1f}%")
cleanup()
print(json.dumps({"elastic": e, "fixed": f, "loss_vs_fixed": ratio}))

#!/usr/bin/env python3
"""heterogeneous: islands of two speeds (1.0 and 0.55, after a TPU v6e / v5p mix; the slower chips are
emulated by delaying their replies) train Decoupled DiLoCo with K = all, K = 1 without grace and
K = 1 with the adaptive grace window (configs/goodput.toml's topology, no failures). The run
ends when the islands together trained the token budget (train.budget = "total_tokens"), so the
fast islands do more steps; they never wait for the slow ones in any of the three.

All three start from one model pretrained with ddp for --pretrain steps (not timed).
Goodput as in the goodput benchmark (chip-seconds whose gradients reached the global model /
chip-seconds provisioned), eval loss of the global parameters at the end.

  benchmarks/heterogeneous.py [--diloco build/apps/diloco] [--speeds 1.0,1.0,0.55,0.55] [--tau 2]
                              [--repeat 3] [--out DIR]
  benchmarks/heterogeneous.py --cadence [--speeds 1.0,0.55,0.3] ...

--cadence compares, at K = 1 with the adaptive grace, a sync every H steps with a sync every
train.sync_every_s seconds of each island's own time (set to H times the fastest island's step
time, measured in the same repetition's fixed-H run over the middle 60% of its round lines), so a
slow island sends after fewer steps but as fresh as a fast one.

Prints a table and, as its last line, one JSON object.
"""
import argparse
import json
import os
import tempfile
import tomllib

import diloco_runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diloco", default=diloco_runs.DEFAULT_DILOCO)
    ap.add_argument("--speeds", default=None, help="default 1.0,1.0,0.55,0.55 (--cadence: 1.0,0.55,0.3)")
    ap.add_argument("--tau", type=int, default=2, help="fragments.tau (bounds the adaptive grace window)")
    ap.add_argument("--pretrain", type=int, default=300, help="ddp steps of the shared start (0: cold start)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per variant (thread timing moves the merges, so losses vary between runs); "
                         "the targets are checked on the means")
    ap.add_argument("--out", default=None)
    ap.add_argument("--cadence", action="store_true", help="fixed H against a sync cadence in time (train.sync_every_s)")
    a = ap.parse_args()
    if a.cadence:
        return cadence(a)
    out = a.out or tempfile.mkdtemp(prefix="heterogeneous.")
    os.makedirs(out, exist_ok=True)
    speeds = [float(x) for x in (a.speeds or "1.0,1.0,0.55,0.55").split(",")]
    M = len(speeds)
    common = [f"train.islands={M}", f"islands.speed=[{', '.join(str(x) for x in speeds)}]",
              'train.budget="total_tokens"', f"fragments.tau={a.tau}"]
    variants = [("K=all", [f"quorum.min_islands={M}", 'quorum.grace="none"']),
                ("K=1, no grace", ["quorum.min_islands=1", 'quorum.grace="none"']),
                ("K=1, adaptive grace", ["quorum.min_islands=1", 'quorum.grace="adaptive"'])]
    init = None
    if a.pretrain > 0:
        init = diloco_runs.pretrain(a.diloco, "goodput.toml", a.pretrain, out, [f"train.islands={M}", "train.batch=8"])[0]
    runs = {name: [] for name, _ in variants}
    print(f"islands at speeds {speeds}, tau {a.tau}, shared start: {a.pretrain} ddp steps, {a.repeat} run(s) each")
    print(f"{'variant':22s} {'run':>3s} {'wall s':>7s} {'goodput':>8s} {'eval loss':>9s} {'commits':>8s} {'late drops':>10s}")
    # Runs interleaved (variant by variant within each repetition), so slow drifts of the machine
    # fall on all three alike.
    for k in range(a.repeat):
        for name, sets in variants:
            tag = name.replace(" ", "").replace(",", "_").replace("=", "") + f"_{k}"
            s = diloco_runs.run(a.diloco, "goodput.toml", common + sets, os.path.join(out, tag + ".jsonl"),
                                init=init)["summary"]
            runs[name].append({"wall_s": s["seconds"], "goodput": s["goodput"], "eval_loss": s["final_eval_loss"],
                               "commits": s["commits"], "dropped_stale": s["dropped_stale"],
                               "downtime_s": s["downtime_s"]})
            print(f"{name:22s} {k:3d} {s['seconds']:7.1f} {100 * s['goodput']:7.1f}% {s['final_eval_loss']:9.4f} "
                  f"{s['commits']:8d} {s['dropped_stale']:10d}", flush=True)
    res = {}
    for name, rs in runs.items():
        mean = {key: sum(r[key] for r in rs) / len(rs) for key in ("wall_s", "goodput", "eval_loss")}
        res[name] = dict(mean, runs=rs, eval_loss_min=min(r["eval_loss"] for r in rs),
                         eval_loss_max=max(r["eval_loss"] for r in rs))
        if len(rs) > 1:
            print(f"{name:22s} mean {mean['wall_s']:7.1f} {100 * mean['goodput']:7.1f}% {mean['eval_loss']:9.4f} "
                  f"(eval loss {res[name]['eval_loss_min']:.4f} to {res[name]['eval_loss_max']:.4f})")
    g, base = res["K=1, adaptive grace"], res["K=all"]
    loss_vs = g["eval_loss"] / base["eval_loss"] - 1.0
    targets = {"goodput_ge_99pct": g["goodput"] >= 0.99, "loss_within_1pct_of_K_all": loss_vs <= 0.01}
    print(f"K=1 with adaptive grace (mean of {a.repeat}): goodput {100 * g['goodput']:.1f}%, eval loss "
          f"{100 * loss_vs:+.2f}% vs K=all; " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in targets.items()))
    print(json.dumps({"benchmark": "heterogeneous", "speeds": speeds, "tau": a.tau, "repeat": a.repeat, "variants": res,
                      "loss_vs_K_all": loss_vs, "targets": targets}))


def fast_step_s(rounds):
    """The fastest island's step time over the middle 60% of a run's round lines (start-up and
    the final sync left out)."""
    end = rounds[-1]["seconds"]
    mid = [r for r in rounds if 0.2 * end <= r["seconds"] <= 0.8 * end]
    a, b = mid[0], mid[-1]
    fastest = max(range(len(b["island_steps"])), key=lambda i: b["island_steps"][i])
    return (b["seconds"] - a["seconds"]) / (b["island_steps"][fastest] - a["island_steps"][fastest])


def cadence(a):
    out = a.out or tempfile.mkdtemp(prefix="heterogeneous-cadence.")
    os.makedirs(out, exist_ok=True)
    speeds = [float(x) for x in (a.speeds or "1.0,0.55,0.3").split(",")]
    M = len(speeds)
    common = [f"train.islands={M}", f"islands.speed=[{', '.join(str(x) for x in speeds)}]",
              'train.budget="total_tokens"', f"fragments.tau={a.tau}", "quorum.min_islands=1", 'quorum.grace="adaptive"']
    with open(os.path.join(diloco_runs.ROOT, "configs", "goodput.toml"), "rb") as f:
        H = tomllib.load(f)["train"]["H"]
    init = None
    if a.pretrain > 0:
        init = diloco_runs.pretrain(a.diloco, "goodput.toml", a.pretrain, out, [f"train.islands={M}", "train.batch=8"])[0]
    print(f"islands at speeds {speeds}, K = 1 with adaptive grace, tau {a.tau}, shared start: {a.pretrain} ddp steps, "
          f"{a.repeat} run(s) each")
    print(f"{'variant':26s} {'run':>3s} {'wall s':>7s} {'goodput':>8s} {'eval loss':>9s} {'commits':>8s} {'steps per island':>22s}")
    runs = {"every H steps": [], "every H fast steps' time": []}
    for k in range(a.repeat):
        period = None
        for name in runs:
            sets = list(common)
            if period is not None:
                sets.append(f"train.sync_every_s={period:.4f}")
            tag = ("fixed" if period is None else "time") + f"_{k}"
            r = diloco_runs.run(a.diloco, "goodput.toml", sets, os.path.join(out, tag + ".jsonl"), init=init)
            s = r["summary"]
            steps = s["island_steps"]
            runs[name].append({"wall_s": s["seconds"], "goodput": s["goodput"], "eval_loss": s["final_eval_loss"],
                               "commits": s["commits"], "island_steps": steps, "sync_every_s": period})
            print(f"{name:26s} {k:3d} {s['seconds']:7.1f} {100 * s['goodput']:7.1f}% {s['final_eval_loss']:9.4f} "
                  f"{s['commits']:8d} {str(steps):>22s}" + (f"  (period {period:.3f} s)" if period else ""), flush=True)
            if period is None:
                period = H * fast_step_s(r["rounds"])  # H steps of the fastest island, in its own time
    res = {}
    for name, rs in runs.items():
        mean = {key: sum(r[key] for r in rs) / len(rs) for key in ("wall_s", "goodput", "eval_loss", "commits")}
        res[name] = dict(mean, runs=rs)
        print(f"{name:26s} mean {mean['wall_s']:7.1f} {100 * mean['goodput']:7.1f}% {mean['eval_loss']:9.4f} "
              f"{mean['commits']:8.1f}")
    fixed, timed = res["every H steps"], res["every H fast steps' time"]
    loss_vs = timed["eval_loss"] / fixed["eval_loss"] - 1.0
    print(f"sync cadence in time vs every H steps (mean of {a.repeat}): eval loss {100 * loss_vs:+.2f}%, "
          f"goodput {100 * timed['goodput']:.1f}% vs {100 * fixed['goodput']:.1f}%")
    print(json.dumps({"benchmark": "heterogeneous_cadence", "speeds": speeds, "tau": a.tau, "repeat": a.repeat,
                      "variants": res, "loss_time_vs_fixed": loss_vs}))


if __name__ == "__main__":
    main()

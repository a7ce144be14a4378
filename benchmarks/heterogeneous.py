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

Prints a table and, as its last line, one JSON object.
"""
import argparse
import json
import os
import tempfile

import diloco_runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diloco", default=diloco_runs.DEFAULT_DILOCO)
    ap.add_argument("--speeds", default="1.0,1.0,0.55,0.55")
    ap.add_argument("--tau", type=int, default=2, help="fragments.tau (bounds the adaptive grace window)")
    ap.add_argument("--pretrain", type=int, default=300, help="ddp steps of the shared start (0: cold start)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per variant (thread timing moves the merges, so losses vary between runs); "
                         "the targets are checked on the means")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="heterogeneous.")
    os.makedirs(out, exist_ok=True)
    speeds = [float(x) for x in a.speeds.split(",")]
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


if __name__ == "__main__":
    main()

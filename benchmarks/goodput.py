#!/usr/bin/env python3
"""goodput: ddp vs Decoupled DiLoCo under the same seeded failure schedule, at several failure rates
(configs/goodput.toml: four islands of two chips, no WAN, the tokens of 2000 steps per island).
Both modes run on the actor runtime with [chaos] on: chips and islands are killed with the given mean time between failures and come back
after the repair time. ddp needs every chip for every step, so it stalls while any unit is down;
decoupled islands go on without the one that is down.

Goodput = chip-seconds whose gradients reached the global model / chip-seconds provisioned (all
chips over the run's wall time); global downtime = time with >= K islands alive but no global
commit beyond chaos.downtime_gap_s (chaos.hpp). Same seed and topology give both modes the same
schedule (its hash is printed); ddp, being slower, lives through more of it. Both start from one
shared model pretrained with ddp for --pretrain steps (not timed), as in wan_speedup.

  benchmarks/goodput.py [--diloco build/apps/diloco] [--mtbf 0,60,30,15] [--repair 2] [--seed 1]
                        [--budget total_tokens|island_steps] [--out DIR]

Where ddp falls below 60% the target asks decoupled for >= 90% with no global downtime at
comparable loss (within 5% of ddp's); each such check also prints the availability bound, the
share of chip time the units are up (chip MTBF/(MTBF+repair) x island's), which no system beats in
the long run.

Writes DIR/goodput.png (gnuplot, when installed: goodput and eval loss over time, failures marked)
and prints a table and, as its last line, one JSON object.
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile

import diloco_runs


def run(diloco, mode, mtbf, repair, seed, out, init=None, budget="total_tokens"):
    tag = f"{mode}_mtbf{mtbf:g}"
    # The same tokens for both: decoupled ends when its islands together trained ddp's budget.
    sets = [f'train.mode="{mode}"', f'train.budget="{budget if mode == "decoupled" else "island_steps"}"']
    if mtbf > 0:
        sets += ["chaos.enabled=true", f"chaos.seed={seed}", f"chaos.chip_mtbf_s={mtbf}",
                 f"chaos.island_mtbf_s={4 * mtbf}", f"chaos.repair_s={repair}"]
    r = diloco_runs.run(diloco, "goodput.toml", sets, os.path.join(out, tag + ".jsonl"), actors=True, init=init)
    return dict(r, tag=tag)


def plot(results, rates, out):
    if not shutil.which("gnuplot"):
        print("gnuplot not installed (scripts/setup.sh --bench): no plot")
        return None
    files = []
    for (mode, mtbf), r in results.items():
        d = os.path.join(out, f"{r['tag']}.dat")
        with open(d, "w") as f:
            for x in r["rounds"]:
                f.write(f"{x['seconds']} {100 * x['goodput']} {x['eval_loss']}\n")
        m = os.path.join(out, f"{r['tag']}.faults")
        with open(m, "w") as f:
            for x in r["faults"]:
                f.write(f"{x['seconds']}\n")
        files.append((mode, mtbf, d, m))
    png = os.path.join(out, "goodput.png")
    colours = {"decoupled": "#1f77b4", "ddp": "#d62728"}
    dashes = {rate: i + 1 for i, rate in enumerate(rates)}
    g = [f"set terminal pngcairo size 1200,900 font ',11'", f"set output '{png}'", "set multiplot layout 2,1",
         "set key outside right", "set grid", "set xlabel 'wall-clock s'",
         "set title 'Goodput so far (chip-seconds reaching the global model / provisioned); ticks: injected faults'",
         "set ylabel 'goodput %'", "set yrange [0:105]"]
    series = []
    for mode, mtbf, d, m in files:
        label = f"{mode}, MTBF {mtbf:g} s" if mtbf > 0 else f"{mode}, no faults"
        series.append(f"'{d}' using 1:2 with lines lw 2 dt {dashes[mtbf]} lc rgb '{colours[mode]}' title '{label}'")
    hi = min((r for r in rates if r > 0), default=None)  # the highest failure rate
    for mode, mtbf, d, m in files:
        if mtbf == hi and os.path.getsize(m) > 0:
            y = 2 if mode == "ddp" else 5
            series.append(f"'{m}' using 1:({y}):(0):(6) with vectors nohead lc rgb '{colours[mode]}' "
                          f"title '{mode}: faults at MTBF {mtbf:g} s'")
    g.append("plot " + ", ".join(series))
    g += ["set title 'Eval loss of the global parameters'", "set ylabel 'nats/token'", "set autoscale y"]
    series = []
    for mode, mtbf, d, m in files:
        label = f"{mode}, MTBF {mtbf:g} s" if mtbf > 0 else f"{mode}, no faults"
        series.append(f"'{d}' using 1:3 with lines lw 2 dt {dashes[mtbf]} lc rgb '{colours[mode]}' title '{label}'")
    g.append("plot " + ", ".join(series))
    g.append("unset multiplot")
    return png if diloco_runs.gnuplot(g, os.path.join(out, "goodput.gp")) else None


def plot_runs(diloco, results, out):
    """Each run drawn by `diloco plot` (eval loss with its faults marked, goodput and live islands
    over time, bytes per link): DIR/<mode>_mtbf<m>.png beside the comparison plot."""
    pngs = []
    for (mode, mtbf), r in results.items():
        png = os.path.join(out, r["tag"] + ".png")
        p = subprocess.run([diloco, "plot", os.path.join(out, r["tag"] + ".jsonl"), "-o", png],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode == 0:
            pngs.append(png)
        else:
            print(f"diloco plot failed for {r['tag']}:\n" + p.stdout[-1000:])
    return pngs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diloco", default=diloco_runs.DEFAULT_DILOCO)
    ap.add_argument("--mtbf", default="0,60,30,15", help="per-chip MTBF values in s (island MTBF is 4x); 0: no faults")
    ap.add_argument("--repair", type=float, default=2.0, help="repair time of a killed unit, s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pretrain", type=int, default=300, help="ddp steps of the shared start (0: cold start)")
    ap.add_argument("--budget", default="total_tokens", choices=["total_tokens", "island_steps"],
                    help="decoupled's train.budget (ddp's islands step together: the same tokens either way)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="goodput.")
    os.makedirs(out, exist_ok=True)
    rates = [float(x) for x in a.mtbf.split(",")]
    # The shared start: ddp on the reference loop with 8 windows an island, as it always had.
    init = diloco_runs.pretrain(a.diloco, "goodput.toml", a.pretrain, out, ["train.batch=8"])[0] if a.pretrain > 0 else None
    results = {}
    print(f"{'mode':10s} {'chip MTBF':>9s} {'faults':>6s} {'wall s':>7s} {'goodput':>8s} {'downtime s':>10s} "
          f"{'eval loss':>9s}  schedule")
    for mtbf in rates:
        for mode in ("decoupled", "ddp"):
            r = run(a.diloco, mode, mtbf, a.repair, a.seed, out, init, a.budget)
            results[(mode, mtbf)] = r
            s = r["summary"]
            print(f"{mode:10s} {mtbf:9g} {len(r['faults']):6d} {s['seconds']:7.1f} {100 * s['goodput']:7.1f}% "
                  f"{s['downtime_s']:10.2f} {s['final_eval_loss']:9.4f}  {s['schedule_hash']}", flush=True)
    png = plot(results, rates, out)
    run_pngs = plot_runs(a.diloco, results, out)
    rows = []
    for (mode, mtbf), r in results.items():
        s = r["summary"]
        rows.append({"mode": mode, "chip_mtbf_s": mtbf, "island_mtbf_s": 4 * mtbf, "repair_s": a.repair,
                     "faults": len(r["faults"]), "wall_s": s["seconds"], "goodput": s["goodput"],
                     "downtime_s": s["downtime_s"], "eval_loss": s["final_eval_loss"],
                     "schedule_hash": s["schedule_hash"]})
    # The target: wherever ddp's goodput is below 60%, decoupled keeps >= 90% with zero global
    # downtime, at comparable final loss (within 5%).
    checks = []
    for mtbf in rates:
        d, p = results[("decoupled", mtbf)]["summary"], results[("ddp", mtbf)]["summary"]
        if p["goodput"] < 0.60:
            # The most any system could keep: the share of chip time its units are up, a chip
            # being down while it or its island is under repair.
            bound = mtbf / (mtbf + a.repair) * (4 * mtbf) / (4 * mtbf + a.repair)
            checks.append({"chip_mtbf_s": mtbf, "ddp_goodput": p["goodput"], "decoupled_goodput": d["goodput"],
                           "availability_bound": bound,
                           "decoupled_downtime_s": d["downtime_s"],
                           "loss_vs_ddp": d["final_eval_loss"] / p["final_eval_loss"] - 1.0,
                           "met": d["goodput"] >= 0.90 and d["downtime_s"] == 0.0 and
                                  d["final_eval_loss"] <= 1.05 * p["final_eval_loss"]})
    for c in checks:
        print(f"MTBF {c['chip_mtbf_s']:g} s: ddp {100 * c['ddp_goodput']:.1f}% < 60%; decoupled "
              f"{100 * c['decoupled_goodput']:.1f}% (availability bound {100 * c['availability_bound']:.1f}%), "
              f"downtime {c['decoupled_downtime_s']:.2f} s, loss "
              f"{100 * c['loss_vs_ddp']:+.1f}% vs ddp: target {'met' if c['met'] else 'NOT met'}")
    if png:
        print(f"plot: {png}")
    if run_pngs:
        print(f"each run drawn by diloco plot: {', '.join(run_pngs)}")
    print(json.dumps({"benchmark": "goodput", "repair_s": a.repair, "seed": a.seed, "budget": a.budget, "runs": rows,
                      "checks": checks,
                      "plot": png, "run_plots": run_pngs}))


if __name__ == "__main__":
    main()

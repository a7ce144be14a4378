#!/usr/bin/env python3
"""bandwidth: the link bandwidth each method needs. On the scaled scenario (configs/scaled_*.toml:
four islands in four regions, each behind its own link to the syncer), ddp, diloco, streaming and
decoupled run under `diloco run --simulate` (the actor runtime on virtual time: chips do the real
math, a step takes the model's FLOPs over islands.chip_flops, frames take their bytes over the
link's bandwidth plus its latency), so a sweep over three orders of magnitude of bandwidth costs
the compute of the runs only and gives the same figures on any machine.

The scenario is defined by R = one fp32 model exchange on a link / one inner step (80 at 3 Gbps for
the 12B model the configs derive). The benchmark first measures the simulated step (a short run
without links) and sets islands.chip_flops so that a step takes the scenario's 10 ms of virtual
time, and scales the links' latencies and jitter by the same factor as the step (10 ms here for
1.6 s of the 12B run: the regions' 10-35 ms one-way delays become 0.06-0.22 ms), since a
latency as long as several steps would bound ddp's utilisation below 15% at any bandwidth, which
the 12B run does not suffer. A bandwidth is stated as R, as Mbit/s here, and as Gbit/s for the
12B model (384 Gbit per exchange, 1.6 s per step).

For each method it finds the lowest bandwidth (the largest R) at which the run keeps
--target (95%) compute utilisation: chip time computing / chip time provisioned, in the steady
state (between 20% and 80% of the run's training time, so neither the first join, a whole model
over the link, nor the final sync's wait counts; the whole run's figure and goodput, the chip time
whose work reached the global model, are reported beside it).
Decoupled islands never wait for a link (the benchmark sets fragments.wait_steps = 0: the scaled
scenario's bounded wait for a due merge is left out here), so their utilisation holds at any
bandwidth; what a slow link costs them is staleness, seen in the loss: their threshold also keeps the eval loss of a
full run within --own-gap (1%) of their own at R = 0.01, where the link costs nothing, searched
the same way with full runs. The search runs short runs (--sweep-steps) at R = 1, then decade by decade up while
the target holds (or down until it does, to 1e-5), then halves the last decade in log space
--refine times. At each method's threshold a run of the
full budget (--steps) gives the eval loss, compared with ddp's at its own threshold, and the ratio
of ddp's bandwidth to decoupled's (target: >= 100x, at a loss within 3% of ddp's). Writes DIR/bandwidth.png
(gnuplot: utilisation and goodput against bandwidth per method).

  benchmarks/bandwidth.py [--diloco build/apps/diloco] [--steps 1000] [--sweep-steps 300]
                          [--target 0.95] [--refine 3] [--pretrain 300] [--out DIR]

Prints a table and, as its last line, one JSON object.
"""
import argparse
import json
import math
import os
import shutil
import tempfile
import tomllib

import diloco_runs
from wan_speedup import link_totals, model_bytes_of, step_time

MODES = ("ddp", "diloco", "streaming", "decoupled")
R_MIN, R_MAX = 1e-5, 1e6  # the range searched (decades)
T_STEP = 0.010            # the scenario's inner step (configs/scaled_decoupled.toml), virtual seconds
BIG_EXCHANGE_GBIT = 384.0  # one fp32 exchange of the 12B model
BIG_STEP_S = 1.6           # its inner step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diloco", default=diloco_runs.DEFAULT_DILOCO)
    ap.add_argument("--steps", type=int, default=1000, help="inner steps per island of the full runs (the loss)")
    ap.add_argument("--sweep-steps", type=int, default=300, help="inner steps per island of the sweep's runs")
    ap.add_argument("--target", type=float, default=0.95, help="steady-state compute utilisation to keep")
    ap.add_argument("--refine", type=int, default=3, help="halvings of the last decade in log space")
    ap.add_argument("--own-gap", type=float, default=0.01,
                    help="decoupled: largest eval loss above its own at R = 0.01 (what the link may cost it)")
    ap.add_argument("--pretrain", type=int, default=300, help="ddp steps of the shared start (0: cold start)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="bandwidth.")
    os.makedirs(out, exist_ok=True)
    modes = a.modes.split(",")

    init = None
    if a.pretrain > 0:
        init, pre = diloco_runs.pretrain(a.diloco, "scaled_ddp.toml", a.pretrain, out)
        print(f"shared start: ddp {a.pretrain} steps without links, eval loss {pre['final_eval_loss']:.4f}")

    # The simulated step at the default chip FLOP/s, then the FLOP/s that makes it the scenario's.
    C = 100
    cal_ckpt = os.path.join(out, "calibration.safetensors")
    base_flops = 1e10
    cal = diloco_runs.run(a.diloco, "scaled_decoupled.toml",
                          [f"train.steps={C}", f"inner.decay_steps={C}", "wan.enabled=false",
                           f"islands.chip_flops={base_flops:g}"],
                          os.path.join(out, "calibration.jsonl"), init=init, save=cal_ckpt, extra=["--simulate"])
    t0 = step_time(cal, C)
    chip_flops = base_flops * t0 / T_STEP
    model_bytes = model_bytes_of(a.diloco, cal_ckpt)
    print(f"simulated step {1e3 * t0:.2f} ms at {base_flops:g} FLOP/s: chip_flops set to {chip_flops:.4g} for a "
          f"{1e3 * T_STEP:.0f} ms step; one fp32 model exchange {model_bytes / 1e3:.0f} kB", flush=True)

    def mbps(R):
        return model_bytes * 8 / (R * T_STEP) / 1e6

    def scaled_links(mode):
        """The config's latencies and jitter, scaled as the step is (T_STEP / BIG_STEP_S)."""
        with open(os.path.join(diloco_runs.ROOT, "configs", f"scaled_{mode}.toml"), "rb") as f:
            c = tomllib.load(f)
        k = T_STEP / BIG_STEP_S
        wan = c.get("wan", {})
        sets = [f"wan.latency_ms={wan.get('latency_ms', 30.0) * k:.6g}", f"wan.jitter_ms={wan.get('jitter_ms', 0.0) * k:.6g}"]
        sites = []
        for site in c.get("sites", []):
            fields = [f'name = "{site["name"]}"', f"islands = [{', '.join(str(i) for i in site['islands'])}]"]
            if "latency_ms" in site:
                fields.append(f"latency_ms = {site['latency_ms'] * k:.6g}")
            sites.append("{" + ", ".join(fields) + "}")
        if sites:
            sets.append("sites = [" + ", ".join(sites) + "]")
        return sets

    def run(mode, R, steps, tag):
        sets = [f"train.steps={steps}", f"inner.decay_steps={max(steps - 50, 1)}", f"islands.chip_flops={chip_flops:.6g}",
                f"wan.bandwidth_mbps={mbps(R):.9g}"] + scaled_links(mode)
        if mode == "decoupled":  # islands that never wait for a merge: what a slow link costs them is staleness
            sets.append("fragments.wait_steps=0")
        full = diloco_runs.run(a.diloco, f"scaled_{mode}.toml", sets, os.path.join(out, f"{tag}.jsonl"), init=init,
                               extra=["--simulate"])
        s = full["summary"]
        prov = s["provisioned_chip_s"]
        r = {"R": R, "mbps": mbps(R), "gbps_12b": BIG_EXCHANGE_GBIT / (R * BIG_STEP_S),
             "utilisation": steady_utilisation(full["rounds"], s), "goodput": s["goodput"],
             "utilisation_whole_run": s["stepped_chip_s"] / prov if prov > 0 else 0.0,
             "eval_loss": s["final_eval_loss"], "virtual_s": s["seconds"],
             "link_bytes": link_totals(s)["bytes"]}
        r["ok"] = r["utilisation"] >= a.target
        print(f"{mode:10s} R {R:10.4g} {r['mbps']:11.4g} Mbit/s  utilisation {100 * r['utilisation']:5.1f}% "
              f"(whole run {100 * r['utilisation_whole_run']:5.1f}%)  goodput "
              f"{100 * r['goodput']:5.1f}%  eval {r['eval_loss']:.4f}  {r['virtual_s']:8.1f} s virtual"
              + ("" if r["ok"] else "  (below target)"), flush=True)
        return r

    def largest_R(ok):
        """The largest R (lowest bandwidth) at which ok(R) holds, searched by decades from R = 1 (up
        while it holds, else down until it does) and --refine halvings of the last decade in log
        space; None when it holds nowhere. Also whether a larger R failed (False: held up to R_MAX)."""
        lo = hi = None
        R = 1.0
        if ok(R):
            lo = R
            while R < R_MAX and ok(R * 10.0):
                R *= 10.0
                lo = R
            hi = R * 10.0 if R < R_MAX else None
        else:
            hi = R
            while R > R_MIN and not ok(R / 10.0):
                R /= 10.0
                hi = R
            lo = R / 10.0 if R > R_MIN else None
        if lo is not None and hi is not None:
            for _ in range(a.refine):
                mid = math.sqrt(lo * hi)
                lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo, hi is not None

    res = {}
    ddp_loss = None
    for mode in ["ddp"] + [m for m in modes if m != "ddp"]:
        points, fulls = {}, {}

        def util_ok(R):
            if R not in points:
                points[R] = run(mode, R, a.sweep_steps, f"{mode}_R{R:.4g}")
            return points[R]["ok"]

        def full(R):
            if R not in fulls:
                fulls[R] = run(mode, R, a.steps, f"{mode}_full_R{R:.4g}")
            return fulls[R]

        R_util, bounded = largest_R(util_ok)
        r = {"threshold_R_utilisation": R_util, "bounded": bounded}
        if R_util is not None:
            r["full"] = full(R_util)
            r["loss_vs_ddp"] = None
            if mode == "ddp":
                ddp_loss = r["full"]["eval_loss"]
            r["loss_vs_ddp"] = r["full"]["eval_loss"] / ddp_loss - 1.0 if ddp_loss else None
        R = R_util
        if mode == "decoupled" and R_util is not None:
            # Decoupled islands never wait for a link, so they keep computing at any bandwidth; what
            # a slow link costs them is staleness, seen in the loss. Their threshold also keeps the
            # full run's eval loss within --own-gap of their own at R = 0.01 (where the link costs
            # nothing), searched with full runs.
            free = full(0.01)["eval_loss"]
            r["loss_at_R_0.01"] = free
            R, _ = largest_R(lambda x: x <= R_util and full(x)["eval_loss"] <= (1.0 + a.own_gap) * free)
            if R is not None:
                r["full"] = full(R)
                r["loss_vs_ddp"] = r["full"]["eval_loss"] / ddp_loss - 1.0 if ddp_loss else None
        r.update(threshold_R=R, points=sorted(points.values(), key=lambda p: p["R"]),
                 full_runs=sorted(fulls.values(), key=lambda p: p["R"]))
        if R is not None:
            r["threshold_mbps"] = mbps(R)
            r["threshold_gbps_12b"] = BIG_EXCHANGE_GBIT / (R * BIG_STEP_S)
        res[mode] = r

    print(f"\nlowest bandwidth keeping {100 * a.target:.0f}% compute utilisation ({a.sweep_steps}-step runs; eval loss "
          f"from a {a.steps}-step run there; decoupled: also within {100 * a.own_gap:.0f}% of its own loss at R = 0.01):")
    print(f"{'mode':10s} {'R':>10s} {'Mbit/s here':>12s} {'Gbit/s, 12B':>12s} {'eval loss':>9s} {'vs ddp':>8s}")
    for mode, r in res.items():
        if r["threshold_R"] is None:
            print(f"{mode:10s} none: below target even at R = {R_MIN:g}")
            continue
        bound = "" if r["bounded"] else f" (utilisation met up to R = {R_MAX:g}, the largest tried)"
        vs = f"{100 * r['loss_vs_ddp']:+7.2f}%" if r.get("loss_vs_ddp") is not None else "    n/a"
        print(f"{mode:10s} {r['threshold_R']:10.4g} {r['threshold_mbps']:12.4g} {r['threshold_gbps_12b']:12.4g} "
              f"{r['full']['eval_loss']:9.4f} {vs}{bound}")
    summary = {}
    if (res.get("ddp", {}).get("threshold_R") and res.get("decoupled", {}).get("threshold_R")
            and res["decoupled"].get("loss_vs_ddp") is not None):
        ratio = res["decoupled"]["threshold_R"] / res["ddp"]["threshold_R"]
        within = res["decoupled"]["loss_vs_ddp"] <= 0.03
        summary = {"ddp_over_decoupled_bandwidth": ratio, "decoupled_loss_vs_ddp": res["decoupled"]["loss_vs_ddp"],
                   "targets": {"ratio_ge_100x": ratio >= 100.0, "loss_within_3pct_of_ddp": within}}
        print(f"ddp needs {ratio:.3g}x the bandwidth decoupled needs (target 100x: {'met' if ratio >= 100 else 'NOT met'}); "
              f"decoupled's eval loss there {100 * res['decoupled']['loss_vs_ddp']:+.2f}% vs ddp's "
              f"(target 3%: {'met' if within else 'NOT met'})")
    png = plot(res, out, a.target)
    if png:
        print(f"plot: {png}")
    print(json.dumps({"benchmark": "bandwidth", "simulated": True, "chip_flops": chip_flops, "t_step_s": T_STEP,
                      "model_bytes": model_bytes, "target": a.target, "sweep_steps": a.sweep_steps, "steps": a.steps,
                      "modes": res, **summary}))


def steady_utilisation(rounds, summary):
    """Chip time computing / chip time provisioned between 20% and 80% of the run's training time
    (its last step; the summary's trained_s): the steady state, without the first join (a whole
    model over the link) and the final sync's wait, which a long run amortises. The whole run's
    figure is reported beside it."""
    end = summary["trained_s"]
    mid = [r for r in rounds if 0.2 * end <= r["seconds"] <= 0.8 * end]
    if len(mid) < 2 or mid[-1]["provisioned_chip_s"] <= mid[0]["provisioned_chip_s"]:
        # Too few rounds in the window (a link too slow to commit often): the training part of the
        # run, the first join included.
        prov = summary["provisioned_chip_s"] * end / summary["seconds"] if summary["seconds"] > 0 else 0.0
        return summary["stepped_chip_s"] / prov if prov > 0 else 0.0
    a, b = mid[0], mid[-1]
    return (b["stepped_chip_s"] - a["stepped_chip_s"]) / (b["provisioned_chip_s"] - a["provisioned_chip_s"])


def plot(res, out, target):
    if not shutil.which("gnuplot"):
        print("gnuplot not installed (scripts/setup.sh --bench): no plot")
        return None
    colours = {"ddp": "#d62728", "diloco": "#2ca02c", "streaming": "#ff7f0e", "decoupled": "#1f77b4"}
    series_u, series_g = [], []
    for mode, r in res.items():
        d = os.path.join(out, f"{mode}.dat")
        with open(d, "w") as f:
            for p in r["points"]:
                f.write(f"{p['mbps']} {100 * p['utilisation']} {100 * p['goodput']}\n")
        c = colours.get(mode, "#000000")
        series_u.append(f"'{d}' using 1:2 with linespoints lw 2 pt 7 lc rgb '{c}' title '{mode}'")
        series_g.append(f"'{d}' using 1:3 with linespoints lw 2 pt 7 lc rgb '{c}' title '{mode}'")
    series_l = []
    for mode, r in res.items():
        if len(r.get("full_runs", [])) < 2:
            continue
        d = os.path.join(out, f"{mode}_loss.dat")
        with open(d, "w") as f:
            for p in r["full_runs"]:
                f.write(f"{p['mbps']} {p['eval_loss']}\n")
        series_l.append(f"'{d}' using 1:2 with linespoints lw 2 pt 7 lc rgb '{colours.get(mode, '#000000')}' title '{mode}'")
    ddp_full = res.get("ddp", {}).get("full")
    png = os.path.join(out, "bandwidth.png")
    panels = 3 if series_l else 2
    g = [f"set terminal pngcairo size 1200,{450 * panels} font ',11'", f"set output '{png}'",
         f"set multiplot layout {panels},1",
         "set key outside right", "set grid", "set logscale x", "set xlabel 'link bandwidth, Mbit/s (scaled scenario)'",
         "set yrange [0:105]", f"set arrow from graph 0, first {100 * target} to graph 1, first {100 * target} nohead dt 2",
         "set title 'Compute utilisation: chip time computing / provisioned'", "set ylabel '%'",
         "plot " + ", ".join(series_u),
         "set title 'Goodput: chip time whose work reached the global model / provisioned'",
         "plot " + ", ".join(series_g)]
    if series_l:
        g += ["unset arrow", "set autoscale y", "set ylabel 'nats/token'",
              f"set title 'Eval loss after the full budget{', against ddp at its threshold' if ddp_full else ''}'"]
        if ddp_full:
            series_l.append(f"{ddp_full['eval_loss']} with lines dt 2 lw 2 lc rgb '#d62728' title 'ddp at its threshold'")
        g.append("plot " + ", ".join(series_l))
    g.append("unset multiplot")
    return png if diloco_runs.gnuplot(g, os.path.join(out, "bandwidth.gp")) else None


if __name__ == "__main__":
    main()

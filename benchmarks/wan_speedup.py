#!/usr/bin/env python3
"""wan_speedup: ddp vs diloco vs streaming vs decoupled on the scaled scenario (configs/scaled_*.toml):
the same model, data, token budget and emulated WAN links (one per site), at a fixed ratio
R = transfer time of one fp32 model exchange on a link / one inner step (80: 12B params over
3 Gbps, as the configs' comments derive; 120 for 2 Gbps, 48 for 5 Gbps). Reports wall-clock, eval
loss of the global parameters, bytes on each link each way and the busiest second of each.

The scenario is defined by R, not by a bandwidth: before anything else the benchmark measures the
inner step on this machine (calibration: the decoupled config without links, two run lengths, the
difference divided by the difference in steps, so start-up and the final eval cancel) and sets
every link's bandwidth to one exchange / (R x step). The fixed grace window of decoupled (30 steps
in the config) is scaled with the step too; latencies are the regions' real ones, not scaled. The
calibration runs again at the end: when the step drifted by more than --tolerance the benchmark
prints both R and exits with status 2 (the figures of such a run do not describe the scenario).

All four start from one shared pretrained model (ddp, no WAN, not timed): at this scale a cold
start spends most of a short run leaving the unigram plateau, which says little about the
methods. diloco, streaming and decoupled run in full on the actor runtime across the links.
ddp across the links costs 1 + 2R inner steps of wall time per step (about 30 minutes for the
budget here), so it runs its first --ddp-sample steps across the links (every step is the same
exchange: its time per step is stationary) and its full budget with the identical arithmetic
in the reference loop for the loss (test ddp_mode_on_actors_matches_reference_loop: equal to
2e-6). Its wall time and bytes are the sample's per-step figures times the budget: stated as
such in the output.

  benchmarks/wan_speedup.py [--diloco build/apps/diloco] [--R 80] [--steps 2000] [--pretrain 300]
                            [--ddp-sample 25] [--repeat 3] [--tolerance 0.25] [--modes LIST]
                            [--decoupled-only] [--set KEY=VALUE ...] [--out DIR]

--modes picks the legs beside ddp (default decoupled,streaming,diloco), so that a run can be split
to stay short; --decoupled-only runs the calibration and the decoupled leg alone (bytes per token
at this R, no comparison). --set passes an override to the decoupled leg (ablations). Prints a
table and, as its last line, one JSON object.
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import diloco_runs


def run(diloco, config, sets, metrics, actors=False, init=None):
    return diloco_runs.run(diloco, config, sets, metrics, actors=actors, init=init)["summary"]


def link_totals(s):
    links = s.get("links", [])
    return {
        "bytes": sum(l["up_bytes"] + l["down_bytes"] for l in links),
        "up_bytes": sum(l["up_bytes"] for l in links),
        "down_bytes": sum(l["down_bytes"] for l in links),
        "per_link": {l["site"]: {"up_bytes": l["up_bytes"], "down_bytes": l["down_bytes"],
                                 "up_peak_mbps": l["up_peak_mbps"], "down_peak_mbps": l["down_peak_mbps"]}
                     for l in links},
        "peak_mbps": max([max(l["up_peak_mbps"], l["down_peak_mbps"]) for l in links] or [0.0]),
    }


def model_bytes_of(checkpoint):
    """Bytes of one fp32 model exchange: 4 x the model's values, as the checkpoint's metadata
    states them (safetensors: u64 header length, JSON header)."""
    with open(checkpoint, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return 4 * int(header["__metadata__"]["diloco.model_values"])


def calibrate(diloco, init, out, tag, short=50, long=250):
    """Seconds of wall time per inner step of one island on this machine: the decoupled config
    (four islands of one chip) without links, two run lengths, (t_long - t_short) / (long - short)."""
    t = {}
    for n in (short, long):
        s = run(diloco, "scaled_decoupled.toml", ["wan.enabled=false", f"train.steps={n}",
                                                 f"inner.decay_steps={max(n - 50, 1)}"],
                os.path.join(out, f"calibrate_{tag}_{n}.jsonl"), actors=True, init=init)
        t[n] = s["seconds"]
    return (t[long] - t[short]) / (long - short)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diloco", default=diloco_runs.DEFAULT_DILOCO)
    ap.add_argument("--R", type=float, default=80.0,
                    help="one fp32 model exchange on a link / one inner step (80: 3 Gbps, 120: 2 Gbps, 48: 5 Gbps)")
    ap.add_argument("--steps", type=int, default=2000, help="inner steps per island (the token budget)")
    ap.add_argument("--pretrain", type=int, default=300, help="ddp steps of the shared start")
    ap.add_argument("--ddp-sample", type=int, default=25, help="ddp steps timed across the links")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the decoupled leg (its merges depend on thread timing); the table has the means")
    ap.add_argument("--tolerance", type=float, default=0.25,
                    help="largest change of the measured inner step between start and end (fraction)")
    ap.add_argument("--modes", default="decoupled,streaming,diloco", help="legs run beside ddp")
    ap.add_argument("--decoupled-only", action="store_true", help="calibration and the decoupled leg only")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="override for the decoupled leg")
    ap.add_argument("--out", default=None, help="keep metrics files here")
    a = ap.parse_args()
    modes = ("decoupled",) if a.decoupled_only else tuple(m for m in a.modes.split(",") if m)
    if "decoupled" not in modes or any(m not in ("decoupled", "streaming", "diloco") for m in modes):
        raise SystemExit("--modes: a comma-separated list of decoupled, streaming, diloco (decoupled always)")
    if a.pretrain <= 0:
        raise SystemExit("--pretrain must be positive: the shared start also gives the model's size")
    out = a.out or tempfile.mkdtemp(prefix="wan_speedup.")
    os.makedirs(out, exist_ok=True)
    S = a.steps

    init, pre = diloco_runs.pretrain(a.diloco, "scaled_ddp.toml", a.pretrain, out)
    print(f"shared start: ddp {a.pretrain} steps without WAN, eval loss {pre['final_eval_loss']:.4f}")
    model_bytes = model_bytes_of(init)
    t0 = calibrate(a.diloco, init, out, "start")
    bw = model_bytes * 8 / (a.R * t0) / 1e6  # Mbit/s per link and direction
    grace = 30 * t0                           # the config's 0.3 s = 30 steps of 10 ms
    scenario = [f"wan.bandwidth_mbps={bw:.6g}"]
    print(f"inner step measured: {1e3 * t0:.2f} ms; R = {a.R:g} -> {bw:.3f} Mbit/s per link and direction "
          f"(one exchange {model_bytes} B = {a.R * t0:.3f} s); decoupled grace window {grace:.3f} s (30 steps)",
          flush=True)
    budget = [f"train.steps={S}", f"inner.decay_steps={max(S - 50, 1)}", *scenario]

    res = {}
    # diloco and streaming on the actors are the reference loops' arithmetic (deterministic); the
    # decoupled runtime's merges depend on thread timing, so it runs --repeat times and the table
    # has its means (every run is in the JSON).
    for mode in modes:
        runs = []
        extra = [f"quorum.grace_s={grace:.6g}", *a.sets] if mode == "decoupled" else []
        for k in range(a.repeat if mode == "decoupled" else 1):
            s = run(a.diloco, f"scaled_{mode}.toml", budget + extra, os.path.join(out, f"{mode}_{k}.jsonl"),
                    actors=True, init=init)
            lt = link_totals(s)
            runs.append({"wall_s": s["seconds"], "eval_loss": s["final_eval_loss"], "bytes": lt["bytes"],
                         "up_bytes": lt["up_bytes"], "down_bytes": lt["down_bytes"], "tokens": s["tokens"],
                         "commits": s.get("commits"), "peak_mbps": lt["peak_mbps"], "links": lt["per_link"],
                         "goodput": s.get("goodput")})
            print(f"{mode:10s} {s['seconds']:8.1f} s  eval {s['final_eval_loss']:.4f}  {lt['bytes'] / 1e6:9.2f} MB on links "
                  f"(up {lt['up_bytes'] / 1e6:.2f}, down {lt['down_bytes'] / 1e6:.2f})", flush=True)
        res[mode] = dict(runs[-1], measured="full run across the links")
        for key in ("wall_s", "eval_loss", "bytes", "up_bytes", "down_bytes", "peak_mbps"):
            res[mode][key] = sum(r[key] for r in runs) / len(runs)
        if len(runs) > 1:
            res[mode]["runs"] = runs
            res[mode]["measured"] = f"mean of {len(runs)} full runs across the links"
            print(f"{mode:10s} {res[mode]['wall_s']:8.1f} s  eval {res[mode]['eval_loss']:.4f}  "
                  f"{res[mode]['bytes'] / 1e6:9.2f} MB on links  (mean of {len(runs)}; eval loss "
                  f"{min(r['eval_loss'] for r in runs):.4f} to {max(r['eval_loss'] for r in runs):.4f})")

    if not a.decoupled_only:
        N = a.ddp_sample
        sample = run(a.diloco, "scaled_ddp.toml", [f"train.steps={N}", *scenario],
                     os.path.join(out, "ddp_sample.jsonl"), actors=True, init=init)
        ref = run(a.diloco, "scaled_ddp.toml", budget, os.path.join(out, "ddp_reference.jsonl"), init=init)
        lt = link_totals(sample)
        per_step = sample["seconds"] / N
        # Per step and link: the sample's bytes less the one-off heal (a JoinReply, one model down).
        exchange = sample["bytes"] / (2 * len(lt["per_link"]) * N + len(lt["per_link"]))
        per_link = {}
        for k, v in lt["per_link"].items():
            per_link[k] = dict(v, up_bytes=v["up_bytes"] / N * S, down_bytes=(v["down_bytes"] - exchange) / N * S)
        up = sum(v["up_bytes"] for v in per_link.values())
        down = sum(v["down_bytes"] for v in per_link.values())
        res["ddp"] = {"wall_s": per_step * S, "eval_loss": ref["final_eval_loss"], "bytes": up + down,
                      "up_bytes": up, "down_bytes": down, "tokens": ref["tokens"],
                      "peak_mbps": lt["peak_mbps"], "links": per_link,
                      "measured": f"{N} steps across the links ({per_step:.3f} s/step) x {S}; loss from the reference loop",
                      "goodput": sample.get("goodput")}
        print(f"{'ddp':10s} {per_step * S:8.1f} s  eval {ref['final_eval_loss']:.4f}  {res['ddp']['bytes'] / 1e6:9.2f} MB "
              f"on links  ({N} steps measured across the links: {per_step:.3f} s/step)")

    t1 = calibrate(a.diloco, init, out, "end")
    R_start, R_end = a.R, model_bytes * 8 / (bw * 1e6) / t1
    drift = t1 / t0 - 1.0

    d = res["decoupled"]
    print()
    print(f"{'mode':10s} {'wall s':>9s} {'vs ddp':>8s} {'eval loss':>10s} {'vs ddp':>8s} {'MB up':>8s} {'MB down':>8s} "
          f"{'B/token':>8s} {'bytes/ddp':>10s} {'peak Mbit/s':>12s}")
    for m in [x for x in ("ddp", "diloco", "streaming", "decoupled") if x in res]:
        r = res[m]
        base = res.get("ddp")
        r["bytes_per_token"] = r["bytes"] / r["tokens"]
        if base:
            r["speedup_vs_ddp"] = base["wall_s"] / r["wall_s"]
            r["loss_vs_ddp"] = r["eval_loss"] / base["eval_loss"] - 1.0
            r["bytes_fewer_than_ddp"] = base["bytes"] / r["bytes"]
        vs = (lambda k, f: f.format(r[k]) if k in r else "—")
        print(f"{m:10s} {r['wall_s']:9.1f} {vs('speedup_vs_ddp', '{:7.1f}x'):>8s} {r['eval_loss']:10.4f} "
              f"{vs('loss_vs_ddp', '{:+7.2%}'):>8s} {r['up_bytes'] / 1e6:8.2f} {r['down_bytes'] / 1e6:8.2f} "
              f"{r['bytes_per_token']:8.3f} {vs('bytes_fewer_than_ddp', '{:9.0f}x'):>10s} {r['peak_mbps']:12.2f}")
    targets = {}
    if "ddp" in res:
        runs = d.get("runs", [d])
        each = [r["eval_loss"] / res["ddp"]["eval_loss"] - 1.0 for r in runs]
        print("decoupled eval loss vs ddp, each run: " + ", ".join(f"{100 * x:+.2f}%" for x in each))
        targets = {"speedup_ge_20x": d["speedup_vs_ddp"] >= 20.0,
                   "loss_mean_within_1.5pct": d["loss_vs_ddp"] <= 0.015,
                   "loss_each_within_2pct": max(each) <= 0.02,
                   "bytes_ge_400x_fewer": d["bytes_fewer_than_ddp"] >= 400.0}
    print(f"\nR (one fp32 model exchange / inner step): {R_start:.1f} at the start ({1e3 * t0:.2f} ms step), "
          f"{R_end:.1f} at the end ({1e3 * t1:.2f} ms step, {100 * drift:+.1f}%); links {bw:.3f} Mbit/s, "
          f"{model_bytes} B per exchange")
    if targets:
        print("targets (decoupled vs ddp): " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in targets.items()))
    print(json.dumps({"benchmark": "wan_speedup", "steps": S, "pretrain": a.pretrain, "ddp_sample_steps": a.ddp_sample,
                      "R": a.R, "R_start": round(R_start, 1), "R_end": round(R_end, 1),
                      "t_step_start_s": t0, "t_step_end_s": t1, "link_mbps": bw, "model_bytes": model_bytes,
                      "decoupled_sets": a.sets, "modes": res, "targets": targets}))
    if abs(drift) > a.tolerance:
        sys.stderr.write(f"wan_speedup: the inner step drifted by {100 * drift:+.1f}% during the run "
                         f"({1e3 * t0:.2f} -> {1e3 * t1:.2f} ms; R {R_start:.1f} -> {R_end:.1f}), beyond the "
                         f"tolerance of {100 * a.tolerance:.0f}%: these figures do not hold R; run again on a quieter machine\n")
        raise SystemExit(2)


if __name__ == "__main__":
    main()

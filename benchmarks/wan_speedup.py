#!/usr/bin/env python3
"""wan_speedup: ddp vs diloco vs streaming vs decoupled on the scaled scenario (configs/scaled_*.toml):
the same model, data, token budget and emulated WAN links (one per site). The scenario is defined by
one ratio, R = time to send one fp32 model exchange on a link / time of one inner step (80 for 12B
parameters over 3 Gbps, as the configs' comments derive), not by a bandwidth: the inner step
takes what it takes on the machine at hand, so the benchmark first measures it (a short decoupled
run without links, --calibrate steps; the step as the islands time it) and sets every link's
bandwidth so that R is --R. It reports R at the start and as the decoupled runs had it at the end, and exits 2 when the step
drifted by more than --tolerance between the two (the figures would then describe another R).
Reports wall-clock, eval loss of the global parameters, bytes on each link and the busiest second
of each.

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
                            [--ddp-sample 25] [--repeat 3] [--calibrate 400] [--tolerance 0.25]
                            [--out DIR] [--modes decoupled,streaming,diloco] [--variant NAME:KEY=VAL]...

Prints a table and, as its last line, one JSON object.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import diloco_runs


def run(diloco, config, sets, metrics, actors=False, init=None):
    return diloco_runs.run(diloco, config, sets, metrics, actors=actors, init=init)["summary"]


def step_time(r, steps):
    """Wall seconds of one inner step in run `r` (`steps` inner steps per island), as the islands
    time their steps: the goodput ledger's stepped chip-seconds (each step from handing it to
    the chips to the island's AdamW step, once per chip) over the chip-steps taken (each island's
    steps times its chips). Start-up, heals, the final sync and an island's waits for a merge
    (fragments.wait_steps) are not steps; the run's seconds between rounds counted those waits as
    steps."""
    s = r["summary"]
    island_steps = s.get("island_steps", [])
    chips = s.get("island_chips") or [1] * len(island_steps)  # an older binary: one chip per island
    if len(chips) != len(island_steps):
        raise SystemExit(f"wan_speedup: the summary has {len(island_steps)} islands' steps but {len(chips)} chip counts")
    # Chips that died answer no step and count no chip-seconds: with faults this reads too short.
    taken = sum(n * c for n, c in zip(island_steps, chips))
    if not taken or not s.get("stepped_chip_s"):
        raise SystemExit(f"wan_speedup: a run of {steps} steps reported no stepped chip time to time its inner step by")
    return s["stepped_chip_s"] / taken


def model_bytes_of(diloco, checkpoint):
    """Bytes of one fp32 model exchange: the checkpoint's parameter count (`diloco inspect`) x 4."""
    p = subprocess.run([diloco, "inspect", checkpoint], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"diloco\.model_values = (\d+)", p.stdout)
    if p.returncode != 0 or not m:
        raise SystemExit(f"diloco inspect {checkpoint} gave no parameter count:\n{p.stdout[-2000:]}")
    return 4 * int(m.group(1))


def link_totals(s):
    links = s.get("links", [])
    return {
        "bytes": sum(l["up_bytes"] + l["down_bytes"] for l in links),
        "per_link": {l["site"]: {"up_bytes": l["up_bytes"], "down_bytes": l["down_bytes"],
                                 "up_peak_mbps": l["up_peak_mbps"], "down_peak_mbps": l["down_peak_mbps"]}
                     for l in links},
        "peak_mbps": max([max(l["up_peak_mbps"], l["down_peak_mbps"]) for l in links] or [0.0]),
        "bandwidth_mbps": links[0]["bandwidth_mbps"] if links else 0.0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diloco", default=diloco_runs.DEFAULT_DILOCO)
    ap.add_argument("--steps", type=int, default=2000, help="inner steps per island (the token budget)")
    ap.add_argument("--pretrain", type=int, default=300, help="ddp steps of the shared start (0: cold start)")
    ap.add_argument("--ddp-sample", type=int, default=25, help="ddp steps timed across the links")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the decoupled leg (its merges depend on thread timing); the table has the means")
    ap.add_argument("--R", type=float, default=80.0,
                    help="one fp32 model exchange on a link / one inner step: 80 for 3 Gbps, 120 for 2, 48 for 5")
    ap.add_argument("--calibrate", type=int, default=400,
                    help="inner steps of the run that measures the step (as the islands time their steps)")
    ap.add_argument("--tolerance", type=float, default=0.25,
                    help="largest relative drift of the inner step between the calibration and the decoupled runs")
    ap.add_argument("--out", default=None, help="keep metrics files here")
    ap.add_argument("--modes", default="decoupled,streaming,diloco",
                    help="the WAN modes to run besides ddp (decoupled is always run: the targets are its)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VAL",
                    help="also run decoupled with this config override (a --set: strings in TOML quotes), "
                         "--repeat times, reported as decoupled[NAME]: an ablation. The same NAME again adds "
                         "another override to it; other NAMEs are other legs")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="wan_speedup.")
    os.makedirs(out, exist_ok=True)
    S = a.steps
    budget = [f"train.steps={S}", f"inner.decay_steps={max(S - 50, 1)}"]

    init = None
    if a.pretrain > 0:
        init, pre = diloco_runs.pretrain(a.diloco, "scaled_ddp.toml", a.pretrain, out)
        print(f"shared start: ddp {a.pretrain} steps without WAN, eval loss {pre['final_eval_loss']:.4f}")

    # The inner step on this machine, as the decoupled leg will have it: the same islands and
    # chips on the same cores, without links (the step as the chips time it: waits are not steps).
    C = a.calibrate
    cal_ckpt = os.path.join(out, "calibration.safetensors")
    cal = diloco_runs.run(a.diloco, "scaled_decoupled.toml",
                          [f"train.steps={C}", f"inner.decay_steps={C}", "wan.enabled=false"],
                          os.path.join(out, "calibration.jsonl"), actors=True, init=init, save=cal_ckpt)
    t_step0 = step_time(cal, C)
    model_bytes = model_bytes_of(a.diloco, cal_ckpt)
    bw = model_bytes * 8 / (a.R * t_step0) / 1e6
    print(f"inner step {1e3 * t_step0:.1f} ms ({C} steps without links); one model exchange {model_bytes / 1e3:.0f} kB; "
          f"links set to {bw:.3f} Mbit/s per direction for R = {a.R:g}", flush=True)
    wan = [f"wan.bandwidth_mbps={bw:.6f}"]

    res = {}
    step_times = []
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in ("decoupled", "streaming", "diloco"):
            raise SystemExit(f"wan_speedup: --modes takes decoupled, streaming and diloco (got '{m}')")
    legs = [(m, f"scaled_{m}.toml", []) for m in ("decoupled", "streaming", "diloco") if m == "decoupled" or m in modes]
    variants = {}
    for v in a.variant:
        name, _, kv = v.partition(":")
        if not name or "=" not in kv:
            raise SystemExit(f"wan_speedup: --variant wants NAME:KEY=VAL (got '{v}')")
        if kv.split("=", 1)[0].strip() in ("train.steps", "inner.decay_steps"):
            raise SystemExit("wan_speedup: a --variant keeps the budget (--steps sets it for every leg)")
        variants.setdefault(name, []).append(kv)
    legs += [(f"decoupled[{name}]", "scaled_decoupled.toml", sets) for name, sets in variants.items()]
    # diloco and streaming on the actors are the reference loops' arithmetic (deterministic); the
    # decoupled runtime's merges depend on thread timing, so it runs --repeat times and the table
    # has its means (every run is in the JSON).
    for mode, config, sets in legs:
        runs = []
        decoupled = mode.startswith("decoupled")
        for k in range(a.repeat if decoupled else 1):
            full = diloco_runs.run(a.diloco, config, budget + wan + sets, os.path.join(out, f"{mode}_{k}.jsonl"),
                                   actors=True, init=init)
            s = full["summary"]
            if mode == "decoupled":  # R as the scenario's own decoupled runs had it
                step_times.append(step_time(full, S))
            lt = link_totals(s)
            up = sum(l["up_bytes"] for l in lt["per_link"].values())
            down = sum(l["down_bytes"] for l in lt["per_link"].values())
            runs.append({"wall_s": s["seconds"], "eval_loss": s["final_eval_loss"], "bytes": lt["bytes"],
                         "up_bytes": up, "down_bytes": down, "tokens": s["tokens"],
                         "peak_mbps": lt["peak_mbps"], "links": lt["per_link"], "goodput": s.get("goodput")})
            print(f"{mode:10s} {s['seconds']:8.1f} s  eval {s['final_eval_loss']:.4f}  {lt['bytes'] / 1e6:9.2f} MB on links "
                  f"({up / 1e6:.2f} up, {down / 1e6:.2f} down)", flush=True)
        res[mode] = dict(runs[-1], measured="full run across the links")
        for key in ("wall_s", "eval_loss", "bytes", "up_bytes", "down_bytes", "tokens", "peak_mbps"):
            res[mode][key] = sum(r[key] for r in runs) / len(runs)
        if len(runs) > 1:
            res[mode]["runs"] = runs
            res[mode]["measured"] = f"mean of {len(runs)} full runs across the links"
            print(f"{mode:10s} {res[mode]['wall_s']:8.1f} s  eval {res[mode]['eval_loss']:.4f}  "
                  f"{res[mode]['bytes'] / 1e6:9.2f} MB on links  (mean of {len(runs)}; eval loss "
                  f"{min(r['eval_loss'] for r in runs):.4f} to {max(r['eval_loss'] for r in runs):.4f})")

    N = a.ddp_sample
    sample = run(a.diloco, "scaled_ddp.toml", [f"train.steps={N}"] + wan, os.path.join(out, "ddp_sample.jsonl"), actors=True,
                 init=init)
    ref = run(a.diloco, "scaled_ddp.toml", budget, os.path.join(out, "ddp_reference.jsonl"), init=init)
    lt = link_totals(sample)
    per_step = sample["seconds"] / N
    # Per step and link: the sample's bytes less the one-off heal (a JoinReply, one model down);
    # a model on the wire is a little more than model_bytes (frame headers).
    wire_model = sample["bytes"] / (2 * len(lt["per_link"]) * N + len(lt["per_link"]))
    per_link = {}
    for k, v in lt["per_link"].items():
        per_link[k] = dict(v, up_bytes=v["up_bytes"] / N * S, down_bytes=(v["down_bytes"] - wire_model) / N * S)
    res["ddp"] = {"wall_s": per_step * S, "eval_loss": ref["final_eval_loss"],
                  "bytes": sum(v["up_bytes"] + v["down_bytes"] for v in per_link.values()),
                  "peak_mbps": lt["peak_mbps"], "links": per_link,
                  "measured": f"{N} steps across the links ({per_step:.3f} s/step) x {S}; loss from the reference loop",
                  "goodput": sample.get("goodput")}
    print(f"{'ddp':10s} {per_step * S:8.1f} s  eval {ref['final_eval_loss']:.4f}  {res['ddp']['bytes'] / 1e6:9.2f} MB "
          f"on links  ({N} steps measured across the links: {per_step:.3f} s/step)")

    # The scenario's ratio as the decoupled runs had it: one fp32 model exchange / their inner step,
    # measured as the calibration's was.
    t_step = sum(step_times) / len(step_times)
    R = model_bytes * 8 / (bw * 1e6) / t_step
    drift = t_step / t_step0 - 1.0

    d, base = res["decoupled"], res["ddp"]
    print()
    print(f"{'mode':22s} {'wall s':>9s} {'vs ddp':>8s} {'eval loss':>10s} {'vs ddp':>8s} {'MB links':>10s} "
          f"{'bytes/ddp':>10s} {'up B/tok':>9s} {'down B/tok':>10s} {'peak Mbit/s':>12s}")
    for m in ["ddp"] + [m for m in ("diloco", "streaming", "decoupled") if m in res] + \
            [m for m in res if m.startswith("decoupled[")]:
        r = res[m]
        r["speedup_vs_ddp"] = base["wall_s"] / r["wall_s"]
        r["loss_vs_ddp"] = r["eval_loss"] / base["eval_loss"] - 1.0
        r["bytes_fewer_than_ddp"] = base["bytes"] / r["bytes"]
        per_tok = (f"{r['up_bytes'] / r['tokens']:9.3f} {r['down_bytes'] / r['tokens']:10.3f}" if "tokens" in r
                   else f"{'':9s} {'':10s}")
        print(f"{m:22s} {r['wall_s']:9.1f} {r['speedup_vs_ddp']:7.1f}x {r['eval_loss']:10.4f} "
              f"{100 * r['loss_vs_ddp']:+7.2f}% {r['bytes'] / 1e6:10.2f} {r['bytes_fewer_than_ddp']:9.0f}x "
              f"{per_tok} {r['peak_mbps']:12.2f}")
        if "runs" in r:
            print(f"{'':22s} runs: " + ", ".join(f"{100 * (x['eval_loss'] / base['eval_loss'] - 1):+.2f}%" for x in r["runs"]))
    print(f"\nR (one fp32 model exchange / inner step): {a.R:g} at the start (t_step {1e3 * t_step0:.1f} ms), "
          f"{R:.0f} in the decoupled runs (t_step {1e3 * t_step:.1f} ms, {100 * drift:+.0f}%); "
          f"{model_bytes / 1e3:.0f} kB at {bw:.3f} Mbit/s")
    # The loss target of the scenario: the mean of the runs within 1.5% of ddp, each run within 2%
    # (the earlier target, 3% on the mean, stays beside it).
    runs = [x["eval_loss"] / base["eval_loss"] - 1.0 for x in d.get("runs", [d])]
    targets = {"speedup_ge_20x": d["speedup_vs_ddp"] >= 20.0, "loss_within_3pct": d["loss_vs_ddp"] <= 0.03,
               "loss_within_1.5pct_each_run_2pct": d["loss_vs_ddp"] <= 0.015 and max(runs) <= 0.02,
               "bytes_ge_400x_fewer": d["bytes_fewer_than_ddp"] >= 400.0}
    print("targets (decoupled vs ddp): " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in targets.items()))
    print(json.dumps({"benchmark": "wan_speedup", "steps": S, "pretrain": a.pretrain, "ddp_sample_steps": N,
                      "R_target": a.R, "R_start": a.R, "R_end": round(R, 1), "t_step_start_s": t_step0,
                      "t_step_end_s": t_step, "link_mbps": bw, "modes": res, "targets": targets}))
    if abs(drift) > a.tolerance:
        sys.stderr.write(f"wan_speedup: the inner step drifted {100 * drift:+.0f}% during the run (R {a.R:g} -> {R:.0f}), "
                         f"more than --tolerance {a.tolerance}: the machine's load changed; the figures describe another R\n")
        sys.exit(2)


if __name__ == "__main__":
    main()

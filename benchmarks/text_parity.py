#!/usr/bin/env python3
"""text_parity: ddp vs diloco vs decoupled on real text (configs/text.toml: the gpt on the Python
standard library's sources, a 4096-piece SentencePiece tokenizer; `DEV=1 scripts/prepare_text.sh
data/text-dev` writes the shards), at equal tokens, from one shared pretrained start, each at its
best setting of a small grid. The figure is the held-out loss of the final global parameters over
every token of the held-out split (build/benchmarks/heldout_loss), in nats/token and in bits/byte:
nats/token x predicted tokens / bytes the held-out tokens encode / ln 2.

The grid: every inner learning rate of --lrs for every mode, and for diloco and decoupled every
outer (lr, momentum) of --outer (Nesterov). The rule, fixed before any run: each mode is reported
at the setting with the lowest loss on the dev split (a third split, files neither trained on nor
in the held-out split; DEV=1 of prepare_text.sh); the held-out split only reports. Without a dev
split the setting is chosen on the held-out split itself, and the table says so.

All three run on the actor runtime (2 scheduler threads): ddp with a parameter server (an
all-reduce of gradients every step), diloco in synchronous rounds of H steps, decoupled with the
config's fragments, quorum and adaptive grace. The shared start is ddp on the same data (not part
of any figure); every arm then trains --steps inner steps per island from it.

  benchmarks/text_parity.py [--diloco build/apps/diloco] [--heldout build/benchmarks/heldout_loss]
                            [--data data/text-dev] [--steps 1000] [--pretrain 300] [--H 20]
                            [--lrs 4e-3,8e-3,1.6e-2] [--outer 1.0:0.0,0.7:0.9]
                            [--modes ddp,diloco,decoupled] [--ddp-loss X] [--set KEY=VALUE ...]
                            [--model-set model.KEY=VALUE ...]
                            [--out DIR] [--no-run] [--simulate]

--modes runs only some arms (e.g. diloco and decoupled at another H); the figures are then set
against --ddp-loss, ddp's held-out loss (at its dev-chosen rate) from an earlier run from the
same start. With --out, every finished run is kept in DIR/runs.json and not run again by a later
call with the same DIR and the same settings (the shared start too), so a grid can grow in steps;
--no-run prints the table of the grid's runs kept there and runs nothing.

--simulate runs the arms (not the shared start) in virtual time, `diloco run --simulate`: the islands
step in lockstep and a run gives the same figures on any machine, bit for bit.

Prints a table and, as its last line, one JSON object.
"""
import argparse
import json
import math
import os
import subprocess
import tempfile
import time

import diloco_runs

ROOT = diloco_runs.ROOT
CONFIG = "text.toml"
MODES = ("ddp", "diloco", "decoupled")


def read_meta(data):
    meta = {}
    with open(os.path.join(data, "meta.txt")) as f:
        for line in f:
            key, _, value = line.strip().partition(" ")
            meta[key] = value
    return meta


def heldout(binary, sets, checkpoint):
    cmd = [binary, os.path.join(ROOT, "configs", CONFIG), checkpoint, "--threads", "2"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def parse_outer(text):
    pairs = []
    for item in text.split(","):
        lr, _, mom = item.partition(":")
        pairs.append((float(lr), float(mom)))
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diloco", default=diloco_runs.DEFAULT_DILOCO)
    ap.add_argument("--heldout", default=os.path.join(ROOT, "build", "benchmarks", "heldout_loss"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "text-dev"),
                    help="scripts/prepare_text.sh's folder (DEV=1 for a dev split)")
    ap.add_argument("--steps", type=int, default=1000, help="inner steps per island of every arm (the token budget)")
    ap.add_argument("--pretrain", type=int, default=300, help="ddp steps of the shared start")
    ap.add_argument("--H", type=int, default=20, help="inner steps per round (diloco, decoupled)")
    ap.add_argument("--lrs", default="4e-3,8e-3,1.6e-2", help="the inner learning rates tried for every mode")
    ap.add_argument("--outer", default="1.0:0.0,0.7:0.9", help="outer (lr:momentum) pairs tried for diloco and decoupled")
    ap.add_argument("--modes", default=",".join(MODES), help="which arms to run")
    ap.add_argument("--ddp-loss", type=float, default=None, help="ddp's held-out loss when ddp is not run")
    ap.add_argument("--set", action="append", default=[], help="a config override for every arm (not the start)")
    ap.add_argument("--model-set", action="append", default=[],
                    help="a model setting (model.KEY=VALUE) for the shared start, every arm and the evaluations")
    ap.add_argument("--out", default=None, help="keep checkpoints, metrics and finished runs here")
    ap.add_argument("--no-run", action="store_true", help="only the runs of the grid kept in --out: run nothing")
    ap.add_argument("--simulate", action="store_true",
                    help="run the arms (not the shared start) in virtual time (`diloco run --simulate`): islands "
                         "step in lockstep and each run is the same on any machine, bit for bit")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="text_parity.")
    os.makedirs(out, exist_ok=True)
    data = os.path.abspath(a.data)
    meta = read_meta(data)
    eval_bytes = int(meta["eval_bytes"])
    has_dev = "dev_tokens" in meta
    S, H = a.steps, a.H
    base_sets = [f"model.vocab={int(meta['vocab'])}", f'data.path="{data}/shards/train_*.bin"',
                 "train.eval_windows=64", "train.round_eval_windows=8"] + a.model_set
    test_eval = [f'data.eval_path="{data}/shards/val_*.bin"']
    dev_eval = [f'data.eval_path="{data}/shards/dev_*.bin"'] if has_dev else test_eval
    common = base_sets + dev_eval  # the runs' own evaluations never look at the reported split
    budget = [f"train.steps={S}", f"train.H={H}", f"inner.decay_steps={max(S - 50, 1)}"]
    cache_path = os.path.join(out, "runs.json")
    cache = json.load(open(cache_path)) if os.path.exists(cache_path) else {}

    def save_cache():
        with open(cache_path + ".tmp", "w") as f:
            json.dump(cache, f, indent=1)
        os.replace(cache_path + ".tmp", cache_path)

    def evaluate(ckpt):
        test = heldout(a.heldout, base_sets + test_eval, ckpt)
        dev = heldout(a.heldout, base_sets + dev_eval, ckpt) if has_dev else test
        return test, dev

    t0 = time.time()
    pre_path = os.path.join(out, "pretrained.safetensors")
    pre_key = json.dumps({"pretrain": a.pretrain, "data": data, **({"model": a.model_set} if a.model_set else {})})
    if a.no_run and pre_key not in cache:
        raise SystemExit(f"--no-run: no shared start of {a.pretrain} steps in {cache_path}")
    if pre_key not in cache or not os.path.exists(pre_path):
        diloco_runs.run(a.diloco, CONFIG, common + ['train.mode="ddp"', f"train.steps={a.pretrain}",
                                                   f"inner.decay_steps={a.pretrain}", "inner.lr=4e-3"],
                        os.path.join(out, "pretrain.jsonl"), actors=True, save=pre_path)
        test, dev = evaluate(pre_path)
        cache = {pre_key: {"loss": test["loss"], "dev_loss": dev["loss"], "tokens": test["tokens"]}}
        save_cache()
    pre = cache[pre_key]
    print(f"shared start: ddp {a.pretrain} steps, held-out {pre['loss']:.4f} nats/token, dev {pre['dev_loss']:.4f}",
          flush=True)

    lrs = [float(x) for x in a.lrs.split(",")]
    outers = parse_outer(a.outer)
    modes = [m for m in MODES if m in a.modes.split(",")]
    if "ddp" not in modes and a.ddp_loss is None:
        raise SystemExit("without the ddp arm, pass --ddp-loss")
    runs = {m: [] for m in modes}
    for mode in modes:
        for lr in lrs:
            for olr, omom in ([(None, None)] if mode == "ddp" else outers):
                outer_sets = [] if olr is None else [f"outer.lr={olr}", f"outer.momentum={omom}"]
                sets = budget + [f'train.mode="{mode}"', f"inner.lr={lr}"] + outer_sets + a.set
                key = json.dumps({"pretrain": pre_key, "sets": sets, **({"simulate": True} if a.simulate else {})})
                tag = f"{mode}_S{S}_H{H}_lr{lr:g}" + ("" if olr is None else f"_o{olr:g}m{omom:g}")
                tag += "_sim" if a.simulate else ""
                for extra in a.model_set + a.set:
                    tag += "_" + "".join(c for c in extra if c.isalnum() or c in ".-")
                t = time.time()
                if key not in cache and a.no_run:
                    continue
                if key not in cache:
                    ckpt = os.path.join(out, tag + ".safetensors")
                    s = diloco_runs.run(a.diloco, CONFIG, common + sets, os.path.join(out, tag + ".jsonl"),
                                        actors=True, init=pre_path, save=ckpt,
                                        extra=["--simulate"] if a.simulate else [])["summary"]
                    test, dev = evaluate(ckpt)
                    cache[key] = {"lr": lr, "outer_lr": olr, "outer_momentum": omom if olr is not None else None,
                                  "loss": test["loss"], "dev_loss": dev["loss"], "tokens_predicted": test["tokens"],
                                  "wall_s": s["seconds"], "train_tokens": s.get("tokens"), "bytes": s.get("bytes"),
                                  "rounds": s.get("rounds"), "bits_per_byte": test["nats"] / eval_bytes / math.log(2)}
                    save_cache()
                r = dict(cache[key])
                runs[mode].append(r)
                outer = "" if olr is None else f"outer {olr:g}/{omom:g} "
                print(f"{mode:10s} lr {lr:<7g} {outer:16s} dev {r['dev_loss']:.4f}  held-out {r['loss']:.4f} nats/token  "
                      f"{r['bits_per_byte']:.4f} bits/byte  {time.time() - t:6.0f} s", flush=True)

    modes = [m for m in modes if runs[m]]  # --no-run: a mode without kept runs
    chosen_on = "dev" if has_dev else "held-out"
    best = {m: min(runs[m], key=lambda r: r["dev_loss"]) for m in modes}
    base = best["ddp"]["loss"] if "ddp" in best else a.ddp_loss
    print()
    print(f"held-out split: {pre['tokens']} predicted tokens, {eval_bytes} bytes; {S} inner steps per island; "
          f"diloco and decoupled: H = {H}, {S // H} rounds; settings chosen on the {chosen_on} split"
          + ("" if has_dev else " (no dev split: the reported split chose them)"))
    print(f"{'mode':10s} {'best lr':>8s} {'outer':>9s} {'dev':>8s} {'nats/token':>11s} {'bits/byte':>10s} "
          f"{'vs ddp':>8s} {'rounds x H':>11s}")
    if "ddp" not in best:
        print(f"ddp: held-out loss {base:.4f} nats/token (--ddp-loss, an earlier run)")
    for m in modes:
        r = best[m]
        r["vs_ddp"] = r["loss"] / base - 1.0
        horizon = f"every step" if m == "ddp" else f"{S // H} x {H}"
        outer = "-" if r["outer_lr"] is None else f"{r['outer_lr']:g}/{r['outer_momentum']:g}"
        print(f"{m:10s} {r['lr']:8g} {outer:>9s} {r['dev_loss']:8.4f} {r['loss']:11.4f} {r['bits_per_byte']:10.4f} "
              f"{100 * r['vs_ddp']:+7.2f}% {horizon:>11s}")
    print(f"\nall runs (dev / held-out nats/token):")
    for m in modes:
        for r in runs[m]:
            outer = "" if r["outer_lr"] is None else f"outer {r['outer_lr']:g}/{r['outer_momentum']:g}"
            print(f"{m:10s} lr {r['lr']:<7g} {outer:16s} {r['dev_loss']:.4f} / {r['loss']:.4f} ({100 * (r['loss'] / base - 1):+.2f}%)")
    targets = {f"{m}_within_3pct": best[m]["vs_ddp"] <= 0.03 for m in modes if m != "ddp"}
    print("targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in targets.items()))
    print(f"total {time.time() - t0:.0f} s")
    print(json.dumps({"benchmark": "text_parity", "steps": S, "ddp_loss": base, "H": H, "rounds": S // H,
                      "pretrain": a.pretrain, "pretrained_loss": pre["loss"], "eval_tokens": pre["tokens"],
                      "eval_bytes": eval_bytes, "chosen_on": chosen_on, "simulate": a.simulate, "sets": a.set, "model": a.model_set, "best": best, "runs": runs,
                      "targets": targets}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""text_parity: ddp vs diloco vs decoupled on real text (configs/text.toml: the gpt on the Python
standard library's sources, a 4096-piece SentencePiece tokenizer; scripts/prepare_text.sh writes
the shards), at equal tokens, from one shared pretrained start, each at the best inner learning
rate of a small grid. The figure is the held-out loss of the final global parameters over every
token of the held-out split (build/benchmarks/heldout_loss), in nats/token and in bits/byte:
nats/token x predicted tokens / bytes the held-out tokens encode / ln 2.

All three run on the actor runtime (2 scheduler threads): ddp with a parameter server (an
all-reduce of gradients every step), diloco in synchronous rounds of H steps, decoupled with the
config's fragments, quorum and adaptive grace. The shared start is ddp on the same data (not part
of any figure); every arm then trains --steps inner steps per island from it.

  benchmarks/text_parity.py [--diloco build/apps/diloco] [--heldout build/benchmarks/heldout_loss]
                            [--data data/text] [--steps 1000] [--pretrain 300] [--H 20]
                            [--lrs 2e-3,4e-3,8e-3] [--modes ddp,diloco,decoupled]
                            [--ddp-loss X] [--set KEY=VALUE ...] [--out DIR]

--modes runs only some arms (e.g. diloco and decoupled at another H); the figures are then set
against --ddp-loss, ddp's best held-out loss from an earlier run from the same start.

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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diloco", default=diloco_runs.DEFAULT_DILOCO)
    ap.add_argument("--heldout", default=os.path.join(ROOT, "build", "benchmarks", "heldout_loss"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "text"), help="scripts/prepare_text.sh's folder")
    ap.add_argument("--steps", type=int, default=1000, help="inner steps per island of every arm (the token budget)")
    ap.add_argument("--pretrain", type=int, default=300, help="ddp steps of the shared start")
    ap.add_argument("--H", type=int, default=20, help="inner steps per round (diloco, decoupled)")
    ap.add_argument("--lrs", default="2e-3,4e-3,8e-3", help="the inner learning rates tried for every mode")
    ap.add_argument("--modes", default=",".join(MODES), help="which arms to run")
    ap.add_argument("--ddp-loss", type=float, default=None, help="ddp's best held-out loss when ddp is not run")
    ap.add_argument("--set", action="append", default=[], help="a config override for every arm (not the start)")
    ap.add_argument("--out", default=None, help="keep checkpoints and metrics here")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="text_parity.")
    os.makedirs(out, exist_ok=True)
    data = os.path.abspath(a.data)
    meta = read_meta(data)
    eval_bytes = int(meta["eval_bytes"])
    S, H = a.steps, a.H
    common = [f"model.vocab={int(meta['vocab'])}", f'data.path="{data}/shards/train_*.bin"',
              f'data.eval_path="{data}/shards/val_*.bin"', "train.eval_windows=64", "train.round_eval_windows=8"]
    budget = [f"train.steps={S}", f"train.H={H}", f"inner.decay_steps={max(S - 50, 1)}"]

    t0 = time.time()
    pre_path = os.path.join(out, "pretrained.safetensors")
    diloco_runs.run(a.diloco, CONFIG, common + ['train.mode="ddp"', f"train.steps={a.pretrain}",
                                               f"inner.decay_steps={a.pretrain}", "inner.lr=4e-3"],
                    os.path.join(out, "pretrain.jsonl"), actors=True, save=pre_path)
    pre = heldout(a.heldout, common, pre_path)
    print(f"shared start: ddp {a.pretrain} steps, held-out {pre['loss']:.4f} nats/token ({time.time() - t0:.0f} s)",
          flush=True)

    lrs = [float(x) for x in a.lrs.split(",")]
    modes = [m for m in MODES if m in a.modes.split(",")]
    if "ddp" not in modes and a.ddp_loss is None:
        raise SystemExit("without the ddp arm, pass --ddp-loss")
    runs = {m: [] for m in modes}
    for mode in modes:
        for lr in lrs:
            tag = f"{mode}_lr{lr:g}"
            ckpt = os.path.join(out, tag + ".safetensors")
            t = time.time()
            s = diloco_runs.run(a.diloco, CONFIG, common + budget + [f'train.mode="{mode}"', f"inner.lr={lr}"] + a.set,
                                os.path.join(out, tag + ".jsonl"), actors=True, init=pre_path, save=ckpt)["summary"]
            h = heldout(a.heldout, common, ckpt)
            r = {"lr": lr, "loss": h["loss"], "tokens_predicted": h["tokens"], "wall_s": s["seconds"],
                 "train_tokens": s.get("tokens"), "bytes": s.get("bytes"), "rounds": s.get("rounds"),
                 "bits_per_byte": h["nats"] / eval_bytes / math.log(2)}
            runs[mode].append(r)
            print(f"{mode:10s} lr {lr:<7g} held-out {h['loss']:.4f} nats/token  {r['bits_per_byte']:.4f} bits/byte  "
                  f"{time.time() - t:6.0f} s", flush=True)

    best = {m: min(runs[m], key=lambda r: r["loss"]) for m in modes}
    base = best["ddp"]["loss"] if "ddp" in best else a.ddp_loss
    print()
    print(f"held-out split: {pre['tokens']} predicted tokens, {eval_bytes} bytes; {S} inner steps per island of "
          f"batch 8 x 64 tokens; diloco and decoupled: H = {H}, {S // H} rounds")
    print(f"{'mode':10s} {'best lr':>8s} {'nats/token':>11s} {'bits/byte':>10s} {'vs ddp':>8s} {'rounds x H':>11s}")
    if "ddp" not in best:
        print(f"ddp: best held-out loss {base:.4f} nats/token (--ddp-loss, an earlier run)")
    for m in modes:
        r = best[m]
        r["vs_ddp"] = r["loss"] / base - 1.0
        horizon = "every step" if m == "ddp" else f"{S // H} x {H}"
        print(f"{m:10s} {r['lr']:8g} {r['loss']:11.4f} {r['bits_per_byte']:10.4f} {100 * r['vs_ddp']:+7.2f}% {horizon:>11s}")
    print(f"\nall runs (held-out nats/token):")
    print(f"{'mode':10s} " + " ".join(f"{lr:>9g}" for lr in lrs))
    for m in modes:
        print(f"{m:10s} " + " ".join(f"{r['loss']:9.4f}" for r in runs[m]))
    targets = {f"{m}_within_3pct": best[m]["vs_ddp"] <= 0.03 for m in modes if m != "ddp"}
    print("targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in targets.items()))
    print(f"total {time.time() - t0:.0f} s")
    print(json.dumps({"benchmark": "text_parity", "steps": S, "ddp_loss": base, "H": H, "rounds": S // H, "pretrain": a.pretrain,
                      "pretrained_loss": pre["loss"], "eval_tokens": pre["tokens"], "eval_bytes": eval_bytes,
                      "best": best, "runs": runs, "targets": targets}))


if __name__ == "__main__":
    main()

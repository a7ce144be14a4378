"""Runs of the `diloco` app for the benchmark drivers (wan_speedup, goodput, heterogeneous): one
command line, its metrics file read back, and the shared pretrained start they all use."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DILOCO = os.path.join(ROOT, "build", "apps", "diloco")


def run(diloco, config, sets, metrics, actors=False, init=None, save=None, extra=()):
    """`diloco run configs/CONFIG` with `--set` overrides (and `extra` arguments, e.g. --simulate); returns the metrics file's lines as
    {"summary": last summary object, "rounds": [...], "faults": [...]}. Exits on failure."""
    cmd = [diloco, "run", os.path.join(ROOT, "configs", config), "--metrics", metrics]
    if actors:
        cmd.append("--actors")
    if init:
        cmd += ["--init", init]
    if save:
        cmd += ["--save", save]
    cmd += list(extra)
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:])
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode})")
    out = {"summary": None, "rounds": [], "faults": []}
    with open(metrics) as f:
        for line in f:
            o = json.loads(line)
            if o.get("summary"):
                out["summary"] = o
            elif "fault" in o:
                out["faults"].append(o)
            elif "round" in o:
                out["rounds"].append(o)
    if out["summary"] is None:
        raise SystemExit(f"no summary in {metrics}")
    return out


def pretrain(diloco, config, steps, out, sets=()):
    """The shared start: `steps` of ddp on the reference loop (no WAN, no faults), saved for
    `--init`; not part of any figure. Returns the checkpoint's path and the run's summary."""
    path = os.path.join(out, "pretrained.safetensors")
    r = run(diloco, config, ['train.mode="ddp"', 'train.budget="island_steps"', f"train.steps={steps}",
                             f"inner.decay_steps={steps}", *sets],
            os.path.join(out, "pretrain.jsonl"), save=path)
    return path, r["summary"]


def gnuplot(lines, script):
    """Writes the gnuplot commands `lines` to `script` and runs gnuplot on it; returns whether it
    drew (gnuplot missing or failing is said, never fatal)."""
    gp = shutil.which("gnuplot")
    if not gp:
        print("gnuplot not installed (scripts/setup.sh --bench): no plot")
        return False
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    p = subprocess.run([gp, script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print("gnuplot failed:\n" + p.stdout[-2000:])
        return False
    return True

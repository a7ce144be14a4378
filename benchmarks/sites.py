#!/usr/bin/env python3
"""sites: the same short run (configs/sites.toml) in one process, across processes over mutual TLS
on loopback, and across network namespaces with tbf-shaped links (scripts/netns-sites.sh; needs
root, skipped with a message otherwise). Wall-clock of each, and bytes per link measured at the
socket (the site processes' TCP_INFO: payload acknowledged / received, TLS and BASP included)
against the runtime's accounted frame bytes. Prints a table and ONE JSON object as its last line.

usage: sites.py DILOCO SOURCE_DIR [--rate 100mbit] [--steps N]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

if any(a in ("-h", "--help") for a in sys.argv[1:]):
    print(__doc__.strip())
    sys.exit(0)
if len(sys.argv) < 3 or sys.argv[1].startswith("-") or sys.argv[2].startswith("-"):
    sys.exit("sites: want DILOCO SOURCE_DIR first (build/benchmarks/sites passes them)\n\n" + __doc__.strip())
DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
args = sys.argv[3:]
for a in args:
    if a.startswith("--") and a not in ("--rate", "--steps"):
        sys.exit(f"sites: unknown option {a} (--help lists them)")
RATE = args[args.index("--rate") + 1] if "--rate" in args else "100mbit"
STEPS = args[args.index("--steps") + 1] if "--steps" in args else "300"
CONFIG = os.path.join(SRC, "configs", "sites.toml")
SITES = ["site-a", "site-b", "site-c"]
WORK = tempfile.mkdtemp(prefix="diloco-bench-sites-")
SET = ["--set", f"train.steps={STEPS}"]


def one_process():
    t = time.monotonic()
    out = subprocess.run([DILOCO, "run", CONFIG, *SET], capture_output=True, text=True, timeout=400).stdout
    wall = time.monotonic() - t
    m = re.search(r"final eval loss ([0-9.]+).* in ([0-9.]+) s .*?, ([0-9.]+) MB on the wire", out)
    if not m:
        sys.exit("one-process run printed no summary:\n" + out[-2000:])
    return {"wall_s": wall, "train_s": float(m.group(2)), "eval_loss": float(m.group(1)),
            "accounted_bytes": float(m.group(3)) * 1e6}


def across(wrap=lambda site, cmd: cmd, listen="127.0.0.1:0", connect=lambda site, port: f"127.0.0.1:{port}"):
    certs = os.path.join(WORK, "certs")
    if not os.path.exists(certs):
        subprocess.run([os.path.join(SRC, "scripts", "make-certs.sh"), certs, "syncer", *SITES], check=True,
                       stdout=subprocess.DEVNULL)
    state = tempfile.mkdtemp(dir=WORK)
    syncer_log = open(os.path.join(state, "syncer.log"), "w+")
    t = time.monotonic()
    syncer = subprocess.Popen(wrap("syncer", [DILOCO, "syncer", CONFIG, *SET, "--listen", listen, "--certs", certs,
                                              "--state", state]), stdout=syncer_log, stderr=subprocess.STDOUT)
    port = None
    while port is None and time.monotonic() - t < 30:
        syncer_log.seek(0)
        m = re.search(r"listening on \S+:(\d+)", syncer_log.read())
        port = m and m.group(1)
        time.sleep(0.05)
    if not port:
        syncer.kill()
        sys.exit("the syncer did not start")
    sites = {s: subprocess.Popen(wrap(s, [DILOCO, "site", CONFIG, *SET, "--site", s, "--connect", connect(s, port),
                                          "--certs", certs]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True) for s in SITES}
    outs = {s: p.communicate(timeout=400)[0] for s, p in sites.items()}
    syncer.wait(timeout=60)
    wall = time.monotonic() - t
    syncer_log.seek(0)
    sout = syncer_log.read()
    m = re.search(r"final eval loss ([0-9.]+).*?([0-9.]+) MB accounted syncer", sout)
    if not m:
        sys.exit("the syncer printed no summary:\n" + sout[-2000:])
    res = {"wall_s": wall, "eval_loss": float(m.group(1)), "accounted_down_bytes": float(m.group(2)) * 1e6,
           "links": {}}
    train = 0.0
    for s, out in outs.items():
        d = re.search(r"in ([0-9.]+) s, ([0-9.]+) MB accounted site -> syncer; sockets: (\d+) bytes sent, (\d+) received",
                      out)
        if not d:
            sys.exit(f"{s} printed no summary:\n" + out[-2000:])
        train = max(train, float(d.group(1)))
        res["links"][s] = {"accounted_up": float(d.group(2)) * 1e6, "socket_up": int(d.group(3)),
                           "socket_down": int(d.group(4))}
    res["train_s"] = train
    up_acc = sum(l["accounted_up"] for l in res["links"].values())
    up_sock = sum(l["socket_up"] for l in res["links"].values())
    down_sock = sum(l["socket_down"] for l in res["links"].values())
    res["accounted_bytes"] = up_acc + res["accounted_down_bytes"]
    res["socket_bytes"] = up_sock + down_sock
    res["up_ratio"] = up_sock / up_acc if up_acc else None
    res["down_ratio"] = down_sock / res["accounted_down_bytes"] if res["accounted_down_bytes"] else None
    res["bytes_ratio"] = res["socket_bytes"] / res["accounted_bytes"] if res["accounted_bytes"] else None
    return res


def netns():
    script = os.path.join(SRC, "scripts", "netns-sites.sh")
    env = dict(os.environ, DILOCO_NETNS_PREFIX="dlbs")
    up = subprocess.run([script, "up", "--rate", RATE, *SITES], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        return None, "netns leg skipped: " + (up.stderr.strip().splitlines() or ["cannot create namespaces"])[-1]
    try:
        addr = {s: subprocess.run([script, "addr", s], env=env, capture_output=True, text=True).stdout.strip()
                for s in SITES}
        r = across(wrap=lambda who, cmd: ["ip", "netns", "exec", f"dlbs-{who}", *cmd], listen="0.0.0.0:0",
                   connect=lambda s, port: f"{addr[s]}:{port}")
        r["rate"] = RATE
        return r, None
    finally:
        subprocess.run([script, "down"], env=env, capture_output=True)


try:
    single = one_process()
    loop = across()
    shaped, why = netns()
finally:
    shutil.rmtree(WORK, ignore_errors=True)

print(f"sites benchmark: configs/sites.toml, train.steps={STEPS}, 3 sites x 1 island, default model")
print(f"{'leg':<22} {'wall_s':>8} {'train_s':>8} {'eval_loss':>9} {'accounted_MB':>13} {'socket_MB':>10} {'ratio':>7}")
print(f"{'one process':<22} {single['wall_s']:8.1f} {single['train_s']:8.1f} {single['eval_loss']:9.4f} "
      f"{single['accounted_bytes'] / 1e6:13.2f} {'-':>10} {'-':>7}")
for name, r in (("processes, TLS, lo", loop), (f"netns tbf {RATE}", shaped)):
    if r:
        print(f"{name:<22} {r['wall_s']:8.1f} {r['train_s']:8.1f} {r['eval_loss']:9.4f} "
              f"{r['accounted_bytes'] / 1e6:13.2f} {r['socket_bytes'] / 1e6:10.2f} {r['bytes_ratio']:7.4f}")
if why:
    print(why)
slow = loop["train_s"] / single["train_s"]
print(f"across processes / one process (train time): {slow:.3f} (target <= 1.10: {'met' if slow <= 1.10 else 'NOT met'})")
print(f"socket / accounted bytes on loopback: {loop['bytes_ratio']:.4f} (up {loop['up_ratio']:.4f}, down "
      f"{loop['down_ratio']:.4f}; target within 5%: {'met' if abs(loop['bytes_ratio'] - 1) <= 0.05 else 'NOT met'})")
print(json.dumps({"steps": int(STEPS), "one_process": single, "loopback_tls": loop, "netns": shaped,
                  "netns_skipped": why, "slowdown": slow, "bytes_ratio": loop["bytes_ratio"]}))

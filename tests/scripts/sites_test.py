#!/usr/bin/env python3
"""A syncer and three site processes on loopback with mutual TLS (configs/sites.toml).

Proves, from the processes' output: a site killed with kill -9 and restarted heals and
contributes again while the others never stop committing; the syncer killed with kill -9 and
restarted resumes from its checkpoint on disk and the sites reconnect; the final loss is below
the start; a client without a certificate, one with another CA's certificate and one with a
valid certificate of another site are all refused.

usage: sites_test.py DILOCO SOURCE_DIR
"""
import os
import re
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Proc, cleanup, fail, mkcerts as _mkcerts, now, work_dirs  # noqa: E402

DILOCO, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
CONFIG = os.path.join(SRC, "configs", "sites.toml")
WORK = tempfile.mkdtemp(prefix="diloco-sites-")
work_dirs.append(WORK)


def mkcerts(out, *names):
    _mkcerts(SRC, out, *names)


def commits(syncer, since=0.0):
    """(time, set of islands) of every commit line printed since `since`."""
    return [(t, {int(x) for x in m.group(2).split(",") if x})
            for t, m in syncer.matches(r"commit round (\d+) fragment \d+: islands ([\d,]*)", since)]


def wait_commit_with(syncer, islands, since, timeout):
    """Waits for a commit holding one of `islands` since `since`, while the syncer makes progress."""
    start = now()
    while syncer.progressing(start, timeout):
        if any(s & islands for _, s in commits(syncer, since)):
            return
        time.sleep(0.1)
    fail(f"no commit with island {sorted(islands)} since {since:.1f} s within {timeout} s")


# ---- the run's PKI, another CA, and two forged credential directories ----
certs, other = os.path.join(WORK, "certs"), os.path.join(WORK, "other")
mkcerts(certs, "syncer", "site-a", "site-b", "site-c")
mkcerts(other, "site-a")
foreign = os.path.join(WORK, "foreign")  # trusts our CA, but site-a's certificate is another CA's
os.makedirs(foreign)
shutil.copy(os.path.join(certs, "ca.pem"), foreign)
for ext in ("pem", "key"):
    shutil.copy(os.path.join(other, f"site-a.{ext}"), os.path.join(foreign, f"site-a.{ext}"))
impostor = os.path.join(WORK, "impostor")  # site-a's valid certificate, claiming to be site-b
os.makedirs(impostor)
shutil.copy(os.path.join(certs, "ca.pem"), impostor)
for ext in ("pem", "key"):
    shutil.copy(os.path.join(certs, f"site-a.{ext}"), os.path.join(impostor, f"site-b.{ext}"))

state = os.path.join(WORK, "state")
syncer_args = [DILOCO, "syncer", CONFIG, "--certs", certs, "--state", state]
syncer = Proc("syncer", cwd=WORK, args=syncer_args + ["--listen", "127.0.0.1:0"])
port = int(syncer.wait_for(r"listening on 127\.0\.0\.1:(\d+)", 30).group(1))
addr = f"127.0.0.1:{port}"
syncer.wait_for(r"diloco site \S+ --site site-b --connect " + re.escape(addr) + " --certs", 5)
initial = float(syncer.wait_for(r"initial eval loss ([0-9.]+)", 60).group(1))

def site(name):
    return Proc(name, cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", name, "--connect", addr, "--certs", certs])

sites = {n: site(n) for n in ("site-a", "site-b", "site-c")}
for n, p in sites.items():
    p.wait_for(r"session 1 with the syncer .*mutual TLS", 60)

# ---- refused clients ----
# No certificate: the TLS handshake is refused, nothing of BASP is ever read.
ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
ctx.check_hostname = False
got = b""
try:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:
            got = s.recv(64)
    no_cert = "closed without data" if not got else None
except (ssl.SSLError, ConnectionError, OSError) as e:
    no_cert = f"refused ({e})"
if not no_cert:
    fail(f"a client without a certificate read {len(got)} bytes from the syncer")
print(f"client without a certificate: {no_cert}")
# Another CA's certificate: TLS refuses it, the site gives up after 3 attempts.
bad = Proc("foreign-ca", cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", "site-a", "--connect", addr, "--certs", foreign,
                          "--max-attempts", "3"])
if bad.wait_exit(60) != 3:
    fail(f"the client with another CA's certificate exited {bad.p.returncode}, expected 3 (could not join)")
bad.wait_for(r"could not join the syncer", 5)
print("client with another CA's certificate: " + bad.matches(r"giving up .*")[0][1].group(0)[:160])
# A valid certificate of site-a claiming site-b: TLS passes, the identity proof does not.
imp = Proc("impostor", cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", "site-b", "--connect", addr, "--certs", impostor,
                        "--max-attempts", "2"])
if imp.wait_exit(60) != 3:
    fail(f"the impostor exited {imp.p.returncode}, expected 3")
syncer.wait_for(r"refused: site 'site-b' not authenticated: certificate CN=site-a cannot speak for site 'site-b'", 5)
print("site-a's certificate claiming site-b: refused by the syncer")
if len(syncer.matches(r"site site-a authenticated")) != 1 or len(syncer.matches(r"site site-b authenticated")) != 1:
    fail("a refused client got a session")

# ---- kill -9 of a site mid-run, restart, heal ----
wait_commit_with(syncer, {1}, 0.0, 60)
wait_commit_with(syncer, {1}, now() + 0.01, 60)
os.kill(sites["site-b"].p.pid, signal.SIGKILL)
killed = now()
print(f"{killed:7.2f}s kill -9 site-b")
syncer.wait_for(r"site site-b lost", 15, killed)
# The others go on committing while site-b is down (waited for as long as the syncer makes
# progress: a sanitized build commits a few times slower than a fixed wait allows).
wait_commit_with(syncer, {0, 2}, killed, 30)
during = commits(syncer, killed)
restarted = now()
sites["site-b"] = site("site-b")
sites["site-b"].wait_for(r"session 1 with the syncer", 60)
wait_commit_with(syncer, {1}, restarted, 90)
print(f"{now():7.2f}s site-b back: its island is in commits again; {len(during)} commits while it was down")

# ---- kill -9 of the syncer, restart from its checkpoint ----
rounds = syncer.matches(r"round (\d+) eval loss")
last_round = int(rounds[-1][1].group(1)) if rounds else 0
os.kill(syncer.p.pid, signal.SIGKILL)
skilled = now()
print(f"{skilled:7.2f}s kill -9 syncer at global round {last_round}")
time.sleep(1.0)
syncer = Proc("syncer-2", cwd=WORK, args=syncer_args + ["--listen", addr])
m = syncer.wait_for(r"syncer restored \(from the last snapshot\) at global round (\d+)", 30)
restored = int(m.group(1))
if restored <= 0:
    fail("the restarted syncer did not resume from a checkpoint")
for n in ("site-a", "site-c"):
    sites[n].wait_for(r"session 2 with the syncer", 60, skilled)
sites["site-b"].wait_for(r"session 2 with the syncer", 60, skilled)
print(f"{now():7.2f}s syncer resumed from round {restored} (was {last_round}); every site reconnected")

# ---- the end: every site finishes, the syncer reports a loss below the start ----
for n, p in sites.items():
    if p.wait_exit(150) != 0:
        fail(f"{n} exited {p.p.returncode}")
# Every island told the syncer it finished: the syncer ends at once, not after train.final_sync_s.
done = syncer.wait_for(r"done: syncer, (\d+) global rounds, final eval loss ([0-9.]+)", 10)
if syncer.matches(r"final sync: not every island finished"):
    fail("the syncer waited out train.final_sync_s instead of ending when every island finished")
final = float(done.group(2))
# Each process checks its part of the run's invariants (the syncer: the commits of its second
# life, across the restart; a site: its islands) and says so in its summary.
syncer.wait_for(r"invariants: all kept", 10)
for n in ("site-a", "site-c"):
    sites[n].wait_for(r"invariants: all kept", 5)
after = commits(syncer, 0.0)
for i in range(3):
    if not any(i in s for _, s in after):
        fail(f"island {i} in no commit after the syncer's restart")
if not final < initial:
    fail(f"final eval loss {final} not below the initial {initial}")
print(f"PASS: final eval loss {final:.4f} < initial {initial:.4f}; {len(after)} commits after the syncer restart; "
      f"{now():.0f} s")
cleanup()

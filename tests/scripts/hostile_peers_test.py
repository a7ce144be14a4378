#!/usr/bin/env python3
"""Hostile peers against the syncer's and the sites' front doors (configs/sites.toml, loopback).

Proves, from the processes' output and exit codes:
- the 32-byte BASP frame that crashes CAF 0.17.6 (server handshake, no payload) kills nobody:
  not the syncer when a site of the roster sends it over mutual TLS, not an --insecure syncer
  when anyone sends it, not a site when a rogue --insecure server sends it;
- a certificate of the run's CA whose CN is not a site of the roster is refused at the door;
- 300 strangers that hang up right after their ClientHello kill nobody;
- a site refuses a server whose certificate does not name the syncer (a site's certificate,
  or a server certificate for another name) before any of its bytes reach the rogue;
- 1,000 idle connections do not lock a legitimate site out;
- a second process for a live site is refused without disturbing the first, and takes over
  once the first is gone.

- a proven site that learnt the syncer's actor id (the sender of its island's welcome) and
  writes an outer gradient of another site's island to it straight, past its relay, loses its
  connection at the syncer's door; nothing of it reaches the syncer.

usage: hostile_peers_test.py DILOCO SOURCE_DIR HOSTILE_SITE
"""
import os
import resource
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Proc, cleanup, fail, mkcerts, now, work_dirs  # noqa: E402

DILOCO, SRC, HOSTILE = (os.path.abspath(a) for a in sys.argv[1:4])
CONFIG = os.path.join(SRC, "configs", "sites.toml")
WORK = tempfile.mkdtemp(prefix="diloco-hostile-")
work_dirs.append(WORK)
CRASH = bytes.fromhex("0000000000000000000000000000000100000000000000000000000000000000")
LONG = ["--set", "train.steps=100000"]  # the run outlives the test; every process is killed at the end

certs = os.path.join(WORK, "certs")
mkcerts(SRC, certs, "syncer", "site-a", "site-b", "site-c", "mallory")
mkcerts(SRC, certs, "--server", "evil")  # a server certificate of the run's CA, for another name


def pem(name):
    return os.path.join(certs, f"{name}.pem"), os.path.join(certs, f"{name}.key")


def client_ctx(name):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(os.path.join(certs, "ca.pem"))
    ctx.check_hostname = False
    if name:
        ctx.load_cert_chain(*pem(name))
    return ctx


def send_and_drain(port, payload, ctx=None, timeout=10.0):
    """Connects (TLS with ctx), sends payload, reads until the peer closes. Returns how it ended."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            s = ctx.wrap_socket(raw, server_hostname="syncer") if ctx else raw
            s.sendall(payload)
            got = 0
            while True:
                b = s.recv(65536)
                if not b:
                    return f"closed by the door after {got} bytes"
                got += len(b)
    except (ssl.SSLError, ConnectionError, OSError) as e:
        return f"refused ({type(e).__name__}: {e})"


def syncer_proc(name, extra):
    p = Proc(name, cwd=WORK, args=[DILOCO, "syncer", CONFIG, "--certs", certs, "--state", os.path.join(WORK, name),
                                   "--listen", "127.0.0.1:0"] + LONG + extra)
    port = int(p.wait_for(r"listening on 127\.0\.0\.1:(\d+)", 60).group(1))
    return p, port


def site_proc(name, port, extra=(), label=None):
    return Proc(label or name, cwd=WORK, args=[DILOCO, "site", CONFIG, "--site", name, "--connect",
                                               f"127.0.0.1:{port}", "--certs", certs] + LONG + list(extra))


def expect_alive(p, what):
    time.sleep(0.5)
    if not p.alive():
        fail(f"{p.name} died ({p.p.returncode}) after {what}")


# ---- the syncer with mutual TLS ----
syncer, port = syncer_proc("syncer", [])

# The crash frame from a site of the roster (TLS and identity pass, the BASP check does not).
how = send_and_drain(port, CRASH, client_ctx("site-c"))
expect_alive(syncer, "the crash frame from site-c's certificate")
syncer.wait_for(r"closed a session for a bad frame: site-c .*server_handshake.*a client never sends it", 10)
print(f"crash frame over mutual TLS from site-c: {how}; the syncer lives")

# A certificate of the run's CA for a name that is not a site.
how = send_and_drain(port, CRASH, client_ctx("mallory"))
expect_alive(syncer, "mallory's connection")
syncer.wait_for(r"refused: .*certificate CN=mallory is not a site of this run", 10)
print(f"CN=mallory (not in the roster): {how}")

# No certificate at all.
how = send_and_drain(port, CRASH, client_ctx(None))
expect_alive(syncer, "a client without a certificate")
print(f"no certificate: {how}")

# Strangers that hang up in the middle of the TLS handshake: each sends its ClientHello and
# closes. The door's answer (the server's flight) goes out with write(2) from inside OpenSSL,
# onto a connection the peer already closed: SIGPIPE, whose default action ended the syncer
# after a dozen such strangers.
def hang_up_after_hello(k):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    s = ctx.wrap_socket(raw, do_handshake_on_connect=False)
    s.setblocking(False)
    try:
        s.do_handshake()  # sends the ClientHello, then would wait for the server's answer
    except (ssl.SSLWantReadError, ssl.SSLError, OSError):
        pass
    if k % 2:
        time.sleep(0.002)  # half of them hang up while the door is answering
    s.close()


for k in range(300):
    hang_up_after_hello(k)
    if not syncer.alive():
        fail(f"the syncer died ({syncer.p.returncode}) after {k + 1} strangers hung up after their ClientHello")
expect_alive(syncer, "300 strangers that hung up after their ClientHello")
print("300 strangers hung up after their ClientHello: the syncer lives")

# ---- 1,000 idle connections, then a legitimate site ----
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
flood = []
for _ in range(1000):
    try:
        flood.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    except OSError as e:
        fail(f"the flood could not open connection {len(flood) + 1}: {e}")
flooded = now()
site_a = site_proc("site-a", port)
site_a.wait_for(r"session 1 with the syncer .*mutual TLS", 30)
expect_alive(syncer, "the flood")
print(f"1000 idle connections open: site-a got in after {now() - flooded:.1f} s")
for s in flood:
    s.close()

# ---- a second process for a live site ----
twin = site_proc("site-a", port, label="site-a-twin")
syncer.wait_for(r"refused: site 'site-a' already has a live session", 30)
time.sleep(2.0)
if len(syncer.matches(r"site site-a authenticated")) != 1:
    fail("the twin displaced site-a's live session")
if twin.matches(r"session \d+ with the syncer"):
    fail("the twin got a session while site-a was alive")
if not site_a.alive():
    fail("site-a died while its twin was refused")
site_a.p.send_signal(signal.SIGKILL)
killed = now()
twin.wait_for(r"session 1 with the syncer .*mutual TLS", 30, killed)
print(f"twin of site-a: refused while site-a lived, took over {now() - killed:.1f} s after kill -9 of site-a")

# ---- a proven site writes to the syncer's actor id, past its relay ----
# site-c proves itself, joins its own island 2 through its relay, learns the syncer's id from
# the welcome and sends an outer gradient of site-a's island 0 to it: the relay would refuse it.
probe = Proc("hostile-site-c", cwd=WORK, args=[HOSTILE, CONFIG, f"127.0.0.1:{port}", "site-c", "2", "0", certs])
probed = now()
if probe.wait_exit(90) != 0:
    fail(f"the hostile site exited {probe.p.returncode}:\n{probe.text()}")
probe.wait_for(r"island 2 welcomed by actor \d+ \(the syncer\)", 1)
burst = probe.wait_for(r"(\d+) joins in a burst were answered (\d+) times", 1)
if not 1 <= int(burst.group(2)) <= 3:
    fail(f"a burst of {burst.group(1)} joins was answered {burst.group(2)} times (the relay spaces joins out: 1 to 3)")
print(f"a burst of {burst.group(1)} joins from site-c was answered {burst.group(2)} times")
probe.wait_for(r"connection closed", 1)
syncer.wait_for(r"closed a session for a bad frame: site-c .*to actor \d+, which was never handed to a peer", 10, probed)
expect_alive(syncer, "a frame to its actor id from a proven site")
if not twin.alive() or twin.matches(r"session lost", probed):
    fail("site-a lost its session when site-c wrote to the syncer's id")
print("proven site-c writing to the syncer's actor id past its relay: the door closed its connection; "
      "the syncer and site-a's session live")

# ---- rogue servers against a site ----
class Rogue:
    """A server on loopback: TLS with `cert` (or plain), optionally sending `greeting` first;
    records how many bytes the site's side managed to send it."""

    def __init__(self, cert=None, greeting=b""):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received, self.accepted = 0, 0
        self.ctx = None
        if cert:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(*pem(cert))
        self.greeting = greeting
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn):
        try:
            conn.settimeout(10)
            s = self.ctx.wrap_socket(conn, server_side=True) if self.ctx else conn
            if self.greeting:
                s.sendall(self.greeting)
            while True:
                b = s.recv(65536)
                if not b:
                    return
                self.received += len(b)
        except (ssl.SSLError, OSError):
            return


for cert, what in (("site-b", "site-b's certificate (a client certificate)"),
                   ("evil", "a server certificate for 'evil'")):
    rogue = Rogue(cert)
    victim = site_proc("site-b", rogue.port, ["--max-attempts", "2"], label=f"site-b-vs-{cert}")
    if victim.wait_exit(60) != 3:
        fail(f"site-b against a rogue with {what} exited {victim.p.returncode}, expected 3 (could not join)")
    victim.wait_for(r"refused: .*TLS handshake failed", 5)
    if rogue.accepted == 0 or rogue.received != 0:
        fail(f"rogue with {what}: {rogue.accepted} connections, {rogue.received} bytes of the site's traffic reached it")
    print(f"rogue syncer with {what}: refused by site-b's door, no byte of its traffic reached the rogue")

rogue = Rogue(None, CRASH)
victim = site_proc("site-b", rogue.port, ["--max-attempts", "2", "--insecure"], label="site-b-vs-crash")
if victim.wait_exit(60) != 3:
    fail(f"site-b against a rogue --insecure server sending the crash frame exited {victim.p.returncode}, expected 3")
victim.wait_for(r"closed a session for a bad frame", 5)
print("rogue --insecure server sending the crash frame: site-b refused it and gave up cleanly")

# ---- an --insecure syncer: no identity, but the BASP check still stands ----
open_syncer, open_port = syncer_proc("insecure-syncer", ["--insecure"])
how = send_and_drain(open_port, CRASH)
expect_alive(open_syncer, "the crash frame in clear text")
open_syncer.wait_for(r"closed a session for a bad frame", 10)
print(f"--insecure syncer, crash frame from anyone: {how}; the syncer lives")

expect_alive(syncer, "everything")
print(f"PASS: {now():.0f} s")
cleanup()

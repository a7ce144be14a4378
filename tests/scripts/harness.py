"""Child processes of a multi-process test: output lines collected with arrival times,
patterns waited for while the process makes progress, every child killed and the work directory removed on the
way out (fail() prints each child's last output first), and a run with its --http status page. Shared by the
multi-process tests."""
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

T0 = time.monotonic()
# A sanitized build (scripts/test.sh --sanitize) computes a few times slower and may print nothing
# for as long, e.g. the syncer's initial evaluation: tests/CMakeLists.txt sets this factor there and
# every wait below grows by it, as every test's TIMEOUT does.
TIME_SCALE = float(os.environ.get("DILOCO_TIME_SCALE", "1"))
procs = []
work_dirs = []


def now():
    return time.monotonic() - T0


class Proc:
    """A child process whose output lines are collected (with arrival times) by a thread."""

    def __init__(self, name, args, cwd):
        self.name, self.lines, self.lock = name, [], threading.Lock()
        env = None
        if "ASAN_OPTIONS" in os.environ and len(args) > 1 and args[1] in ("syncer", "site"):
            # The multi-process roles leave CAF's BASP broker behind when they end mid-connection
            # (tests/sanitizers/lsan.supp says why it is not suppressed there): no leak check at
            # their exit; AddressSanitizer's other checks and UBSan stay on.
            env = dict(os.environ, ASAN_OPTIONS=os.environ["ASAN_OPTIONS"] + ":detect_leaks=0")
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd, env=env)
        procs.append(self)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            with self.lock:
                self.lines.append((now(), line.rstrip("\n")))

    def matches(self, pattern, since=0.0):
        with self.lock:
            return [(t, m) for t, l in self.lines if t >= since for m in [re.search(pattern, l)] if m]

    def stamped(self, pattern, since=0.0):
        """Like matches, for the lines a process prints with its own clock ("%8.2fs  ..."): each
        match with the time the event happened, on this clock. A line can be printed late (the
        syncer prints its commits from a thread that may still be evaluating the round before),
        so the arrival time overstates when it happened. The process's clock is mapped onto this
        one by the smallest lag seen between a stamp and its line's arrival."""
        stamp = re.compile(r"^\s*([0-9]+\.[0-9]+)s  ")
        with self.lock:
            lines = [(t, float(m.group(1)), l) for t, l in self.lines for m in [stamp.match(l)] if m]
        if not lines:
            return []
        lag = min(t - s for t, s, _ in lines)
        return [(s + lag, m) for _, s, l in lines if s + lag >= since for m in [re.search(pattern, l)] if m]

    def last_output(self):
        with self.lock:
            return self.lines[-1][0] if self.lines else 0.0

    def progressing(self, start, timeout):
        """Whether a wait begun at `start` may go on: less than `timeout` seconds since the wait
        began or since the process last printed, and less than 5x `timeout` in all."""
        t, timeout = now(), timeout * TIME_SCALE
        return t - max(start, self.last_output()) < timeout and t - start < 5 * timeout

    def wait_exit(self, timeout):
        """The exit code, waiting while the process makes progress (as wait_for); fails if it stalls."""
        start = now()
        while self.progressing(start, timeout):
            if self.p.poll() is not None:
                return self.p.returncode
            time.sleep(0.05)
        fail(f"{self.name} still running, no output for {timeout} s")

    def wait_for(self, pattern, timeout, since=0.0):
        """The first match of `pattern` printed since `since`. Fails when the process exits without
        it, or prints nothing new for `timeout` seconds: a slow build (sanitizers) that keeps making
        progress is given the time it needs (up to 5x `timeout`), a stalled one is not."""
        start = now()
        while self.progressing(start, timeout):
            found = self.matches(pattern, since)
            if found:
                return found[0][1]
            if self.p.poll() is not None:
                time.sleep(0.2)  # let the reader drain
                found = self.matches(pattern, since)
                if found:
                    return found[0][1]
                fail(f"{self.name} exited ({self.p.returncode}) before printing /{pattern}/")
            time.sleep(0.05)
        fail(f"{self.name}: no /{pattern}/ and no output for {timeout} s")

    def alive(self):
        return self.p.poll() is None

    def text(self):
        with self.lock:
            return "\n".join(f"{t:7.2f} {l}" for t, l in self.lines)


def fail(why):
    print(f"FAIL: {why}")
    for p in procs:
        # A negative exit code is the signal that ended the process (-13: SIGPIPE, -11: SIGSEGV).
        code = p.p.poll()
        print(f"---- {p.name} (pid {p.p.pid}, {'running' if code is None else f'exit code {code}'}) ----\n{p.text()[-6000:]}")
    cleanup()
    sys.exit(1)


def cleanup():
    for p in procs:
        if p.p.poll() is None:
            p.p.kill()
    for d in work_dirs:
        shutil.rmtree(d, ignore_errors=True)


def mkcerts(src, out, *names):
    subprocess.run([os.path.join(src, "scripts", "make-certs.sh"), out, *names], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


_handed = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A loopback port that is free now, for a child to listen on later. Taken below the kernel's
    ephemeral range: a port the kernel handed out (bind to 0) can be handed again to any process's
    outgoing connection before the child binds it, and a replica then fails with "Address already
    in use". Ports below the range are only ever taken by a listener that names them."""
    low = _ephemeral_low()
    start = 10000 if low > 12000 else 1024
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        port = rng.randrange(start, low)
        if port in _handed:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _handed.add(port)
        return port
    raise RuntimeError(f"no free loopback port in [{start}, {low})")


def run_with_http(diloco, src, *settings):
    """`diloco run configs/decoupled.toml --http PORT --set KEY=VALUE...`, returned once its status
    page listens and training is under way (the first global round): (the run, its base URL)."""
    port = free_port()
    args = [diloco, "run", f"{src}/configs/decoupled.toml", "--http", str(port)]
    for kv in settings:
        args += ["--set", kv]
    run = Proc("run", args, src)
    run.wait_for(r"status page and metrics: http://127\.0\.0\.1:%d/" % port, 30)
    run.wait_for(r"^\s+1\s+[0-9.]+", 60)  # the first global round
    return run, f"http://127.0.0.1:{port}"


REPLICAS = ("syncer-a", "syncer-b", "syncer-c")
REPLICA_SITES = ("site-a", "site-b", "site-c")
LEADS = r"leads \(term (\d+)\), from round (\d+)"


def replicas_run(src, work, etcd, election, *extra):
    """configs/replicas.toml on loopback: certificates for its three replicas (server and client)
    and three sites in WORK/certs, free ports for the replicas, and the --set arguments every
    process of the run takes (the replicas' addresses, etcd's URL, a fresh election, `extra`).
    Returns (certs directory, the --set arguments)."""
    certs = os.path.join(work, "certs")
    mkcerts(src, certs, *[x for r in REPLICAS for x in ("--replica", r)], *REPLICA_SITES)
    syncers = ", ".join(f'{{name = "{r}", address = "127.0.0.1:{free_port()}"}}' for r in REPLICAS)
    sets = ["--set", f"syncers = [{syncers}]", "--set", f'net.etcd="{etcd}"', "--set", f'net.election="{election}"']
    for e in extra:
        sets += ["--set", e]
    return certs, sets

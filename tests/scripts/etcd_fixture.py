#!/usr/bin/env python3
"""Starts or stops a real etcd on loopback for the tests (a ctest fixture).

  etcd_fixture.py start DIR   etcd with its data in DIR/data on two free loopback ports; returns
                              once it answers, with its client URL in DIR/endpoint and its pid in
                              DIR/pid (it keeps running)
  etcd_fixture.py stop DIR    stops it and removes DIR

Tests that need it read DIR/endpoint (ctest passes the file as DILOCO_ETCD_FILE)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import free_port  # noqa: E402


def start(d):
    stop(d)
    os.makedirs(d)
    etcd = shutil.which("etcd") or "/usr/bin/etcd"
    for attempt in range(5):
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        log = open(os.path.join(d, "etcd.log"), "w")
        p = subprocess.Popen([etcd, "--name", "diloco-test", "--data-dir", os.path.join(d, "data"),
                              "--listen-client-urls", url, "--advertise-client-urls", url,
                              "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                              "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                              "--initial-cluster", f"diloco-test=http://127.0.0.1:{peer}"],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 20
        while time.time() < deadline and p.poll() is None:
            try:
                req = urllib.request.Request(url + "/v3/maintenance/status", data=b"{}", method="POST")
                json.load(urllib.request.urlopen(req, timeout=1))
                open(os.path.join(d, "pid"), "w").write(str(p.pid))
                open(os.path.join(d, "endpoint"), "w").write(url)
                print(f"etcd {p.pid} answers at {url}")
                return 0
            except OSError:
                time.sleep(0.1)
        if p.poll() is None:
            p.kill()
        shutil.rmtree(os.path.join(d, "data"), ignore_errors=True)
    print(open(os.path.join(d, "etcd.log")).read()[-2000:])
    print("etcd did not start", file=sys.stderr)
    return 1


def stop(d):
    try:
        pid = int(open(os.path.join(d, "pid")).read())
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(start(sys.argv[2]) if sys.argv[1] == "start" else stop(sys.argv[2]))

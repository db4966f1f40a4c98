"""Shared by the server and bench tests: boot the real `nibble serve` on a free port (or
attach to NIBBLE_SERVER_URL), wait for /health, stop it with SIGTERM and check it exits 0.
Standard library only."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

BIN = os.environ.get("NIBBLE_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "nibble"))


def http(method, url, body=None, headers=None, timeout=30):
    """(status, headers, bytes) without raising on 4xx/5xx."""
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def metric(base, name):
    """Sum of a Prometheus metric's samples from base/metrics."""
    _, _, body = http("GET", base + "/metrics")
    total, seen = 0.0, False
    for line in body.decode().splitlines():
        if line.startswith("#"):
            continue
        key = line.split(" ")[0]
        if key == name or key.startswith(name + "{"):
            total += float(line.split(" ")[1])
            seen = True
    return total if seen else None


class Server:
    """`with Server(["--reasoning-parser", "glm45"]) as s: s.base` (http://127.0.0.1:PORT)."""

    def __init__(self, args=(), model="synthetic:glm5-tiny"):
        self.args = list(args)
        self.model = model
        self.proc = None
        self.base = os.environ.get("NIBBLE_SERVER_URL") if not args else None

    def __enter__(self):
        if self.base:
            return self
        if not os.path.exists(BIN):
            print(f"SKIP: {BIN} not built", file=sys.stderr)
            sys.exit(77)
        cmd = [BIN, "serve", "--model", self.model, "--port", "0", "--shutdown-timeout", "5",
               "--max-total-tokens", "262144"] + self.args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"server did not start: {line!r}")
        self.base = line.strip().split("listening on ")[1]
        deadline = time.time() + 120
        while time.time() < deadline:
            st, _, _ = http("GET", self.base + "/health")
            if st == 200:
                return self
            if self.proc.poll() is not None:
                raise RuntimeError("server exited while loading")
            time.sleep(0.05)
        raise RuntimeError("server never became healthy")

    def stop(self, timeout=30):
        """SIGTERM and wait; returns the exit code."""
        if not self.proc:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc.stdout.close()
        self.proc = None
        return rc

    def __exit__(self, *exc):
        rc = self.stop()
        if exc[0] is None and rc != 0:
            raise RuntimeError(f"server exited with {rc} after SIGTERM")

"""HTTP load that hostile clients make, for the daemons' hostile suites
(tests/hostile/agent_hostile_test.py, coordinator_hostile_test.py, transport_suite.py) and their
benchmarks (bench/agent_hostile.py, bench/coordinator_hostile.py): raw requests, an Attack of
slow-trickle and idle keep-alive connections kept up from one thread, and the processes under
test (a daemon on a free port, a one-member etcd). Standard library only."""
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

ETCD = "/usr/bin/etcd"


def wait_for(what, condition, timeout_s=20.0):
    """Polls `condition` until it returns something true (returned), or fails naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


class Daemon:
    """A `headroom` daemon on a free port (its argv must hold --listen 127.0.0.1:0 or another
    address); its stderr collected by a thread; the port read from the line matching
    `port_pattern`. Stopped by PID, with SIGKILL when the test failed."""

    def __init__(self, argv, port_pattern, env=None, expect_start=True):
        self.argv = argv
        self.p = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=dict(os.environ, **(env or {})))
        self.lines = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = None
        if expect_start:
            m = wait_for("the start line", lambda: self.find(port_pattern) or self._died())
            self.port = int(m.group(1))

    def _died(self):
        if self.p.poll() is not None:
            self._reader.join(timeout=5)
            raise AssertionError("%s exited %s:\n%s" % (" ".join(self.argv), self.p.returncode,
                                                         "\n".join(self.log())))
        return None

    def _read(self):
        for line in self.p.stderr:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def log(self):
        with self._lock:
            return list(self.lines)

    def find(self, pattern):
        for line in self.log():
            m = re.search(pattern, line)
            if m:
                return m
        return None

    def stop(self, sig=signal.SIGTERM, timeout_s=10.0):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            self.p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self._reader.join(timeout=5)
        self.p.stdout.close()
        self.p.stderr.close()
        return self.p.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop(signal.SIGKILL if exc[0] else signal.SIGTERM)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Etcd:
    """One etcd member on free loopback ports, in a temporary directory; stop() kills it by PID
    and removes the directory."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="headroom-etcd-")
        client, peer = free_ports(2)
        self.url = "http://127.0.0.1:%d" % client
        peer_url = "http://127.0.0.1:%d" % peer
        self.log = open(os.path.join(self.tmp, "etcd.log"), "wb")
        self.p = subprocess.Popen(
            [ETCD, "--name", "m0", "--data-dir", os.path.join(self.tmp, "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", "m0=" + peer_url],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_for("etcd to serve", self.healthy, 30)
        except AssertionError:
            self.stop()
            raise

    def healthy(self):
        try:
            req = urllib.request.Request(self.url + "/v3/maintenance/status", data=b"{}",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=0.5) as r:
                return "header" in json.loads(r.read())
        except Exception:
            return False

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def raw(port, request, timeout_s=5.0, source=None):
    """Sends bytes, reads one response; (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s,
                                  source_address=(source, 0) if source else None) as s:
        s.sendall(request)
        return read_response(s)


def read_response(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response: %r" % data)
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body[:length]


class Attack(threading.Thread):
    """Slow-trickle and idle keep-alive connections, kept up (reopened when the agent closes
    them) until stopped. One selector thread."""

    TRICKLE = b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    IDLE = b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    def __init__(self, port, trickle, idle):
        super().__init__(daemon=True)
        self.port, self.trickle, self.idle = port, trickle, idle
        self.sel = selectors.DefaultSelector()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.open = {"trickle": 0, "idle": 0}  # connected and doing their part
        self.closed_by_agent = {"trickle": 0, "idle": 0}
        self.trickle_lifetimes_s = []

    def _connect(self, kind):
        s = socket.socket()
        s.setblocking(True)
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return
        s.setblocking(False)
        state = {"kind": kind, "sent": 0, "opened": time.monotonic(), "answered": False}
        if kind == "trickle":
            s.send(self.TRICKLE)
        else:
            s.send(self.IDLE)
        self.sel.register(s, selectors.EVENT_READ, state)
        with self.lock:
            self.open[kind] += 1

    def run(self):
        for _ in range(self.trickle):
            self._connect("trickle")
        for _ in range(self.idle):
            self._connect("idle")
        next_byte = time.monotonic() + 1.0
        while not self.stopping.is_set():
            for key, _ in self.sel.select(timeout=0.1):
                s, state = key.fileobj, key.data
                try:
                    data = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data and state["kind"] == "idle":
                    state["answered"] = True  # the one answer; now it idles
                    continue
                # Closed by the agent (a deadline, or evicted): open another, as an attacker.
                self.sel.unregister(s)
                s.close()
                kind = state["kind"]
                with self.lock:
                    self.open[kind] -= 1
                    self.closed_by_agent[kind] += 1
                    if kind == "trickle":
                        self.trickle_lifetimes_s.append(time.monotonic() - state["opened"])
                if not self.stopping.is_set():
                    self._connect(kind)
            if time.monotonic() >= next_byte:  # each trickling client: one more header byte
                next_byte += 1.0
                for key in list(self.sel.get_map().values()):
                    if key.data["kind"] == "trickle":
                        try:
                            key.fileobj.send(b"x")
                        except OSError:
                            pass
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()

    def counts(self):
        with self.lock:
            return dict(self.open)


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q * len(v) + 0.5)) - 1))]

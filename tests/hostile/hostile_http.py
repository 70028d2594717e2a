"""HTTP load that hostile clients make, for the agent's hostile suite
(tests/hostile/agent_hostile_test.py) and its benchmark (bench/agent_hostile.py): raw requests,
and an Attack of slow-trickle and idle keep-alive connections kept up from one thread.
Standard library only."""
import selectors
import socket
import threading
import time


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

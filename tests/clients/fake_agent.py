"""Fakes of the headroom agent for the client's tests, on 127.0.0.1 (a free port), in a thread.
Standard library only.

StepAgent: the agent's actuation API with the semantics the client relies on --
  GET  /v1/actuation                       the current decision;
  GET  /v1/actuation?after=S&timeout_s=T   a long-poll: answered once the current decision's
                                           seq > S, or after T seconds (the current one);
  GET  /v1/actuation?step=K                the decision for step K, fixed (group size, hold)
                                           at the first read of K and the same for every
                                           reader after ("step": K); 400 when `legacy`
                                           (an older agent without ?step);
  GET  /v1/status                          `status` (a dict; None: 503);
  POST /v1/report                          recorded with its arrival time (time.monotonic()).
decide(**fields) publishes a new decision (seq + 1) and wakes the long-polls; hold_next_step()
sets the hold the next step first read will fix. Thread-safe (one condition).

HangingAgent: accepts connections and never answers (nor closes them until stop()).
"""

import http.server
import json
import socket
import threading
import time
import urllib.parse


class _Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # many client threads connect at once (the default is 5)
    daemon_threads = True


def decision(seq=1, concurrency=4, group_size=8, **extra):
    """An answer of GET /v1/actuation."""
    return dict(dict(concurrency=concurrency, group_size=group_size, seq=seq, valid_for_s=5.0,
                     reason="test"), **extra)


class StepAgent:
    def __init__(self, concurrency=4, group_size=8, legacy=False, status=None):
        self.cond = threading.Condition()
        # Guarded by cond.
        self.current = decision(1, concurrency, group_size)
        self.by_step = {}        # step -> the answer fixed at its first read
        self.next_hold = None    # (hold_s, hold_id) for the next step first read
        self.legacy = legacy
        self.status = status if status is not None else {"max_hold_s": 600.0}
        self.reports = []        # (body, time.monotonic())
        self.paths = []          # every request's path, in order
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                with agent.cond:
                    agent.paths.append(self.path)
                if url.path == "/v1/status":
                    with agent.cond:
                        st = agent.status
                    return self._answer(503, {"error": "down"}) if st is None \
                        else self._answer(200, st)
                if url.path != "/v1/actuation":
                    return self._answer(404, {"error": "no such path"})
                if "step" in query:
                    if agent.legacy:
                        return self._answer(400, {"error": "unknown query parameter step"})
                    return self._answer(200, agent._for_step(int(query["step"])))
                if "after" in query:
                    return self._answer(200, agent._after(int(query["after"]),
                                                          float(query.get("timeout_s", 10))))
                with agent.cond:
                    a = dict(agent.current)
                self._answer(200, a)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n).decode())
                with agent.cond:
                    agent.paths.append(self.path)
                    agent.reports.append((body, time.monotonic()))
                    agent.cond.notify_all()
                self._answer(200, {"ok": True})

            def _answer(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def _for_step(self, step):
        with self.cond:
            if step not in self.by_step:
                a = dict(self.current, step=step)
                if self.next_hold is not None:
                    a["hold_s"], a["hold_id"] = self.next_hold
                    self.next_hold = None
                self.by_step[step] = a
            return dict(self.by_step[step])

    def _after(self, seq, timeout_s):
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.current["seq"] <= seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return dict(self.current)

    def decide(self, **fields):
        """A new decision: the current one with `fields`, seq + 1. Returns it."""
        with self.cond:
            self.current = dict(self.current, seq=self.current["seq"] + 1, **fields)
            self.cond.notify_all()
            return dict(self.current)

    def hold_next_step(self, hold_s, hold_id):
        with self.cond:
            self.next_hold = (hold_s, hold_id)

    def wait_reports(self, n, timeout_s=10.0):
        """The reports once there are at least n (a copy), or raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while len(self.reports) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("%d reports of %d" % (len(self.reports), n))
                self.cond.wait(left)
            return list(self.reports)

    def stop(self):
        with self.cond:  # wake any long-poll, so shutdown does not wait for it
            self.current = dict(self.current, seq=self.current["seq"] + 1)
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()


class HangingAgent:
    """Accepts every connection and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.conns = []
        self.lock = threading.Lock()
        self.accepted = threading.Event()  # at least one connection
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(c)
            self.accepted.set()

    def stop(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self.lock:
            for c in self.conns:
                c.close()

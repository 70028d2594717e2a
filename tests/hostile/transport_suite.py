"""The transport's part of the hostile suite, the same on both daemons (src/net: one event loop,
deadlines, connection caps, strict framing, the Host/token/content-type policy, --listen).
agent_hostile_test.py and coordinator_hostile_test.py run it, each on its own daemon, beside
their own tests. Standard library only; waits are on conditions with deadlines, the only timed
pauses the load itself (a trickling client sends a header byte a second).

A subclass, also a unittest.TestCase, gives:
  argv(*args)        the daemon's command line with `args` (and --listen 127.0.0.1:0 unless
                     `args` has a --listen);
  daemon(*args, env) the daemon started and ready to take writes (a Daemon, a context manager);
  NAME               the daemon's name in its messages ("agent", "coordinator");
  READ               a read route answered 200 with JSON; WRITE, WRITE_BODY, WRITE_OK: a write
                     route, a good body for it, and the status it is taken with; MAX_BODY: the
                     body cap (413 beyond).
The daemon is started with the token TOKEN (HEADROOM_TOKEN) where a test needs one.
"""
import json
import os
import re
import socket
import subprocess
import time

from hostile_http import Attack, percentile, raw, read_response, wait_for

TOKEN = b"s3cret"
TOKEN_ENV = {"HEADROOM_TOKEN": TOKEN.decode()}
AUTH = b"Authorization: Bearer " + TOKEN + b"\r\n"


def get(port, path, headers=b"", host=b"127.0.0.1", method=b"GET"):
    return raw(port, method + b" " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + headers +
               b"Connection: close\r\n\r\n")


def post(port, path, body, content_type=b"application/json", headers=b""):
    return raw(port, b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " +
               content_type + b"\r\n" + headers + b"Content-Length: " + str(len(body)).encode() +
               b"\r\nConnection: close\r\n\r\n" + body)


def closed_after_answer(port, request):
    """Sends a request; (status, body, whether the daemon then closed the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        status, _, body = read_response(s)
        try:
            closed = s.recv(1) == b""
        except ConnectionResetError:
            closed = True
        return status, body, closed


class TransportSuite:
    NAME = READ = WRITE = WRITE_BODY = None
    WRITE_OK = 200
    MAX_BODY = 64 * 1024

    def run_to_end(self, *args, env=None):
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, **(env or {})))

    def test_slow_and_idle_clients_do_not_starve_a_new_client(self):
        # Issue 12 (the agent) and issue 32 (the coordinator): a new client of a read route is
        # served under 64 trickling + 300 idle connections. The speed target (p99 <= 100 ms) is
        # the benchmark's (make bench-hostile, bench/coordinator_hostile.py: docs/PERFORMANCE.md),
        # measured on a quiet machine; here, beside make test's other stages on two cores, what
        # is checked is that no one starves: every request answered, p99 under a second (a
        # starved client waited out the 5 s header deadline of the slow ones: 4-15 s before).
        with self.daemon() as d:
            attack = Attack(d.port, trickle=64, idle=300)
            attack.start()
            try:
                wait_for("64 trickling and 300 idle connections",
                         lambda: attack.counts() == {"trickle": 64, "idle": 300}, 60)
                latencies_ms = []
                for _ in range(200):
                    t0 = time.monotonic()
                    status, _, body = raw(d.port, b"GET " + self.READ + b" HTTP/1.1\r\n"
                                          b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    latencies_ms.append(1000.0 * (time.monotonic() - t0))
                    self.assertEqual(status, 200, body)
                    json.loads(body)
                    time.sleep(0.025)  # pacing of the load, not synchronisation
                p99 = percentile(latencies_ms, 0.99)
                print("%s: a new client's GET %s under 64 trickling + 300 idle: p50 %.2f ms, "
                      "p99 %.2f ms, max %.2f ms" % (self.NAME, self.READ.decode(),
                                                   percentile(latencies_ms, 0.5), p99,
                                                   max(latencies_ms)))
                self.assertLessEqual(p99, 1000.0)
                # The header deadline (5 s from the first byte) closed the trickling ones.
                wait_for("a trickling client closed by the header deadline",
                         lambda: attack.trickle_lifetimes_s, 15)
                for life_s in attack.trickle_lifetimes_s:
                    self.assertGreater(life_s, 4.0)
                    self.assertLess(life_s, 9.0)
            finally:
                attack.stopping.set()
                attack.join()
            self.assertEqual(get(d.port, self.READ)[0], 200)

    def test_connection_caps_close_the_idle_first_then_refuse(self):
        # 16 per address; the daemon's own view is read from another loopback address
        # (127.0.0.2), which has a cap of its own.
        with self.daemon("--max-connections", "64", "--max-connections-per-address", "16") as d:
            def connections():
                return json.loads(raw(d.port, b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1"
                                      b"\r\nConnection: close\r\n\r\n",
                                      source="127.0.0.2")[2])["connections"]
            idle = []
            for _ in range(16):
                s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
                s.sendall(b"GET " + self.READ + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                self.assertEqual(read_response(s)[0], 200)
                idle.append(s)
            # At the cap: the one idle the longest is closed to make room for a new client.
            self.assertEqual(get(d.port, self.READ)[0], 200)
            idle[0].settimeout(5)
            self.assertEqual(idle[0].recv(1), b"")  # closed by the daemon
            self.assertGreaterEqual(connections()["evicted"], 1)
            for s in idle:
                s.close()
            wait_for("the idle ones gone", lambda: connections()["open"] == 1)
            # 16 clients mid-header are not idle: the 17th is refused with 503, at once.
            busy = []
            for _ in range(16):
                s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
                s.sendall(b"GET " + self.READ + b" HTTP/1.1\r\nX-Slow: ")
                busy.append(s)
            wait_for("16 busy connections",
                     lambda: (lambda c: c["open"] == 17 and c["idle"] == 0)(connections()))
            status, headers, body = raw(d.port, b"GET " + self.READ +
                                        b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.assertEqual(status, 503, body)
            self.assertIn(b"too many connections", body)
            self.assertEqual(headers["retry-after"], "1")
            self.assertGreaterEqual(connections()["refused"], 1)
            self.assertEqual(connections()["open"], 17)
            for s in busy:
                s.close()
            wait_for("room again", lambda: self._status_or_none(d.port) == 200)

    def _status_or_none(self, port):
        try:
            return get(port, self.READ)[0]
        except OSError:
            return None

    def test_ambiguous_framing_is_400_and_closes_the_connection(self):
        # What could let a proxy in front and the daemon disagree on where a request ends, or
        # a check read another Host than the one routed (was accepted by the coordinator's
        # cpp-httplib server: issue 32).
        with self.daemon(env=TOKEN_ENV) as d:
            w = b"POST " + self.WRITE + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AUTH + \
                b"Content-Type: application/json\r\n"
            n = str(len(self.WRITE_BODY)).encode()
            chunked = b"%x\r\n" % len(self.WRITE_BODY) + self.WRITE_BODY + b"\r\n0\r\n\r\n"
            cases = [
                (w + b"Content-Length: " + n + b"\r\nContent-Length: " + n + b"\r\n\r\n" +
                 self.WRITE_BODY, "Content-Length: repeated"),
                (w + b"Content-Length: " + n + b"\r\nContent-Length: 1\r\n\r\n" + self.WRITE_BODY,
                 "malformed"),
                (w + b"Content-Length: " + n + b", " + n + b"\r\n\r\n" + self.WRITE_BODY,
                 "malformed"),
                (b"GET " + self.READ + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\n\r\n",
                 "Host: repeated"),
                (b"GET " + self.READ + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.test\r\n\r\n",
                 "Host: repeated"),
                (b"GET " + self.READ + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\x00b\r\n\r\n",
                 "malformed"),
                (b"GET " + self.READ + b" HTTP/1.1\r\nHost: 127.0.0.1\x01\r\n\r\n", "malformed"),
                (w + b"Transfer-Encoding: chunked\r\nContent-Length: " + n + b"\r\n\r\n" + chunked,
                 "malformed"),
                (w + b"Content-Length: " + n + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
                 "malformed"),
                (w + b"Transfer-Encoding: gzip\r\n\r\n" + self.WRITE_BODY, "Transfer-Encoding"),
            ]
            for i, (request, needle) in enumerate(cases):
                with self.subTest(case=i):
                    status, body, closed = closed_after_answer(d.port, request)
                    self.assertEqual(status, 400, body)
                    self.assertIn(needle, body.decode("utf-8", "replace"))
                    self.assertTrue(closed)
            # Well framed, chunked or not: taken.
            self.assertEqual(closed_after_answer(d.port, w + b"Transfer-Encoding: chunked\r\n"
                                                 b"Connection: close\r\n\r\n" + chunked)[0],
                             self.WRITE_OK)
            self.assertEqual(post(d.port, self.WRITE, self.WRITE_BODY, headers=AUTH)[0],
                             self.WRITE_OK)

    def test_hosts_methods_tokens_types_and_sizes(self):
        with self.daemon("--allow-host", "node-7.example",
                         env=TOKEN_ENV) as d:
            p = d.port
            cases = [
                (get(p, self.READ, host=b"evil.example.com:%d" % p), 403, "DNS rebinding"),
                (get(p, b"/", host=b"rebind.attacker.test"), 403, "Host"),
                (get(p, self.READ + b"?x=1"), 400, "unknown parameter"),
                (get(p, b"/v1/nothing"), 404, "no such path"),
                (get(p, self.READ, method=b"DELETE"), 405, "method not allowed"),
                (get(p, self.WRITE), 405, "POST"),
                (get(p, self.WRITE, method=b"OPTIONS"), 405, "POST"),
                (post(p, self.WRITE, self.WRITE_BODY), 401, "bearer token"),
                (post(p, self.WRITE, self.WRITE_BODY, headers=b"Authorization: Bearer x\r\n"),
                 401, "bearer token"),
                (post(p, self.WRITE, self.WRITE_BODY, headers=b"Authorization: Basic czNjcmV0\r\n"),
                 401, "bearer token"),
                (post(p, self.WRITE, self.WRITE_BODY, b"text/plain", AUTH), 415, "application/json"),
                (post(p, self.WRITE, b"a=1", b"application/x-www-form-urlencoded", AUTH), 415,
                 "application/json"),
                (post(p, self.WRITE, b" " * (self.MAX_BODY + 1), headers=AUTH), 413,
                 "larger than %d" % self.MAX_BODY),
                (raw(p, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 9000 +
                     b"\r\n\r\n"), 431, "header too large"),
                (raw(p, b"GET http://127.0.0.1" + self.READ + b" HTTP/1.1\r\nHost: 127.0.0.1"
                     b"\r\n\r\n"), 400, "absolute path"),
                (raw(p, b"BLAH\r\n\r\n"), 400, "malformed"),
            ]
            for i, ((status, headers, body), want, needle) in enumerate(cases):
                with self.subTest(case=i, want=want):
                    self.assertEqual(status, want, body)
                    self.assertIn(needle, body.decode("utf-8", "replace"))
                    self.assertEqual(headers["content-type"], "application/json")
                    self.assertEqual(headers["cache-control"], "no-store")
                    if want == 405:
                        self.assertIn("allow", headers)
                    if want == 401:
                        self.assertEqual(headers["www-authenticate"], "Bearer")
            # Allowed: loopback and IP literals, localhost, the --allow-host name; HEAD.
            self.assertEqual(get(p, self.READ, host=b"localhost:%d" % p)[0], 200)
            self.assertEqual(get(p, self.READ, host=b"[::1]:%d" % p)[0], 200)
            self.assertEqual(get(p, self.READ, host=b"10.1.2.3")[0], 200)
            self.assertEqual(get(p, self.READ, host=b"NODE-7.example:%d" % p)[0], 200)
            status, headers, body = get(p, self.READ, method=b"HEAD")
            self.assertEqual((status, body), (200, b""))
            self.assertGreater(int(headers["content-length"]), 0)
            status, _, body = post(p, self.WRITE, self.WRITE_BODY, b"Application/JSON; charset=utf-8",
                                   b"Authorization: bearer " + TOKEN + b"\r\n")
            self.assertEqual(status, self.WRITE_OK, body)

    def test_pipelined_requests_are_answered_in_order(self):
        with self.daemon() as d:
            with socket.create_connection(("127.0.0.1", d.port), timeout=5) as s:
                s.sendall(b"GET " + self.READ + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                          b"GET /v1/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                          b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                data = b""
                while True:  # the last asks to close
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            statuses = [int(m) for m in re.findall(rb"HTTP/1\.1 (\d+) ", data)]
            self.assertEqual(statuses, [200, 404, 200])

    def test_listening_beyond_loopback_needs_a_token_or_insecure_listen(self):
        r = self.run_to_end("--listen", "0.0.0.0:0")
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("beyond loopback without a token", lines[0])
        r = self.run_to_end("--listen", "nonsense")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--listen: 'nonsense': expected HOST:PORT", r.stderr)
        with self.daemon("--listen", "0.0.0.0:0", "--insecure-listen") as d:
            self.assertEqual(get(d.port, self.READ)[0], 200)
        with self.daemon("--listen", "0.0.0.0:0", env={"HEADROOM_TOKEN": "x"}) as d:
            self.assertEqual(get(d.port, self.READ)[0], 200)

    def test_a_second_one_on_a_port_in_use_fails(self):
        with self.daemon() as first:
            r = self.run_to_end("--listen", "127.0.0.1:%d" % first.port)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("%s: cannot listen on 127.0.0.1:%d: the port is in use"
                          % (self.NAME, first.port), r.stderr)
            for _ in range(20):  # the first still answers every connection alone
                self.assertEqual(get(first.port, self.READ)[0], 200)

    def test_sigterm_stops_within_a_second_whatever_clients_do(self):
        with self.daemon() as d:
            slow = socket.create_connection(("127.0.0.1", d.port))
            slow.sendall(b"GET " + self.READ + b" HTTP/1.1\r\nHo")
            body = socket.create_connection(("127.0.0.1", d.port))
            body.sendall(b"POST " + self.WRITE + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 3000\r\n\r\n{\"x\"")
            idle = socket.create_connection(("127.0.0.1", d.port))
            idle.sendall(b"GET " + self.READ + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.assertEqual(read_response(idle)[0], 200)
            t0 = time.monotonic()
            code = d.stop()
            elapsed_s = time.monotonic() - t0
            print("%s: SIGTERM to exit with three clients connected: %.3f s"
                  % (self.NAME, elapsed_s))
            self.assertEqual(code, 0)
            self.assertLess(elapsed_s, 1.0)
            for s in (slow, body, idle):
                s.close()

#!/usr/bin/python3
"""The Python client against a hostile server (issue 53, item 5): whatever answers on the
agent's port, the client never raises into the trainer, never waits past its deadline, never
reads past its byte cap, never follows a redirect (nor sends its token elsewhere), never hands
the trainer a concurrency or group size above its own limits, and in a site never trusts a
decision past its (capped) validity: it holds.

A raw TCP server on 127.0.0.1:0 answers each connection from a scenario: a bad status line, a
short body, a 70 KB header, 101 headers, JSON nested 100000 deep, a trickle (one byte every
0.2 s for 30 s, timeout_s=2), a 100 MB and an endless body, 10^9 concurrency and group size,
valid_for_s 1e308 in a site then the agent gone, a 302 to another port that records whether the
token arrived. Then a randomized section, fixed seed: random status lines, framings, header
counts and sizes, JSON types for every field, random bytes, truncations, delays and hangs,
through each public method: it never raises, returns within its deadline, and the result is a
decision within the limits or the fallback.

Every client call runs on a thread joined with a bound, so a client that hangs fails the test
instead of hanging it. Time is read only to check the deadlines (generous but real bounds); the
server's sleeps are its trickle, never synchronisation. Standard library only; 127.0.0.1 only.

Usage: hostile_server_test.py. Exit 0 on success, 1 on a failure.
"""

import json
import math
import os
import random
import socket
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
from headroom_client import STANDBY_WAIT_S, AgentClient, CapFollower, ThreadConcurrencyGate  # noqa: E402

SEED = 20240553           # the randomized section's seed (fixed: the same cases every run)
RANDOM_CASES = 200        # its cases
RANDOM_TIMEOUT_S = 0.3    # the client's timeout_s there
MARGIN_S = 1.5            # a call may end this long after its deadline (a loaded machine)
JOIN_S = 40.0             # a call that has not returned by then hangs: fail
TOKEN = "s3cret-token"
MAX_CONCURRENCY, MAX_GROUP_SIZE = 64, 16
MB = 1 << 20


def decision(**fields):
    return dict(dict(concurrency=4, group_size=8, seq=3, valid_for_s=5.0, reason="test"),
                **fields)


def http_answer(body, status=b"HTTP/1.1 200 OK", headers=()):
    """An answer's bytes: the status line, headers, a Content-Length and the body."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    head = [status, b"Content-Type: application/json"] + list(headers)
    head.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class HostileServer:
    """Accepts connections on 127.0.0.1:0; for each reads the request (its head and a
    Content-Length body), records it, and hands the socket to `scenario(server, conn)`.
    `sent` counts the bytes scenarios sent (send()); `done` is set each time one ends."""

    def __init__(self, scenario=None):
        self.scenario = scenario
        self.lock = threading.Lock()
        self.requests = []       # the raw requests, in order (guarded by lock)
        self.sent = 0            # bytes sent by scenarios (guarded by lock)
        self.finished = 0        # scenarios ended (guarded by lock)
        self.cond = threading.Condition(self.lock)
        self.stopping = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            conn.settimeout(30.0)
            request = self._read_request(conn)
            with self.lock:
                self.requests.append(request)
            if self.scenario is not None:
                self.scenario(self, conn)
        except OSError:
            pass  # the client went away: expected
        finally:
            conn.close()
            with self.cond:
                self.finished += 1
                self.cond.notify_all()

    @staticmethod
    def _read_request(conn):
        buf = b""
        while b"\r\n\r\n" not in buf and len(buf) < 65536:
            data = conn.recv(4096)
            if not data:
                return buf
            buf += data
        head, _, body = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            data = conn.recv(4096)
            if not data:
                break
            body += data
        return head + b"\r\n\r\n" + body

    def send(self, conn, data):
        conn.sendall(data)
        with self.lock:
            self.sent += len(data)

    def wait_until_gone(self, conn):
        """Waits (bounded) until the client closes the connection, reading what it sends."""
        while not self.stopping.is_set():
            if not conn.recv(4096):
                return

    def wait_finished(self, n, timeout_s=20.0):
        """Waits until n scenarios ended; returns whether they did within timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.finished < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True

    def stop(self):
        self.stopping.set()
        try:  # shutdown first: it wakes the accept() blocked on another thread (Linux)
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def bounded(fn, limit_s=JOIN_S):
    """fn() on a thread joined for at most limit_s: {"result" or "exc", "elapsed"}; raises
    AssertionError when it has not returned by then (it hangs)."""
    box = {}

    def run():
        t0 = time.monotonic()
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 -- what the client let through
            box["exc"] = e
        box["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    if t.is_alive():
        raise AssertionError("the client call did not return within %.0f s" % limit_s)
    return box


def is_count(v, limit):
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= limit


def decision_problem(a, client):
    """Why `a` is neither a decision within the client's limits nor its fallback (None: it
    is one of them)."""
    if not isinstance(a, dict):
        return "not a dict: %r" % (a,)
    if not is_count(a.get("concurrency"), client.max_concurrency or 10 ** 6):
        return "concurrency %r" % (a.get("concurrency"),)
    if not is_count(a.get("group_size"), client.max_group_size or 10 ** 6):
        return "group_size %r" % (a.get("group_size"),)
    seq, valid = a.get("seq"), a.get("valid_for_s")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return "seq %r" % (seq,)
    if (not isinstance(valid, (int, float)) or isinstance(valid, bool)
            or not math.isfinite(valid) or not 0 <= valid <= client.max_valid_for_s):
        return "valid_for_s %r" % (valid,)
    if str(a.get("reason", "")).startswith("fallback") and (
            a["concurrency"], a["group_size"]) != (client.safe["concurrency"],
                                                   client.safe["group_size"]):
        return "a fallback with other than the safe values: %r" % (a,)
    return None


def fallback(a):
    return isinstance(a, dict) and str(a.get("reason", "")).startswith("fallback")


class Findings(unittest.TestCase):
    """Each finding of issue 53, item 5, against every public method."""

    def setUp(self):
        self.server = HostileServer()
        self.servers = [self.server]

    def tearDown(self):
        for s in self.servers:
            s.stop()

    def client(self, **kw):
        kw.setdefault("timeout_s", 2.0)
        kw.setdefault("safe_concurrency", 2)
        kw.setdefault("safe_group_size", 4)
        return AgentClient(self.server.url, token=TOKEN, **kw)

    def every_method(self, client, timeout_s=2.0):
        """Calls each public method once: none raises, each returns its fallback, within
        timeout_s + MARGIN_S."""
        calls = [("actuation", client.actuation, fallback),
                 ("actuation_for_step", lambda: client.actuation_for_step(5), fallback),
                 ("report", lambda: client.report(5, "rollout", 100.0, 3), lambda r: r is False),
                 ("status", client.status, lambda r: r is None)]
        for name, fn, expected in calls:
            box = bounded(fn)
            self.assertNotIn("exc", box, "%s raised %r" % (name, box.get("exc")))
            self.assertTrue(expected(box["result"]), "%s returned %.300r" % (name, box["result"]))
            self.assertLess(box["elapsed"], timeout_s + MARGIN_S, name)
            if name in ("actuation", "actuation_for_step"):
                self.assertIsNone(decision_problem(box["result"], client))

    def answer(self, data, then_close=True):
        def scenario(server, conn):
            server.send(conn, data)
            if not then_close:
                server.wait_until_gone(conn)
        self.server.scenario = scenario

    def test_bad_status_line(self):
        for line in [b"HTTP/1.1 OK", b"HTTX/1.1 200 OK", b"\x00\x01\xff garbage", b"200 OK",
                     b"HTTP/1.1 2000 OK"]:
            with self.subTest(line=line):
                self.answer(http_answer(decision(), status=line))
                self.every_method(self.client())

    def test_short_body(self):
        body = json.dumps(decision()).encode()
        self.answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(body) + 100) + body)
        self.every_method(self.client())

    def test_70_kb_header(self):
        self.answer(http_answer(decision(), headers=[b"X-Big: " + b"a" * 70000]))
        self.every_method(self.client())

    def test_101_headers(self):
        self.answer(http_answer(decision(), headers=[b"X-H%d: v" % i for i in range(101)]))
        self.every_method(self.client())

    def test_deeply_nested_json(self):
        self.answer(http_answer(b"[" * 100000))
        self.every_method(self.client())
        self.answer(http_answer(b'{"concurrency": ' + b"[" * 100000 + b"]" * 100000 + b"}"))
        self.every_method(self.client())

    def test_trickle_ends_at_the_deadline(self):
        """An answer trickled a byte every 0.2 s for 30 s: actuation() returns within
        timeout_s (2 s) and a margin, the body's and the head's trickle alike."""
        body = json.dumps(decision()).encode()
        for name, head, rest in [
                ("body", b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", body + b" " * 1000),
                ("head", b"", b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"s" * 1000)]:
            with self.subTest(trickled=name):
                def scenario(server, conn, head=head, rest=rest):
                    server.send(conn, head)
                    end = time.monotonic() + 30.0
                    for i in range(len(rest)):
                        if time.monotonic() > end or server.stopping.is_set():
                            return
                        server.send(conn, rest[i:i + 1])
                        time.sleep(0.2)  # the trickle itself
                self.server.scenario = scenario
                client = self.client(timeout_s=2.0)
                box = bounded(client.actuation)
                self.assertNotIn("exc", box)
                self.assertTrue(fallback(box["result"]), box["result"])
                self.assertLess(box["elapsed"], 2.0 + MARGIN_S)
                self.assertGreater(box["elapsed"], 1.5)  # it did wait for its deadline

    def test_large_and_endless_bodies_are_not_read(self):
        """100 MB with its Content-Length, 100 MB without one, an endless chunked body: the
        client stops at its cap (1 MiB by default); the server, blocked by the client no
        longer reading, could send only a fraction before the client closed."""
        block = b"7" * (64 * 1024)

        def body_of(total, chunked):
            def scenario(server, conn):
                sent = 0
                while sent < total and not server.stopping.is_set():
                    server.send(conn, b"%x\r\n%s\r\n" % (len(block), block) if chunked
                                else block)
                    sent += len(block)
            return scenario

        cases = [("sized", b"Content-Length: %d\r\n" % (100 * MB), 100 * MB, False),
                 ("to close", b"", 100 * MB, False),
                 ("chunked", b"Transfer-Encoding: chunked\r\n", 200 * MB, True)]
        for name, framing, total, chunked in cases:
            with self.subTest(body=name):
                head = b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n"
                send_body = body_of(total, chunked)

                def scenario(server, conn, head=head, send_body=send_body):
                    server.send(conn, head)
                    send_body(server, conn)
                self.server.scenario = scenario
                before, finished = self.server.sent, self.server.finished
                box = bounded(self.client(timeout_s=5.0).actuation)
                self.assertNotIn("exc", box)
                self.assertTrue(fallback(box["result"]))
                self.assertTrue(self.server.wait_finished(finished + 1), "the server still sends")
                sent = self.server.sent - before
                self.assertLess(sent, 64 * MB, "%d bytes went: the client read past its cap"
                                % sent)

    def test_huge_values_are_clamped_or_refused(self):
        """10^9: no decision (above MAX_COUNT), with or without the trainer's limits -- the
        safe values; 5000 and 300: clamped to the trainer's limits (max_concurrency,
        max_group_size), the agent's values kept in "clamped"."""
        self.answer(http_answer(decision(concurrency=10 ** 9, group_size=10 ** 9)))
        for limits in [{}, dict(max_concurrency=MAX_CONCURRENCY, max_group_size=MAX_GROUP_SIZE)]:
            client = self.client(**limits)
            for read in (client.actuation, lambda: client.actuation_for_step(2)):
                a = bounded(read)["result"]
                self.assertTrue(fallback(a), a)
                self.assertEqual((a["concurrency"], a["group_size"]), (2, 4))
        self.answer(http_answer(decision(concurrency=5000, group_size=300)))
        client = self.client(max_concurrency=MAX_CONCURRENCY, max_group_size=MAX_GROUP_SIZE)
        for read in (client.actuation, lambda: client.actuation_for_step(2)):
            a = bounded(read)["result"]
            self.assertFalse(fallback(a))
            self.assertEqual((a["concurrency"], a["group_size"]),
                             (MAX_CONCURRENCY, MAX_GROUP_SIZE))
            self.assertEqual(a["clamped"], {"concurrency": 5000, "group_size": 300})
        # Within the limits: as the agent said.
        self.answer(http_answer(decision(concurrency=12, group_size=8)))
        a = bounded(self.client(max_concurrency=MAX_CONCURRENCY,
                                max_group_size=MAX_GROUP_SIZE).actuation)["result"]
        self.assertEqual((a["concurrency"], a["group_size"]), (12, 8))
        self.assertNotIn("clamped", a)

    def test_forever_valid_decision_ends_in_a_hold_in_a_site(self):
        """valid_for_s 1e308 in a site, then the agent gone: the decision is kept for the cap
        (max_valid_for_s, default 60 s), then the client holds (standby) -- fail closed."""
        now = [1000.0]
        self.answer(http_answer(decision(valid_for_s=1e308, site=True)))
        client = self.client(clock=lambda: now[0])
        a = bounded(client.actuation)["result"]
        self.assertFalse(fallback(a))
        self.assertLessEqual(a["valid_for_s"], 60.0)
        self.server.stop()  # the agent is gone: connections refused
        now[0] += 59.0
        a = bounded(client.actuation)["result"]
        self.assertEqual((a["seq"], a["reason"]), (3, "test"))  # still valid
        self.assertEqual(client.take_hold(a), 0.0)
        now[0] += 2.0
        a = bounded(client.actuation)["result"]
        self.assertTrue(a.get("standby"), a)  # past the cap: held
        self.assertEqual(client.take_hold(a), STANDBY_WAIT_S)
        self.assertEqual(bounded(client.take_hold)["result"], STANDBY_WAIT_S)

    def test_forever_valid_decision_ends_outside_a_site(self):
        now = [0.0]
        self.answer(http_answer(decision(valid_for_s=1e308, concurrency=9)))
        client = self.client(clock=lambda: now[0], max_valid_for_s=5.0)
        self.assertEqual(bounded(client.actuation)["result"]["valid_for_s"], 5.0)
        self.server.stop()
        now[0] += 5.5
        a = bounded(client.actuation)["result"]
        self.assertTrue(fallback(a), a)
        self.assertEqual(a["concurrency"], 2)  # the safe value, not 9 for ever

    def test_redirect_is_not_followed_and_the_token_stays(self):
        elsewhere = HostileServer()
        self.servers.append(elsewhere)
        elsewhere.scenario = lambda server, conn: server.send(
            conn, http_answer(decision(concurrency=99)))
        for code in (b"301", b"302", b"303", b"307", b"308"):
            with self.subTest(status=code):
                location = b"Location: " + elsewhere.url.encode() + b"/v1/actuation"
                self.answer(http_answer({}, status=b"HTTP/1.1 " + code + b" Moved",
                                        headers=[location]))
                self.every_method(self.client())
        with elsewhere.lock:
            requests = list(elsewhere.requests)
        self.assertEqual(requests, [], "the redirect was followed")
        self.assertFalse(any(b"s3cret" in r for r in requests), "the token went elsewhere")
        with self.server.lock:  # the agent itself got the token (it is where it belongs)
            self.assertTrue(all(b"Authorization: Bearer " + TOKEN.encode() in r
                                for r in self.server.requests))


class Threads(unittest.TestCase):
    """The client's threads outlive anything: a client that raises is counted and retried."""

    def test_cap_follower_outlives_a_raising_client(self):
        class Raising:
            timeout_s = 0.1

            def __init__(self):
                self.calls = 0

            def actuation(self, wait_s=0.0, after=None):
                self.calls += 1
                if self.calls <= 3:
                    raise RuntimeError("boom %d" % self.calls)
                return decision(concurrency=5, seq=self.calls)

        changed = threading.Event()
        gate = ThreadConcurrencyGate(1)
        follower = CapFollower(Raising(), [gate], wait_s=0.2, retry_s=0.01,
                               on_change=lambda a: changed.set())
        with follower:
            self.assertTrue(changed.wait(10.0), "the follower died on the client's exception")
        self.assertEqual(gate.limit, 5)
        self.assertEqual(follower.errors, 3)


HOSTILE_P = 0.25  # each part of a random answer (fields, body, status, headers, framing)
                  # is hostile with this probability, else well formed


def random_value(rng, good):
    """A hostile value for a field whose good value is `good`: another type or size."""
    return rng.choice([lambda: 10 ** rng.randrange(1, 80), lambda: -rng.randrange(0, 10),
                       lambda: 0, lambda: rng.uniform(-1e3, 1e308), lambda: str(good),
                       lambda: None, lambda: rng.choice([True, False]), lambda: [good],
                       lambda: {"v": good}, lambda: float("nan"), lambda: float("inf"),
                       lambda: "x" * rng.randrange(0, 5000)])()


def random_fields(rng):
    """(the answer's fields, whether they make a decision)."""
    fields = {"concurrency": rng.choice([1, 3, 12, 64, 65, 5000, 10 ** 6]),
              "group_size": rng.choice([1, 2, 8, 16, 17, 300]),
              "seq": rng.randrange(0, 10 ** 6), "reason": "r",
              "valid_for_s": rng.choice([0.0, 2.5, 5.0, 61.0, 1e308])}
    if rng.random() < 0.2:
        fields["site"] = rng.choice([True, False])
    if rng.random() < 0.2:
        fields["step"] = 7  # the step actuation_for_step(7) asks
    if rng.random() >= HOSTILE_P:
        return fields, True
    for k in rng.sample(sorted(fields), rng.randrange(1, len(fields) + 1)):
        fields[k] = random_value(rng, fields[k])
    if rng.random() < 0.3:
        del fields[rng.choice(sorted(fields))]
    return fields, False  # may still be a decision: the oracle then checks its values


def random_body(rng, fields):
    """(the body's bytes, whether it is the fields' JSON)."""
    if rng.random() >= HOSTILE_P:
        return json.dumps(fields, allow_nan=True).encode(), True
    kind = rng.randrange(4)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))), False
    if kind == 1:
        n = rng.randrange(1, 5000)
        return b"[" * n + b"]" * n, False
    if kind == 2:
        full = json.dumps(fields, allow_nan=True).encode()
        return full[:rng.randrange(0, len(full))], False  # truncated JSON
    return json.dumps(rng.choice([[], 1, "s", None, [fields]])).encode(), False


def random_status(rng):
    if rng.random() >= HOSTILE_P:
        return rng.choice([b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK"]), True
    return rng.choice([b"HTTP/1.1 204 No", b"HTTP/1.1 302 Found", b"HTTP/1.1 400 Bad",
                       b"HTTP/1.1 500 Err", b"HTTP/1.1 999 ?", b"HTTP/2 200", b"", b"\xff\xfe",
                       b"HTTP/1.1 200", bytes(rng.randrange(256) for _ in range(20))]), False


def random_headers(rng):
    headers = [b"Content-Type: application/json"]
    hostile = rng.random() < HOSTILE_P
    n = rng.choice([50, 99, 120]) if hostile else rng.randrange(0, 8)
    headers += [b"X-R%d: %s" % (i, b"v" * rng.choice([0, 10, 100])) for i in range(n)]
    if hostile and rng.random() < 0.3:
        headers.append(b"X-Huge: " + b"h" * rng.choice([20000, 70000]))
    return headers, not hostile


def random_framing(rng, body):
    """(framing headers, the raw body, whether the framing is right)."""
    if rng.random() >= HOSTILE_P:
        kind = rng.randrange(3)
        if kind == 0:
            return [b"Content-Length: %d" % len(body)], body, True
        if kind == 1:
            return [], body, True  # to the close
        raw, at = b"", 0
        while at < len(body):
            n = rng.randrange(1, 64)
            raw += b"%x\r\n%s\r\n" % (len(body[at:at + n]), body[at:at + n])
            at += n
        return [b"Transfer-Encoding: chunked"], raw + b"0\r\n\r\n", True
    header = rng.choice([b"Content-Length: %d" % (len(body) + rng.randrange(1, 99)),
                         b"Content-Length: -1", b"Content-Length: abc",
                         b"Content-Length: %d" % max(len(body) - 1, 0),
                         b"Content-Length: 99999999999999999999",
                         b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip"])
    return [header], body, False


def random_answer(rng):
    """(the answer's bytes, whether it is a clean decision, its concurrency and group size)."""
    fields, clean = random_fields(rng)
    body, ok = random_body(rng, fields)
    clean &= ok
    status, ok = random_status(rng)
    clean &= ok
    headers, ok = random_headers(rng)
    clean &= ok
    framing, raw, ok = random_framing(rng, body)
    clean &= ok
    data = b"\r\n".join([status] + headers + framing) + b"\r\n\r\n" + raw
    return data, clean, fields.get("concurrency"), fields.get("group_size")


def random_script(rng, data, timeout_s):
    """(pieces [(delay_s, bytes)], whether the server then hangs, whether it is quick)."""
    cuts = sorted(rng.randrange(0, len(data) + 1) for _ in range(rng.randrange(0, 4)))
    pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    slow = rng.random() < 0.15
    delays = [rng.uniform(0, timeout_s * (1.5 if slow else 0.05)) for _ in pieces]
    if rng.random() < 0.1:
        pieces = pieces[:-1]  # the end never comes
    hang = rng.random() < 0.1
    quick = not slow and sum(delays) < timeout_s / 4
    return list(zip(delays, pieces)), hang, quick


class Randomized(unittest.TestCase):
    """Random answers (fixed seed) through every public method: never a raise, never past the
    deadline, a decision within the limits or the fallback; a clean, quick answer is heard."""

    def test_random_answers(self):
        rng = random.Random(SEED)
        server = HostileServer()
        self.addCleanup(server.stop)
        heard = 0
        for case in range(RANDOM_CASES):
            data, clean, concurrency, group_size = random_answer(rng)
            script, hang, quick = random_script(rng, data, RANDOM_TIMEOUT_S)
            complete = b"".join(p for _, p in script) == data

            def scenario(srv, conn, script=script, hang=hang):
                for delay_s, piece in script:
                    time.sleep(delay_s)  # the answer's pace, part of the case
                    srv.send(conn, piece)
                if hang:
                    srv.wait_until_gone(conn)
            server.scenario = scenario
            in_site = rng.random() < 0.2
            client = AgentClient(server.url, token=TOKEN, timeout_s=RANDOM_TIMEOUT_S,
                                 safe_concurrency=2, safe_group_size=4, site=in_site,
                                 max_concurrency=MAX_CONCURRENCY, max_group_size=MAX_GROUP_SIZE)
            method = rng.choice(["actuation", "actuation", "for_step", "report", "status",
                                 "long_poll"])
            wait_s = 0.0
            if method == "actuation":
                fn = client.actuation
            elif method == "long_poll":
                wait_s = rng.uniform(0.0, 0.3)
                fn = lambda: client.actuation(wait_s, after=1)  # noqa: E731
            elif method == "for_step":
                fn = lambda: client.actuation_for_step(7)  # noqa: E731
            elif method == "report":
                fn = lambda: client.report(7, "train", 10.0, 1)  # noqa: E731
            else:
                fn = client.status
            box = bounded(fn)
            where = "case %d (%s): %.300r" % (case, method, data)
            self.assertNotIn("exc", box, "%s raised %r" % (where, box.get("exc")))
            self.assertLess(box["elapsed"], RANDOM_TIMEOUT_S + wait_s + MARGIN_S, where)
            r = box["result"]
            if method == "report":
                self.assertIsInstance(r, bool, where)
            elif method == "status":
                self.assertTrue(r is None or isinstance(r, dict), where)
            else:
                self.assertIsNone(decision_problem(r, client), where)
                if in_site and fallback(r):
                    self.assertTrue(r.get("standby"), where)
                if clean and quick and complete and not hang or not fallback(r):
                    # heard: the agent's values, clamped to the trainer's limits
                    self.assertFalse(fallback(r), where + " -> %r" % (r,))
                    self.assertEqual(r["concurrency"], min(concurrency, MAX_CONCURRENCY), where)
                    self.assertEqual(r["group_size"], min(group_size, MAX_GROUP_SIZE), where)
                    heard += 1
        print("random answers: %d cases, %d heard" % (RANDOM_CASES, heard), file=sys.stderr)
        self.assertGreater(heard, RANDOM_CASES // 10, "too few cases were answered cleanly")


if __name__ == "__main__":
    unittest.main(verbosity=2)

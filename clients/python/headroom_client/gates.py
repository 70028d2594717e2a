"""Continuous admission: gates in front of a rollout engine's requests, and a follower that
resizes them to the agent's concurrency.

The rule (continuous admission): a new sequence starts as soon as one ends, while fewer than
the cap are in flight. A gate admits in arrival order; `resize(n)` above the number in flight
admits waiting requests at once, below it admits none until enough have ended (requests
already running are never interrupted). So the engine stays at the cap while work remains --
unlike `batched`, where a chunk waits for its longest sequence.

- ConcurrencyGate: asyncio (`async with gate:`), for an async engine (vLLM's AsyncLLMEngine,
  an HTTP client to a server). Single-loop: use it from the loop it was first entered on.
- ThreadConcurrencyGate: threads (`with gate:`, or acquire()/release()), for a thread pool of
  blocking requests.
- CapFollower: a thread that long-polls the agent and resizes one or more gates of either kind
  whenever the decision's concurrency changes.
"""

import asyncio
import collections
import math
import sys
import threading
import time
from typing import Any, Callable, Deque, Iterable, List, Optional

from .client import MAX_WAIT_S, STANDBY_WAIT_S, Actuation, AgentClient


MIN_POLL_INTERVAL_S = 0.1  # CapFollower: the shortest time between two of its reads


def _limit(n: Any) -> int:
    """n as a gate's limit: at least 1."""
    return max(1, int(n))


class ConcurrencyGate:
    """An asyncio gate whose limit can be changed while tasks wait: generation requests enter
    with `async with gate:`; `await gate.resize(n)` (or set_limit(n) on the loop's thread, or
    resize_threadsafe(n) from any thread) lets more in at once or stops admitting until the
    number in flight falls below n. Waiters are admitted in arrival order; a waiter cancelled
    after it was admitted gives its place back.

    Not thread-safe but for resize_threadsafe: one event loop uses it (the one it is created
    in, or first entered from)."""

    def __init__(self, limit: int) -> None:
        self._limit = _limit(limit)
        self._in_flight = 0
        self._waiters: Deque["asyncio.Future[None]"] = collections.deque()
        try:  # created in a running loop: known now, so resize_threadsafe works at once
            self._loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # bound at the first entry

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def resize(self, limit: int) -> None:
        """The limit from now on (at least 1). A coroutine, for the existing callers."""
        self.set_limit(limit)

    def set_limit(self, limit: int) -> None:
        """resize() for the loop's own thread, without awaiting."""
        self._limit = _limit(limit)
        self._admit()

    def resize_threadsafe(self, limit: int,
                          loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        """resize() from any thread: scheduled on the gate's loop (loop.call_soon_threadsafe),
        so it takes effect on the loop's next iteration; on the loop's thread, at once. Before
        the gate knows its loop (created outside one and never entered, and `loop` not given)
        no task waits on it, and the limit is set directly. A closed loop: ignored."""
        loop = loop or self._loop
        if loop is None:
            self._limit = _limit(limit)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.set_limit(limit)
            return
        try:
            loop.call_soon_threadsafe(self.set_limit, limit)
        except RuntimeError:  # the loop is closed: nobody waits on the gate any more
            pass

    def _admit(self) -> None:
        """Admits waiters, oldest first, while fewer than the limit are in flight: each is
        counted in flight when admitted, so in_flight never exceeds the limit."""
        while self._waiters and self._in_flight < self._limit:
            fut = self._waiters.popleft()
            if not fut.done():
                self._in_flight += 1
                fut.set_result(None)

    async def __aenter__(self) -> "ConcurrencyGate":
        loop = asyncio.get_running_loop()
        self._loop = loop
        if not self._waiters and self._in_flight < self._limit:
            self._in_flight += 1
            return self
        fut = loop.create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # admitted, then cancelled: give it back
                self._in_flight -= 1
                self._admit()
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        self._in_flight -= 1
        self._admit()
        return False


class ThreadConcurrencyGate:
    """The threaded gate: `with gate:` (or acquire()/release()) around a blocking generation
    request; resize(n) from any thread, as ConcurrencyGate's. Thread-safe (one lock)."""

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._limit = _limit(limit)   # guarded by _cond, as the fields below
        self._in_flight = 0
        self._next_ticket = 0         # arrival order: the next waiter's ticket
        self._serving = 0             # the oldest ticket not yet admitted (or given up)
        self._given_up: set = set()   # tickets whose acquire timed out while waiting

    @property
    def limit(self) -> int:
        with self._cond:
            return self._limit

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def resize(self, limit: int) -> None:
        """The limit from now on (at least 1): more admitted at once, or none until below."""
        with self._cond:
            self._limit = _limit(limit)
            self._cond.notify_all()

    resize_threadsafe = resize  # for CapFollower and code written for either gate

    def _skip_given_up_locked(self) -> None:
        while self._serving in self._given_up:
            self._given_up.discard(self._serving)
            self._serving += 1

    def acquire(self, timeout_s: Optional[float] = None) -> bool:
        """Waits for a place (in arrival order); False if none came within timeout_s (None:
        wait as long as it takes)."""
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            while not (self._serving == ticket and self._in_flight < self._limit):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    if self._serving == ticket:
                        self._serving += 1
                    else:
                        self._given_up.add(ticket)
                    self._skip_given_up_locked()
                    self._cond.notify_all()
                    return False
                self._cond.wait(left)
            self._serving += 1
            self._skip_given_up_locked()
            self._in_flight += 1
            self._cond.notify_all()  # the next in line may fit too
            return True

    def release(self) -> None:
        """Gives a place back. REQUIRES: a matching acquire() returned True."""
        with self._cond:
            if self._in_flight <= 0:
                raise RuntimeError("ThreadConcurrencyGate.release() without acquire()")
            self._in_flight -= 1
            self._cond.notify_all()

    def __enter__(self) -> "ThreadConcurrencyGate":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.release()
        return False


def _count(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    return 1


class CapFollower:
    """A thread that long-polls the agent (client.actuation(wait_s, after=seq)) and resizes
    every gate to the decision's concurrency whenever it changes (at start: the first one).

    Gates: ThreadConcurrencyGate, ConcurrencyGate (resized through resize_threadsafe, i.e. the
    gate's loop.call_soon_threadsafe: pass `loop` when the gates were created outside their
    loop and may have waiters before their first entry), or anything with resize_threadsafe(n)
    or resize(n) callable from this thread. on_change(a), if given, is called on the follower's
    thread after each resize. While the agent is not heard (or answers a long-poll at once
    with nothing new), it looks again every `retry_s`, without spinning; the client's fallback
    applies meanwhile (in a site: the safe concurrency). It never polls more often than every
    `min_interval_s` (an agent decides every 0.5 s; this bounds a misbehaving one's load). A
    failing gate or on_change is reported on stderr and never ends the thread; nor does any
    other exception (a client that raises): it is counted in `errors` and the read retried
    after `retry_s`.

    The client may be shared with the training loop (AgentClient is thread-safe): the follower
    waits past the seq it last applied, not past what another thread read."""

    def __init__(self, client: AgentClient, gates: Iterable[Any], *, wait_s: float = 10.0,
                 retry_s: float = STANDBY_WAIT_S, min_interval_s: float = MIN_POLL_INTERVAL_S,
                 loop: Optional[asyncio.AbstractEventLoop] = None,
                 on_change: Optional[Callable[[Actuation], Any]] = None) -> None:
        # Constant after construction.
        self.client = client
        self.gates: List[Any] = list(gates)
        self.wait_s = min(max(float(wait_s), 0.0), MAX_WAIT_S) if math.isfinite(wait_s) else 0.0
        self.retry_s = float(retry_s)
        self.min_interval_s = float(min_interval_s)
        self.loop = loop
        self.on_change = on_change
        # The follower thread's own state (read by others only as plain attributes).
        self.concurrency: Optional[int] = None  # the last concurrency applied
        self.seq: Optional[int] = None          # the last decision applied
        self.errors = 0  # exceptions caught in the thread (each retried after retry_s)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "CapFollower":
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="headroom-cap-follower",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: Optional[float] = None) -> bool:
        """Asks the thread to end and waits at most timeout_s (None: the long-poll plus the
        client's timeout). It ends after its current long-poll; a daemon, it never keeps the
        process alive. Returns whether it ended in time."""
        self._stop.set()
        t = self._thread
        if t is None:
            return True
        t.join(self.wait_s + self.client.timeout_s + 1.0 if timeout_s is None else timeout_s)
        return not t.is_alive()

    def __enter__(self) -> "CapFollower":
        return self.start()

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow_once()
            except Exception as e:  # noqa: BLE001 -- the thread never dies: counted, retried
                self.errors += 1
                if self.errors == 1:
                    print("headroom: CapFollower: %s: %s (counted in .errors, retrying)"
                          % (type(e).__name__, e), file=sys.stderr, flush=True)
                self._stop.wait(self.retry_s)

    def _follow_once(self) -> None:
        """One long-poll, the gates resized, then the wait before the next."""
        started = time.monotonic()
        a = self.client.actuation(self.wait_s if self.seq is not None else 0.0,
                                  after=self.seq)
        if self._stop.is_set():
            return
        if not isinstance(a, dict):
            raise TypeError("the client's actuation() returned %.80r" % (a,))
        nothing_new = a.get("seq") == self.seq
        self._apply(a)
        unheard = str(a.get("reason", "")).startswith("fallback")
        quick = time.monotonic() - started < self.wait_s / 2
        if unheard or (nothing_new and quick):
            self._stop.wait(self.retry_s)
        else:
            self._stop.wait(self.min_interval_s - (time.monotonic() - started))

    def _apply(self, a: Actuation) -> None:
        n = _count(a.get("concurrency"))
        seq = a.get("seq")
        if n != self.concurrency:
            for gate in self.gates:
                self._resize(gate, n)
            self.concurrency = n
            if self.on_change is not None:
                self._call(self.on_change, a)
        if isinstance(seq, int) and not str(a.get("reason", "")).startswith("fallback"):
            self.seq = seq  # a decision heard (or still valid): wait past it next

    def _resize(self, gate: Any, n: int) -> None:
        if isinstance(gate, ConcurrencyGate):
            self._call(gate.resize_threadsafe, n, self.loop)
        elif hasattr(gate, "resize_threadsafe"):
            self._call(gate.resize_threadsafe, n)
        else:
            self._call(gate.resize, n)

    @staticmethod
    def _call(f: Callable[..., Any], *args: Any) -> None:
        try:
            f(*args)
        except Exception as e:  # noqa: BLE001 -- the follower outlives a bad gate or callback
            print("headroom: CapFollower: %r failed: %s" % (f, e), file=sys.stderr, flush=True)

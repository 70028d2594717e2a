"""Heartbeat: the trainer's state sent to the agent (POST /v1/report) from a background thread.

    hb = Heartbeat(client, period_s=5.0)
    with hb:                                     # start(); stop() at the end
        hb.update(step=0, phase="rollout", group_size=8, admission="continuous")
        hb.update(in_flight=12, tokens=40000)    # any subset, merged into the state
        ...
        hb.update(phase="stopped")               # sent before stop() returns (or its bound)

Why: a phase can last minutes (a long rollout, a checkpoint, a site's hold) and the agent calls
a trainer it has not heard from for a while "silent" (its /v1/status `trainer.state`); the
heartbeat re-sends the state every `period_s`, and sends a change at once.

The contract with the training loop: update() never waits on the network. It merges the fields
into the state under a lock the heartbeat thread holds only to copy the state (never across a
request), appends the merged state to a queue of at most `queue_size` states (the oldest is
dropped when it is full: a state is complete, so dropping one loses an intermediate state,
never a field) and wakes the thread; it returns in microseconds even when the agent hangs.
Requests are made only on the heartbeat thread, each within `timeout_s` (the client's deadline);
a network error is counted (`failed`), never raised, and the thread outlives any exception
(counted in `errors`). Changes of step, phase, group_size, engines or admission go
at once; a change of the counters alone (tokens, in_flight, progress) at most every
`min_interval_s`. Nothing is sent before a phase is known.
"""

import collections
import math
import threading
import time
from typing import Any, Deque, Dict, List, Optional

from .client import ADMISSIONS, PHASES, AgentClient

DEFAULT_PERIOD_S = 5.0        # the longest gap between two reports while a phase lasts
DEFAULT_QUEUE_SIZE = 8        # states waiting for the heartbeat thread, at most
DEFAULT_TIMEOUT_S = 1.0       # one report's request
DEFAULT_MIN_INTERVAL_S = 0.1  # between two reports that change only the counters
STOP_MARGIN_S = 1.0           # stop() waits at most the request timeout plus this
ERROR_WAIT_S = 0.1            # after an exception in the thread, before it goes on

State = Dict[str, Any]
# The state's fields, as report() takes them; None: not sent (an optional field).
FIELDS = ("step", "phase", "tokens", "in_flight", "progress", "group_size", "engines",
          "admission")
_AT_ONCE = ("step", "phase", "group_size", "engines", "admission")  # a change goes at once


def _optional(convert: Any) -> Any:
    return lambda v: None if v is None else convert(v)


def _phase(v: Any) -> str:
    if v not in PHASES:
        raise ValueError("unknown phase %r: one of %s" % (v, ", ".join(PHASES)))
    return str(v)


def _admission(v: Any) -> str:
    if v not in ADMISSIONS:
        raise ValueError("unknown admission %r: one of %s" % (v, ", ".join(ADMISSIONS)))
    return str(v)


_CONVERT = {"step": int, "phase": _phase, "tokens": float, "in_flight": int,
            "progress": _optional(float), "group_size": _optional(int),
            "engines": _optional(int), "admission": _optional(_admission)}


def checked(fields: Dict[str, Any]) -> State:
    """The fields as the state keeps them. Raises TypeError for a field report() does not
    take, ValueError for a phase or admission the agent does not know (or a value that is not
    a number where one is due)."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise TypeError("Heartbeat.update: unknown field(s) %s: %s" %
                        (", ".join(unknown), ", ".join(FIELDS)))
    return {k: _CONVERT[k](v) for k, v in fields.items()}


def _changes_at_once(a: Optional[State], b: State) -> bool:
    return a is None or any(a[k] != b[k] for k in _AT_ONCE)


def _coalesced(states: List[State]) -> List[State]:
    """The states worth sending, in order: one that differs from the next only in the
    counters is superseded by it."""
    return [s for i, s in enumerate(states)
            if i + 1 == len(states) or _changes_at_once(s, states[i + 1])]


class Heartbeat:
    """Sends the trainer's state to the agent at least every `period_s`, and at once when
    update() changes it (module doc). Thread-safe: update() from any thread."""

    def __init__(self, client: AgentClient, period_s: float = DEFAULT_PERIOD_S, *,
                 queue_size: int = DEFAULT_QUEUE_SIZE, timeout_s: float = DEFAULT_TIMEOUT_S,
                 min_interval_s: float = DEFAULT_MIN_INTERVAL_S, **state: Any) -> None:
        """REQUIRES: period_s > 0, queue_size >= 1, timeout_s > 0, min_interval_s >= 0 (all
        finite). `state`: initial fields, as update() takes them."""
        for name, v, least in [("period_s", period_s, 0.0), ("timeout_s", timeout_s, 0.0)]:
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > least):
                raise ValueError("Heartbeat: %s must be a finite number > 0: %r" % (name, v))
        if not (math.isfinite(min_interval_s) and min_interval_s >= 0):
            raise ValueError("Heartbeat: min_interval_s must be finite and >= 0")
        if int(queue_size) < 1:
            raise ValueError("Heartbeat: queue_size must be >= 1")
        # Constant after construction.
        self.client = client
        self.period_s = float(period_s)
        self.queue_size = int(queue_size)
        self.timeout_s = float(timeout_s)
        self.min_interval_s = float(min_interval_s)
        # Guarded by _cond.
        self._cond = threading.Condition()
        self._state: State = {"step": 0, "phase": None, "tokens": 0.0, "in_flight": 0,
                              "progress": None, "group_size": None, "engines": None,
                              "admission": None}
        self._pending: Deque[State] = collections.deque(maxlen=self.queue_size)
        self._stopping = False
        self._dropped = 0   # states dropped from a full queue
        self._sent = 0      # reports the agent took
        self._failed = 0    # reports that failed
        self._errors = 0    # exceptions caught in the heartbeat thread (it goes on)
        self._thread: Optional[threading.Thread] = None
        if state:
            self.update(**state)

    # -- the training loop's side

    def update(self, **fields: Any) -> bool:
        """Merges `fields` (any of FIELDS; None clears an optional one) into the state and
        queues it for the heartbeat thread. Returns whether the state changed. Never blocks
        on the network; raises only for a bad field (checked())."""
        new_fields = checked(fields)
        with self._cond:
            new = dict(self._state, **new_fields)
            if new == self._state:
                return False
            self._state = new
            if new["phase"] is None:
                return True  # nothing to send before a phase is known
            if len(self._pending) == self.queue_size:
                self._dropped += 1  # the deque drops the oldest
            self._pending.append(new)
            self._cond.notify()
        return True

    @property
    def state(self) -> State:
        """A copy of the current state."""
        with self._cond:
            return dict(self._state)

    @property
    def pending(self) -> int:
        """States queued, not yet taken by the heartbeat thread (at most queue_size)."""
        with self._cond:
            return len(self._pending)

    @property
    def counts(self) -> Dict[str, int]:
        """{"sent", "failed", "dropped", "errors"} so far (errors: exceptions the heartbeat
        thread caught and outlived)."""
        with self._cond:
            return {"sent": self._sent, "failed": self._failed, "dropped": self._dropped,
                    "errors": self._errors}

    def start(self) -> "Heartbeat":
        """Starts the heartbeat thread (a daemon); no-op while it runs."""
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                return self
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="headroom-heartbeat",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: Optional[float] = None) -> bool:
        """Sends what is queued, then ends the thread; waits at most `timeout_s` (None: the
        request timeout plus STOP_MARGIN_S). Returns whether the thread ended in time (if not,
        it ends after its request: it is a daemon and never keeps the process alive)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
            thread = self._thread
        if thread is None:
            return True
        thread.join(self.timeout_s + STOP_MARGIN_S if timeout_s is None else timeout_s)
        return not thread.is_alive()

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc: Any) -> bool:
        self.stop()
        return False

    # -- the heartbeat thread

    def _run(self) -> None:
        last: Optional[State] = None       # the last state sent
        last_at: Optional[float] = None    # when (time.monotonic)
        while True:
            try:
                with self._cond:
                    while not self._stopping:
                        wait_s = self._due_in_locked(last, last_at)
                        if wait_s is not None and wait_s <= 0:
                            break
                        self._cond.wait(wait_s)
                    batch, stopping = list(self._pending), self._stopping
                    self._pending.clear()
                    current = dict(self._state)
                to_send = _coalesced(batch)
                if not to_send and not stopping and current["phase"] is not None:
                    to_send = [current]  # the period: the state again
                for s in to_send:
                    self._send(s)
                    last, last_at = s, time.monotonic()
                if stopping:
                    return
            except Exception:  # noqa: BLE001 -- the thread never dies: counted, then on
                with self._cond:
                    self._errors += 1
                    if self._stopping:
                        return
                    self._cond.wait(ERROR_WAIT_S)  # no spinning on a repeated one
                last_at = time.monotonic()

    def _due_in_locked(self, last: Optional[State], last_at: Optional[float]) -> Optional[float]:
        """Seconds until the thread has something to send (<= 0: now; None: nothing until
        update() or stop()). REQUIRES: _cond held."""
        now = time.monotonic()
        if self._pending:
            if last_at is None or any(_changes_at_once(last, s) for s in self._pending):
                return 0.0
            return min(last_at + self.min_interval_s, last_at + self.period_s) - now
        if self._state["phase"] is None:
            return None
        return 0.0 if last_at is None else last_at + self.period_s - now

    def _send(self, s: State) -> None:
        try:
            ok = self.client.report(s["step"], s["phase"], s["tokens"], s["in_flight"],
                                    s["progress"], s["group_size"], engines=s["engines"],
                                    admission=s["admission"], timeout_s=self.timeout_s)
        except Exception:  # noqa: BLE001 -- nothing may end the thread or reach the trainer
            ok = False
        with self._cond:
            if ok:
                self._sent += 1
            else:
                self._failed += 1

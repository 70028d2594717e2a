"""AgentClient: the agent's actuation API over HTTP, standard library only.

Thread-safe: one AgentClient may be shared by the training loop, a Heartbeat and a CapFollower.
Its mutable state (the last decision heard and when, the holds honoured, whether the last
request was answered, whether the job is in a site) is guarded by one lock, held only between
requests, never across one: a long-poll on one thread never delays a read on another.
"""

import collections
import itertools
import json
import math
import re
import threading
import time
import urllib.parse
from typing import Any, Callable, Deque, Dict, Optional

from ._http import HttpStatus, exchange

MAX_WAIT_S = 30.0  # the agent's longest long-poll
MAX_HOLD_S = 3600.0  # the longest hold a site may ask before a step
STANDBY_WAIT_S = 1.0  # held until admitted (or until the agent answers): look again this often
HELD_IDS_KEPT = 64  # the holds last honoured, each never returned again (a stale answer's too)
# The bounds on what the agent may answer (the client's own, whatever answers on the port):
DEFAULT_MAX_ANSWER_BYTES = 1 << 20  # an answer's body, at most (a decision is ~200 bytes)
DEFAULT_MAX_VALID_FOR_S = 60.0  # a decision is trusted unheard at most this long
MAX_COUNT = 1000000  # a concurrency or group size above this is not a decision (fallback)
MAX_JSON_DEPTH = 32  # nesting of an answer's JSON, at most (the agent's is 3 deep)
MAX_JSON_INT_DIGITS = 40  # an integer in an answer, at most this many characters

# The phases the agent accepts in a report (src/common/phase.h).
PHASES = ("idle", "startup", "rollout", "logprob", "train", "sync", "checkpoint", "stopped",
          "eval")
# How a trainer admits sequences to its engines (report's `admission`): "continuous", a new one
# as soon as one ends while fewer than the concurrency are in flight (ConcurrencyGate,
# ThreadConcurrencyGate); "chunked", a chunk at a time (batched).
ADMISSIONS = ("continuous", "chunked")

Actuation = Dict[str, Any]  # {"concurrency", "group_size", "seq", "valid_for_s", "reason", ...}

# No request's failure reaches the caller: every public method turns any Exception (the
# network, an HTTP status, an answer that is not JSON or not a decision, past a bound) into its
# fallback. KeyboardInterrupt and SystemExit (BaseException) pass through.

# The nesting check, in linear time at C speed (no backtracking on any input): escapes removed,
# then strings (every '"' left delimits one), then all but brackets; the depth is the running
# sum of the brackets left.
_JSON_ESCAPES = re.compile(r"\\.", re.S)
_JSON_STRINGS = re.compile(r'"[^"]*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _json_int(text: str) -> int:
    if len(text) > MAX_JSON_INT_DIGITS:
        raise ValueError("an integer of %d digits in the answer" % len(text))
    return int(text)


def _loads(text: str) -> Any:
    """json.loads with the nesting bounded (MAX_JSON_DEPTH: checked before parsing, so a
    trainer's high recursion limit never lets the parser overflow the C stack) and integers
    bounded (MAX_JSON_INT_DIGITS). Raises ValueError."""
    brackets = _NOT_BRACKETS.sub("", _JSON_STRINGS.sub("", _JSON_ESCAPES.sub("", text)))
    if brackets and max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets))) \
            > MAX_JSON_DEPTH:
        raise ValueError("the answer's JSON nests deeper than %d" % MAX_JSON_DEPTH)
    return json.loads(text, parse_int=_json_int)


def _count(v: Any, limit: Optional[int]) -> Optional[int]:
    """v as a concurrency or group size, clamped to `limit` (None: none); None when it is not
    one (not an int, below 1, above MAX_COUNT)."""
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_COUNT:
        return None
    return v if limit is None else min(v, limit)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _limit(name: str, v: Optional[int]) -> Optional[int]:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_COUNT:
        raise ValueError("AgentClient: %s must be an int in [1, %d] or None: %r"
                         % (name, MAX_COUNT, v))
    return v


class AgentClient:
    """Reads the agent's decisions (actuation, actuation_for_step), tells it where the trainer
    is (report) and reads its status (status).

    Never raises, never waits or reads without bound: see the package doc for the fallback
    rule. Each request has one deadline for its whole answer (timeout_s, plus the long-poll's
    wait), its body is read up to max_answer_bytes, redirects are not followed (the token goes
    to base_url's host only), and a decision's values are bounded before the trainer sees them:
    concurrency and group size at most max_concurrency and max_group_size (when given; above
    MAX_COUNT the answer is not a decision), valid_for_s at most max_valid_for_s. `clock`
    (seconds, monotonic) times a decision's validity and is injectable for tests; deadlines
    use time.monotonic. Thread-safe (module doc)."""

    def __init__(self, base_url: str = "http://127.0.0.1:10470", token: Optional[str] = None,
                 safe_concurrency: int = 1, safe_group_size: int = 1, timeout_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, site: bool = False, *,
                 max_concurrency: Optional[int] = None, max_group_size: Optional[int] = None,
                 max_valid_for_s: float = DEFAULT_MAX_VALID_FOR_S,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> None:
        """REQUIRES: timeout_s > 0 and max_valid_for_s >= 0 (finite); max_concurrency and
        max_group_size None or in [1, MAX_COUNT]; max_answer_bytes >= 1024. Raises ValueError
        otherwise (configuration, at start-up: the only place the client raises)."""
        if not (_number(timeout_s) and timeout_s > 0):
            raise ValueError("AgentClient: timeout_s must be a finite number > 0: %r"
                             % (timeout_s,))
        if not (_number(max_valid_for_s) and max_valid_for_s >= 0):
            raise ValueError("AgentClient: max_valid_for_s must be a finite number >= 0: %r"
                             % (max_valid_for_s,))
        if not isinstance(max_answer_bytes, int) or max_answer_bytes < 1024:
            raise ValueError("AgentClient: max_answer_bytes must be an int >= 1024: %r"
                             % (max_answer_bytes,))
        # Constant after construction.
        self.base_url = base_url.rstrip("/")
        self._url = urllib.parse.urlsplit(self.base_url)
        self.token = token
        self.max_concurrency = _limit("max_concurrency", max_concurrency)
        self.max_group_size = _limit("max_group_size", max_group_size)
        self.max_valid_for_s = float(max_valid_for_s)
        self.max_answer_bytes = max_answer_bytes
        self.safe = {"concurrency": self._clamped(int(safe_concurrency), self.max_concurrency),
                     "group_size": self._clamped(int(safe_group_size), self.max_group_size)}
        self.timeout_s = float(timeout_s)
        self.clock = clock
        # Guarded by _lock.
        self._lock = threading.Lock()
        self._last: Optional[Actuation] = None  # the last decision heard (bounded)
        self._last_at: Optional[float] = None   # when it was heard (client clock)
        self._reachable: Optional[bool] = None  # did the last request get an answer? (None: none yet)
        self._held_ids: Deque[int] = collections.deque(maxlen=HELD_IDS_KEPT)  # holds honoured
        self._site = bool(site)  # in a site (given, or said by an answer): fail closed unheard

    @staticmethod
    def _clamped(v: int, limit: Optional[int]) -> int:
        return v if limit is None else min(v, limit)

    @property
    def reachable(self) -> Optional[bool]:
        """Whether the last request got an answer (None: none made yet)."""
        with self._lock:
            return self._reachable

    @reachable.setter
    def reachable(self, value: Optional[bool]) -> None:
        with self._lock:
            self._reachable = value

    @property
    def site(self) -> bool:
        """In a site: given, or said by an answer ("site": true). Then the fallback holds."""
        with self._lock:
            return self._site

    @site.setter
    def site(self, value: bool) -> None:
        with self._lock:
            self._site = bool(value)

    def _request(self, path: str, body: Optional[Dict[str, Any]] = None,
                 timeout_s: Optional[float] = None, deadline: Optional[float] = None) -> Any:
        """The JSON of a 2xx answer to one request, within `deadline` (time.monotonic; None:
        now + timeout_s, or the client's). Raises on any failure (_http's and ValueError)."""
        if deadline is None:
            ok = timeout_s is not None and _number(timeout_s) and timeout_s > 0
            deadline = time.monotonic() + (timeout_s if ok else self.timeout_s)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.token:  # on reads too: an agent started with --token-on-reads needs it
            headers["Authorization"] = "Bearer " + self.token
        data = json.dumps(body).encode() if body is not None else None
        target = (self._url.path or "") + path
        answer = exchange(self._url, "POST" if body is not None else "GET", target, headers,
                          data, deadline, self.max_answer_bytes)
        return _loads(answer.decode("utf-8"))

    def actuation(self, wait_s: float = 0.0, *, after: Optional[int] = None) -> Actuation:
        """The decision to apply now (see the package doc for the fallback rule).

        wait_s > 0 long-polls: returns as soon as a decision newer than `after` exists (None:
        the last one this client heard, from any thread), or after wait_s (clamped to
        [0, MAX_WAIT_S]; not finite: 0). A follower sharing the client with other readers
        passes the seq it last applied as `after`, so a decision another thread read first is
        not waited past. Returns within timeout_s + wait_s, whatever the agent sends."""
        try:
            wait_s = float(wait_s)
            wait_s = min(max(wait_s, 0.0), MAX_WAIT_S) if math.isfinite(wait_s) else 0.0
            deadline = time.monotonic() + self.timeout_s + wait_s
            path = "/v1/actuation"
            if wait_s > 0:
                if after is None:
                    with self._lock:
                        after = self._last["seq"] if self._last is not None else None
                if after is not None:
                    path += "?after=%d&timeout_s=%.3f" % (int(after), wait_s)
            return self._heard(self._request(path, deadline=deadline))
        except Exception as e:  # noqa: BLE001 -- nothing reaches the trainer
            return self._unheard(_why(e))

    def actuation_for_step(self, step: int) -> Actuation:
        """The decision for trainer step `step`: the agent fixes its group size and hold
        (hold_s, hold_id) at the first read of that step, and answers the same to every rank
        that asks for it (the answer carries "step": step). The same validation and fallback
        as actuation(); an answer for another step is not a decision. An agent that does not
        know ?step (an older one answers 400) is read with a plain actuation(), within the
        same deadline (timeout_s)."""
        deadline = time.monotonic() + self.timeout_s
        try:
            step = int(step)
            try:
                a = self._request("/v1/actuation?step=%d" % step, deadline=deadline)
            except HttpStatus as e:
                if e.status != 400:
                    raise
                return self._heard(self._request("/v1/actuation", deadline=deadline))
            if isinstance(a, dict) and "step" in a and a["step"] != step:
                raise ValueError("the agent answered step %.40r for step %d"
                                 % (a.get("step"), step))
            return self._heard(a)
        except Exception as e:  # noqa: BLE001 -- nothing reaches the trainer
            return self._unheard(_why(e))

    def _decision(self, a: Any) -> Actuation:
        """The answer as a decision this client applies: a copy with concurrency and group
        size clamped to max_concurrency and max_group_size, valid_for_s to max_valid_for_s.
        Raises ValueError for an answer that is not a decision."""
        if not isinstance(a, dict):
            raise ValueError("the agent's answer is not a decision: %.200r" % (a,))
        concurrency = _count(a.get("concurrency"), self.max_concurrency)
        group_size = _count(a.get("group_size"), self.max_group_size)
        seq, valid_for_s = a.get("seq"), a.get("valid_for_s")
        if (concurrency is None or group_size is None
                or not isinstance(seq, int) or isinstance(seq, bool) or seq < 0
                or not _number(valid_for_s) or valid_for_s < 0):
            raise ValueError("the agent's answer is not a decision: %.200r" % (a,))
        d = dict(a, concurrency=concurrency, group_size=group_size,
                 valid_for_s=min(float(valid_for_s), self.max_valid_for_s))
        clamped = {k: a[k] for k in ("concurrency", "group_size") if d[k] != a[k]}
        if clamped:
            d["clamped"] = clamped  # what the agent asked, above the trainer's limits
        return d

    def _heard(self, answer: Any) -> Actuation:
        """Keeps an answer that is a decision (bounded); raises ValueError for one that is
        not."""
        a = self._decision(answer)
        with self._lock:
            self._last, self._last_at = a, self.clock()
            self._reachable = True
            if a.get("site") is True:
                self._site = True
        return dict(a)

    def _unheard(self, why: str) -> Actuation:
        with self._lock:
            self._reachable = False
            return self._fallback_locked(why)

    def _fallback_locked(self, why: str) -> Actuation:
        # REQUIRES: _lock held. The last decision's valid_for_s is already bounded by
        # max_valid_for_s: past it, the safe values (in a site: the hold).
        if (self._last is not None and self._last_at is not None
                and self.clock() - self._last_at <= self._last["valid_for_s"]):
            return dict(self._last)
        seq = self._last["seq"] if self._last is not None else 0
        if self._site:
            # Fail closed: the site may have given this job's watts away meanwhile.
            return dict(self.safe, seq=seq, valid_for_s=0.0, site=True, standby=True,
                        reason="fallback, held (in a site): " + why)
        return dict(self.safe, seq=seq, valid_for_s=0.0, reason="fallback: " + why)

    def take_hold(self, actuation: Optional[Actuation] = None) -> float:
        """Seconds to wait before starting the next step (docs/SITE.md); call it again after
        the wait, with the actuation read then, until it returns 0 (see the package doc).

        Call at the step boundary with the actuation read there (or none: it is read now).
        While the site has not admitted the job ("standby": true), or, in a site, while the
        agent cannot be heard: STANDBY_WAIT_S every time. A site's staggering: each hold it
        asks for is returned once (by its hold_id, among the last HELD_IDS_KEPT), then 0 --
        once per client, even when several threads ask. Report the phase "idle" while
        waiting. 0 when there is none, or the answer is not a hold. Never raises (an
        actuation that is not a dict: read again)."""
        a = actuation if isinstance(actuation, dict) else self.actuation()
        if a.get("standby") is True:
            return STANDBY_WAIT_S
        hold_s, hold_id = a.get("hold_s"), a.get("hold_id")
        if (not _number(hold_s) or hold_s <= 0 or not isinstance(hold_id, int)
                or isinstance(hold_id, bool) or hold_id == 0):
            return 0.0
        with self._lock:
            if hold_id in self._held_ids:
                return 0.0
            self._held_ids.append(hold_id)
        return min(float(hold_s), MAX_HOLD_S)

    def report(self, step: int, phase: str, tokens: float, in_flight: int,
               progress: Optional[float] = None, group_size: Optional[int] = None, *,
               engines: Optional[int] = None, admission: Optional[str] = None,
               timeout_s: Optional[float] = None) -> bool:
        """Tells the agent where the trainer is (group_size: the one in force this step;
        engines: the rollout engines generating; admission: "continuous" or "chunked", see
        ADMISSIONS). Optional fields are sent only when given. Returns False (never raises)
        when it fails, a field that is not a number included. timeout_s: this request's
        deadline (None: the client's)."""
        try:
            body: Dict[str, Any] = {"step": int(step), "phase": phase, "tokens": float(tokens),
                                    "in_flight": int(in_flight)}
            if progress is not None:
                body["progress"] = float(progress)
            if group_size is not None:
                body["group_size"] = int(group_size)
            if engines is not None:
                body["engines"] = int(engines)
            if admission is not None:
                body["admission"] = str(admission)
            self._request("/v1/report", body, timeout_s=timeout_s)
            return True
        except Exception:  # noqa: BLE001 -- nothing reaches the trainer
            return False

    def status(self, timeout_s: Optional[float] = None) -> Optional[Dict[str, Any]]:
        """The agent's GET /v1/status as a dict (docs/AGENT.md; among its keys `max_hold_s`,
        the longest single hold the agent may ask, and `trainer`: {"state": "reporting",
        "silent" or "never", "last_report_unix_s", "mismatch"}), or None when it cannot be
        read. Never raises; the same bounds as a decision's read (deadline, bytes, depth)."""
        try:
            s = self._request("/v1/status", timeout_s=timeout_s)
        except Exception:  # noqa: BLE001 -- nothing reaches the trainer
            return None
        return s if isinstance(s, dict) else None


def _why(e: BaseException) -> str:
    """A failure as a reason's tail: its kind and message, bounded."""
    text = str(e) or type(e).__name__
    return text if len(text) <= 200 else text[:200] + "..."

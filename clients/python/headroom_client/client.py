"""AgentClient: the agent's actuation API over HTTP, standard library only.

Thread-safe: one AgentClient may be shared by the training loop, a Heartbeat and a CapFollower.
Its mutable state (the last decision heard and when, the holds honoured, whether the last
request was answered, whether the job is in a site) is guarded by one lock, held only between
requests, never across one: a long-poll on one thread never delays a read on another.
"""

import collections
import json
import math
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Deque, Dict, Optional

MAX_WAIT_S = 30.0  # the agent's longest long-poll
MAX_HOLD_S = 3600.0  # the longest hold a site may ask before a step
STANDBY_WAIT_S = 1.0  # held until admitted (or until the agent answers): look again this often
HELD_IDS_KEPT = 64  # the holds last honoured, each never returned again (a stale answer's too)

# The phases the agent accepts in a report (src/common/phase.h).
PHASES = ("idle", "startup", "rollout", "logprob", "train", "sync", "checkpoint", "stopped",
          "eval")
# How a trainer admits sequences to its engines (report's `admission`): "continuous", a new one
# as soon as one ends while fewer than the concurrency are in flight (ConcurrencyGate,
# ThreadConcurrencyGate); "chunked", a chunk at a time (batched).
ADMISSIONS = ("continuous", "chunked")

Actuation = Dict[str, Any]  # {"concurrency", "group_size", "seq", "valid_for_s", "reason", ...}

# What a request may fail with, none of which reaches the caller: no answer, an HTTP error
# (urllib.error.HTTPError is a URLError), not JSON or not a decision (ValueError).
_NETWORK_ERRORS = (urllib.error.URLError, OSError, ValueError)


def _valid(a: Any) -> bool:
    """Whether an answer is a decision this client can apply (anything else: fallback)."""
    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1
    return (isinstance(a, dict) and count(a.get("concurrency")) and count(a.get("group_size"))
            and isinstance(a.get("seq"), int) and a["seq"] >= 0
            and isinstance(a.get("valid_for_s"), (int, float))
            and not isinstance(a.get("valid_for_s"), bool)
            and math.isfinite(a["valid_for_s"]) and a["valid_for_s"] >= 0)


def _is_400(e: BaseException) -> bool:
    return isinstance(e, urllib.error.HTTPError) and e.code == 400


class AgentClient:
    """Reads the agent's decisions (actuation, actuation_for_step), tells it where the trainer
    is (report) and reads its status (status).

    Never raises on network errors or on an answer that is not a decision: see the package doc
    for the fallback rule. `clock` (seconds, monotonic) is injectable for tests. Thread-safe
    (module doc)."""

    def __init__(self, base_url: str = "http://127.0.0.1:10470", token: Optional[str] = None,
                 safe_concurrency: int = 1, safe_group_size: int = 1, timeout_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, site: bool = False) -> None:
        # Constant after construction.
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.safe = {"concurrency": int(safe_concurrency), "group_size": int(safe_group_size)}
        self.timeout_s = timeout_s
        self.clock = clock
        # Guarded by _lock.
        self._lock = threading.Lock()
        self._last: Optional[Actuation] = None  # the last decision heard
        self._last_at: Optional[float] = None   # when it was heard (client clock)
        self._reachable: Optional[bool] = None  # did the last request get an answer? (None: none yet)
        self._held_ids: Deque[int] = collections.deque(maxlen=HELD_IDS_KEPT)  # holds honoured
        self._site = bool(site)  # in a site (given, or said by an answer): fail closed unheard

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
                 timeout_s: Optional[float] = None) -> Any:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.token:  # on reads too: an agent started with --token-on-reads needs it
            headers["Authorization"] = "Bearer " + self.token
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers,
                                     method="POST" if body is not None else "GET")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as r:
                return json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            e.close()  # its socket, now rather than at garbage collection
            raise

    def actuation(self, wait_s: float = 0.0, *, after: Optional[int] = None) -> Actuation:
        """The decision to apply now (see the package doc for the fallback rule).

        wait_s > 0 long-polls: returns as soon as a decision newer than `after` exists (None:
        the last one this client heard, from any thread), or after wait_s (clamped to
        [0, MAX_WAIT_S]; not finite: 0). A follower sharing the client with other readers
        passes the seq it last applied as `after`, so a decision another thread read first is
        not waited past."""
        wait_s = min(max(float(wait_s), 0.0), MAX_WAIT_S) if math.isfinite(wait_s) else 0.0
        path = "/v1/actuation"
        if wait_s > 0:
            if after is None:
                with self._lock:
                    after = self._last["seq"] if self._last is not None else None
            if after is not None:
                path += "?after=%d&timeout_s=%.3f" % (int(after), wait_s)
        try:
            return self._heard(self._request(path, timeout_s=self.timeout_s + wait_s))
        except _NETWORK_ERRORS as e:
            return self._unheard(str(e))

    def actuation_for_step(self, step: int) -> Actuation:
        """The decision for trainer step `step`: the agent fixes its group size and hold
        (hold_s, hold_id) at the first read of that step, and answers the same to every rank
        that asks for it (the answer carries "step": step). The same validation and fallback
        as actuation(); an answer for another step is not a decision. An agent that does not
        know ?step (an older one answers 400) is read with a plain actuation()."""
        step = int(step)
        try:
            a = self._request("/v1/actuation?step=%d" % step)
            if isinstance(a, dict) and "step" in a and a["step"] != step:
                raise ValueError("the agent answered step %r for step %d" % (a.get("step"), step))
            return self._heard(a)
        except _NETWORK_ERRORS as e:
            if _is_400(e):
                return self.actuation()
            return self._unheard(str(e))

    def _heard(self, a: Any) -> Actuation:
        """Keeps an answer that is a decision; raises ValueError for one that is not."""
        if not _valid(a):
            raise ValueError("the agent's answer is not a decision: %.200r" % (a,))
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
        # REQUIRES: _lock held.
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
        """Seconds to wait before starting the next step (docs/FLEET.md); call it again after
        the wait, with the actuation read then, until it returns 0 (see the package doc).

        Call at the step boundary with the actuation read there (or none: it is read now).
        While the site has not admitted the job ("standby": true), or, in a site, while the
        agent cannot be heard: STANDBY_WAIT_S every time. A site's staggering: each hold it
        asks for is returned once (by its hold_id, among the last HELD_IDS_KEPT), then 0 --
        once per client, even when several threads ask. Report the phase "idle" while waiting. 0 when there is none, or
        the answer is not a hold."""
        a = actuation if actuation is not None else self.actuation()
        if a.get("standby") is True:
            return STANDBY_WAIT_S
        hold_s, hold_id = a.get("hold_s"), a.get("hold_id")
        if (not isinstance(hold_s, (int, float)) or isinstance(hold_s, bool)
                or not math.isfinite(hold_s) or hold_s <= 0 or not isinstance(hold_id, int)
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
        when it fails. timeout_s: this request's (None: the client's)."""
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
        try:
            self._request("/v1/report", body, timeout_s=timeout_s)
            return True
        except _NETWORK_ERRORS:
            return False

    def status(self, timeout_s: Optional[float] = None) -> Optional[Dict[str, Any]]:
        """The agent's GET /v1/status as a dict (docs/AGENT.md; among its keys `max_hold_s`,
        the longest single hold the agent may ask, and `trainer`: {"state": "reporting",
        "silent" or "never", "last_report_unix_s", "mismatch"}), or None when it cannot be
        read. Never raises."""
        try:
            s = self._request("/v1/status", timeout_s=timeout_s)
        except _NETWORK_ERRORS:
            return None
        return s if isinstance(s, dict) else None

"""AgentClient: the agent's actuation API over HTTP, standard library only.

Not thread-safe: one AgentClient per thread (it keeps the last decision heard and the last hold
honoured), or calls serialized by the caller.
"""

import json
import math
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Optional

MAX_WAIT_S = 30.0  # the agent's longest long-poll
MAX_HOLD_S = 3600.0  # the longest hold a site may ask before a step
STANDBY_WAIT_S = 1.0  # held until admitted (or until the agent answers): look again this often

Actuation = Dict[str, Any]  # {"concurrency", "group_size", "seq", "valid_for_s", "reason", ...}


def _valid(a: Any) -> bool:
    """Whether an answer is a decision this client can apply (anything else: fallback)."""
    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1
    return (isinstance(a, dict) and count(a.get("concurrency")) and count(a.get("group_size"))
            and isinstance(a.get("seq"), int) and a["seq"] >= 0
            and isinstance(a.get("valid_for_s"), (int, float))
            and not isinstance(a.get("valid_for_s"), bool)
            and math.isfinite(a["valid_for_s"]) and a["valid_for_s"] >= 0)


class AgentClient:
    """Reads the agent's decisions (actuation) and tells it where the trainer is (report).

    Never raises on network errors or on an answer that is not a decision: see the package doc
    for the fallback rule. `clock` (seconds, monotonic) is injectable for tests."""

    def __init__(self, base_url: str = "http://127.0.0.1:10470", token: Optional[str] = None,
                 safe_concurrency: int = 1, safe_group_size: int = 1, timeout_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, site: bool = False) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.safe = {"concurrency": int(safe_concurrency), "group_size": int(safe_group_size)}
        self.timeout_s = timeout_s
        self.clock = clock
        self._last: Optional[Actuation] = None  # the last decision heard
        self._last_at: Optional[float] = None   # when it was heard (client clock)
        # Did the last request get an answer? (None: none made yet)
        self.reachable: Optional[bool] = None
        self._held_id = 0       # the last hold honoured
        # In a site (given, or said by an answer): fail closed when the agent is not heard.
        self.site = bool(site)

    def _request(self, path: str, body: Optional[Dict[str, Any]] = None,
                 timeout_s: Optional[float] = None) -> Any:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.token:  # on reads too: an agent started with --token-on-reads needs it
            headers["Authorization"] = "Bearer " + self.token
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers,
                                     method="POST" if body is not None else "GET")
        with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as r:
            return json.loads(r.read().decode())

    def actuation(self, wait_s: float = 0.0) -> Actuation:
        """The decision to apply now (see the package doc for the fallback rule).

        wait_s > 0 long-polls: returns as soon as a decision newer than the last one heard
        exists, or after wait_s (clamped to [0, MAX_WAIT_S]; not finite: 0)."""
        path = "/v1/actuation"
        wait_s = min(max(float(wait_s), 0.0), MAX_WAIT_S) if math.isfinite(wait_s) else 0.0
        if wait_s > 0 and self._last is not None:
            path += "?after=%d&timeout_s=%.3f" % (self._last["seq"], wait_s)
        try:
            a = self._request(path, timeout_s=self.timeout_s + wait_s)
            if not _valid(a):
                raise ValueError("the agent's answer is not a decision: %.200r" % (a,))
            self._last, self._last_at = a, self.clock()
            self.reachable = True
            if a.get("site") is True:
                self.site = True
            return dict(a)
        except (urllib.error.URLError, OSError, ValueError) as e:
            self.reachable = False
            return self._fallback(str(e))

    def _fallback(self, why: str) -> Actuation:
        if (self._last is not None and self._last_at is not None
                and self.clock() - self._last_at <= self._last["valid_for_s"]):
            return dict(self._last)
        seq = self._last["seq"] if self._last is not None else 0
        if self.site:
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
        asks for is returned once (by its hold_id), then 0. Report the phase "idle" while
        waiting. 0 when there is none, or the answer is not a hold."""
        a = actuation if actuation is not None else self.actuation()
        if a.get("standby") is True:
            return STANDBY_WAIT_S
        hold_s, hold_id = a.get("hold_s"), a.get("hold_id")
        if (not isinstance(hold_s, (int, float)) or isinstance(hold_s, bool)
                or not math.isfinite(hold_s) or hold_s <= 0 or not isinstance(hold_id, int)
                or hold_id == 0 or hold_id == self._held_id):
            return 0.0
        self._held_id = hold_id
        return min(float(hold_s), MAX_HOLD_S)

    def report(self, step: int, phase: str, tokens: float, in_flight: int,
               progress: Optional[float] = None, group_size: Optional[int] = None) -> bool:
        """Tells the agent where the trainer is (group_size: the one in force this step).
        Returns False (never raises) when it fails."""
        body: Dict[str, Any] = {"step": int(step), "phase": phase, "tokens": float(tokens),
                                "in_flight": int(in_flight)}
        if progress is not None:
            body["progress"] = float(progress)
        if group_size is not None:
            body["group_size"] = int(group_size)
        try:
            self._request("/v1/report", body)
            return True
        except (urllib.error.URLError, OSError, ValueError):
            return False

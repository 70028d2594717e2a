"""Client of the headroom agent's actuation API, standard library only (Python 3.8+).

    from headroom_client import AgentClient, ConcurrencyGate
    client = AgentClient("http://127.0.0.1:9400", safe_concurrency=4, safe_group_size=8)
    a = client.actuation()              # {"concurrency", "group_size", "seq", "valid_for_s", "reason"}
    a = client.actuation(wait_s=10)     # long-poll: returns as soon as a newer decision exists
    client.report(step=3, phase="rollout", tokens=12000, in_flight=7)

Never raises on network errors: while the agent does not answer, the last decision is used until
its `valid_for_s` runs out, and then the safe values (reason "fallback: ...") -- except in a site
(the agent's answers say "site": true, or site=True here): there the trainer fails closed, and
the fallback holds it at its step boundary (take_hold) until the agent answers again.

At each step boundary, a trainer takes its holds (a site staggering its jobs, or not admitting
one yet) before it starts the step:

    a = client.actuation()
    while (hold := client.take_hold(a)) > 0:
        client.report(step, "idle", tokens, 0)
        time.sleep(hold)
        a = client.actuation()
"""

import asyncio
import json
import math
import time
import urllib.error
import urllib.request

MAX_WAIT_S = 30.0  # the agent's longest long-poll
MAX_HOLD_S = 3600.0  # the longest hold a site may ask before a step
STANDBY_WAIT_S = 1.0  # held until admitted (or until the agent answers): look again this often


def _valid(a):
    """Whether an answer is a decision this client can apply (anything else: fallback)."""
    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1
    return (isinstance(a, dict) and count(a.get("concurrency")) and count(a.get("group_size"))
            and isinstance(a.get("seq"), int) and a["seq"] >= 0
            and isinstance(a.get("valid_for_s"), (int, float))
            and not isinstance(a.get("valid_for_s"), bool)
            and math.isfinite(a["valid_for_s"]) and a["valid_for_s"] >= 0)


class AgentClient:
    def __init__(self, base_url="http://127.0.0.1:9400", token=None, safe_concurrency=1,
                 safe_group_size=1, timeout_s=2.0, clock=time.monotonic, site=False):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.safe = {"concurrency": int(safe_concurrency), "group_size": int(safe_group_size)}
        self.timeout_s = timeout_s
        self.clock = clock
        self._last = None       # the last decision heard
        self._last_at = None    # when it was heard (client clock)
        self.reachable = None   # did the last request get an answer? (None: none made yet)
        self._held_id = 0       # the last hold honoured
        # In a site (given, or said by an answer): fail closed when the agent is not heard.
        self.site = bool(site)

    def _request(self, path, body=None, timeout_s=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.token:  # on reads too: an agent started with --token-on-reads needs it
            headers["Authorization"] = "Bearer " + self.token
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers,
                                     method="POST" if body is not None else "GET")
        with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as r:
            return json.loads(r.read().decode())

    def actuation(self, wait_s=0.0):
        """The decision to apply now (see the module doc for the fallback rule)."""
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

    def _fallback(self, why):
        if self._last is not None and self.clock() - self._last_at <= self._last["valid_for_s"]:
            return dict(self._last)
        seq = self._last["seq"] if self._last is not None else 0
        if self.site:
            # Fail closed: the site may have given this job's watts away meanwhile.
            return dict(self.safe, seq=seq, valid_for_s=0.0, site=True, standby=True,
                        reason="fallback, held (in a site): " + why)
        return dict(self.safe, seq=seq, valid_for_s=0.0, reason="fallback: " + why)

    def take_hold(self, actuation=None):
        """Seconds to wait before starting the next step (docs/FLEET.md); call it again after
        the wait, with the actuation read then, until it returns 0 (see the module doc).

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

    def report(self, step, phase, tokens, in_flight, progress=None, group_size=None):
        """Tells the agent where the trainer is (group_size: the one in force this step).
        Returns False (never raises) when it fails."""
        body = {"step": int(step), "phase": phase, "tokens": float(tokens),
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


class ConcurrencyGate:
    """An asyncio gate whose limit can be changed while tasks wait: generation requests enter
    with `async with gate:`, and `resize(n)` lets more in at once or stops admitting until the
    number in flight falls below n (requests already running are never interrupted)."""

    def __init__(self, limit):
        self._limit = max(1, int(limit))
        self._in_flight = 0
        self._cond = asyncio.Condition()

    @property
    def limit(self):
        return self._limit

    @property
    def in_flight(self):
        return self._in_flight

    async def resize(self, limit):
        async with self._cond:
            self._limit = max(1, int(limit))
            self._cond.notify_all()

    async def __aenter__(self):
        async with self._cond:
            await self._cond.wait_for(lambda: self._in_flight < self._limit)
            self._in_flight += 1
        return self

    async def __aexit__(self, *exc):
        async with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()
        return False

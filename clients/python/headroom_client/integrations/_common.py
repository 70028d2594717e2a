"""What the trainer integrations share: the cap one engine runs under, a gate that counts what
the reports need, the callback that reports the trainer's own group size, and the rollout's
reports.

Standard library only; nothing here imports a trainer, vLLM, Ray or torch.
"""

import asyncio
import numbers
import threading
import time
from typing import Any, Callable, Dict, Optional

from ..adapters import HeadroomCallback
from ..client import Actuation, AgentClient
from ..gates import ConcurrencyGate

ADMISSION = "continuous"       # every integration here admits a sequence as soon as one ends
DEFAULT_POLL_PERIOD_S = 0.5    # a driver reads its engines' gates this often while they run
DEFAULT_REPORT_INTERVAL_S = 0.1  # a refill loop hands the callback its counters at most this often


def concurrency_of(a: Actuation) -> int:
    """A decision's concurrency as a cap: an integer >= 1 (anything else: 1)."""
    v = a.get("concurrency") if isinstance(a, dict) else None
    if isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1:
        return int(v)
    return 1


class Cap:
    """The number of sequences one engine may have in flight, resized by a CapFollower from its
    thread and read by the engine's loop before each step. Thread-safe (one condition)."""

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._limit = max(1, int(limit))  # guarded by _cond

    @property
    def limit(self) -> int:
        with self._cond:
            return self._limit

    def resize(self, limit: int) -> None:
        with self._cond:
            self._limit = max(1, int(limit))
            self._cond.notify_all()

    resize_threadsafe = resize  # CapFollower's name for it

    def wait_for_limit(self, limit: int, timeout_s: float) -> bool:
        """Waits until the limit is `limit` (monitoring and tests). Returns whether it is."""
        with self._cond:
            return self._cond.wait_for(lambda: self._limit == limit, timeout_s)


class CountingGate:
    """A ConcurrencyGate (one event loop, as it) that also counts, for the reports: sequences
    waiting to be admitted, admitted, finished. `async with gate:` around one sequence's
    request. resize_threadsafe(n) from any thread (a CapFollower's)."""

    def __init__(self, limit: int) -> None:
        self.gate = ConcurrencyGate(limit)
        # Written on the gate's loop only; read from any thread as plain ints.
        self.waiting = 0
        self.admitted = 0
        self.finished = 0
        self._changed: Optional[asyncio.Condition] = None  # created on the loop, lazily

    @property
    def limit(self) -> int:
        return self.gate.limit

    @property
    def in_flight(self) -> int:
        return self.gate.in_flight

    async def __aenter__(self) -> "CountingGate":
        self.waiting += 1
        try:
            await self.gate.__aenter__()
        finally:
            self.waiting -= 1
        self.admitted += 1
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        self.finished += 1
        await self.gate.__aexit__(*exc)
        return False

    def set_limit(self, limit: int) -> None:
        """On the gate's loop: the limit from now on (admits waiters at once when raised)."""
        self.gate.set_limit(limit)
        if self._changed is not None:
            asyncio.ensure_future(self._notify())

    def resize_threadsafe(self, limit: int, loop: Optional[asyncio.AbstractEventLoop] = None
                          ) -> None:
        loop = loop or self.gate._loop  # noqa: SLF001 -- the loop the gate is bound to
        if loop is None:
            self.gate.set_limit(limit)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.set_limit(limit)
        else:
            try:
                loop.call_soon_threadsafe(self.set_limit, limit)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait_limit(self, limit: int) -> None:
        """On the gate's loop: waits until the limit is `limit` (monitoring and tests)."""
        await self.wait_until(lambda n: n == limit)

    async def wait_until(self, predicate: Callable[[int], bool]) -> None:
        """On the gate's loop: waits until predicate(limit), tested now and at every resize."""
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self.gate.limit))

    def counts(self) -> Dict[str, int]:
        """{"limit", "in_flight", "waiting", "admitted", "finished"} now (from any thread; each
        field read once, so the set may straddle an admission)."""
        return {"limit": self.gate.limit, "in_flight": self.gate.in_flight,
                "waiting": self.waiting, "admitted": self.admitted, "finished": self.finished}


class TrainerGroupCallback(HeadroomCallback):  # type: ignore[misc]
    """HeadroomCallback that reports the trainer's own group size: TRL's num_generations,
    verl's rollout.n, OpenRLHF's n_samples_per_prompt are fixed for the run, so the group size in
    force at every step is the trainer's, whatever the agent decided (the agent compares the
    two: its `group_size` mismatch). Reports go through a Heartbeat (heartbeat=True by default),
    so a refill loop's updates never wait on the network."""

    def __init__(self, client: AgentClient, group_size: int, *, heartbeat: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(client, heartbeat=heartbeat, **kwargs)
        self.trainer_group_size = int(group_size)  # constant after construction
        self.group_size = self.trainer_group_size

    def on_step_begin(self, *args: Any, **kwargs: Any) -> Any:
        out = super().on_step_begin(*args, **kwargs)
        self.group_size = self.trainer_group_size  # the decision's is not applied: the run's
        return out


class RolloutReporter:
    """Hands a rollout's counters to the callback (on_phase("rollout", ...)) with the engines
    and the admission, at most every `interval_s` unless `force` (the first and last call).
    progress: the fraction of the rollout's sequences finished (None when the total is not
    known). Thread-safe."""

    def __init__(self, callback: HeadroomCallback, engines: int, *,
                 interval_s: float = DEFAULT_REPORT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.callback = callback
        self.engines = max(1, int(engines))
        self.interval_s = float(interval_s)
        self.clock = clock
        self._lock = threading.Lock()
        self._last: Optional[tuple] = None      # guarded by _lock: (in_flight, progress)
        self._last_at: Optional[float] = None   # guarded by _lock

    def update(self, in_flight: int, finished: int, total: Optional[int],
               force: bool = False) -> None:
        progress = (min(1.0, finished / total) if total else None)
        now = self.clock()
        with self._lock:
            if (in_flight, progress) == self._last:
                return
            if not force and self._last_at is not None and now - self._last_at < self.interval_s:
                return
            self._last, self._last_at = (in_flight, progress), now
        self.callback.on_phase("rollout", in_flight=in_flight, progress=progress,
                               engines=self.engines, admission=ADMISSION)


class Poller:
    """A thread that calls `poll()` every `period_s` until stop() (a driver reading its engines'
    gates while a rollout runs). A failing poll is skipped, never raised."""

    def __init__(self, poll: Callable[[], Any], period_s: float = DEFAULT_POLL_PERIOD_S) -> None:
        self.poll = poll
        self.period_s = float(period_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="headroom-rollout-poller",
                                        daemon=True)

    def __enter__(self) -> "Poller":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self._stop.set()
        self._thread.join()
        return False

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 -- a report missed, never the rollout
                pass


def undecorated(cls: Any) -> Any:
    """The class behind a Ray actor class (`@ray.remote class X`), to subclass it; a plain class
    as it is. Ray keeps it in `__ray_metadata__.modified_class`."""
    meta = getattr(cls, "__ray_metadata__", None)
    return getattr(meta, "modified_class", None) or cls

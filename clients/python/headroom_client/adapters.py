"""Adapters between the agent's decisions and a trainer's loop.

- batched: a batched generate call, split into chunks the current concurrency allows;
- ConcurrencyGate: the same for an async engine, one request at a time (asyncio);
- rank0_actuation: one rank reads the agent, every rank of a torch.distributed group gets it;
- HeadroomCallback: step boundaries (holds, group size) and phase reports in the shape of an
  HF-style trainer callback.

Standard library only: torch is never imported here; a torch.distributed process group is
used where the trainer has initialized one.
"""

import asyncio
import itertools
import numbers
import sys
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, TypeVar, Union

from .client import Actuation, AgentClient

T = TypeVar("T")

# The phases the agent accepts in a report (src/common/phase.h).
PHASES = ("idle", "startup", "rollout", "logprob", "train", "sync", "checkpoint", "stopped")


def _count(v: Any) -> int:
    """v as a concurrency: an integer >= 1, anything else (bool, float, None, 0, < 0) is 1."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1:
        return int(v)
    return 1


def batched(items: Iterable[T],
            concurrency: Union[int, Callable[[], Any]]) -> Iterator[List[T]]:
    """Splits `items` into consecutive chunks of at most the current concurrency.

    concurrency: an int, or a callable with no arguments returning the current one (e.g.
    `callback.concurrency`), called again before each chunk, so a change during the call
    applies from the next chunk. A value that is not an int >= 1 counts as 1. Items keep their
    order and each is in exactly one chunk; `items` is consumed lazily, a chunk at a time.

        for chunk in batched(prompts, callback.concurrency):
            outputs += llm.generate(chunk)
    """
    it = iter(items)
    for first in it:  # the concurrency is read once per chunk, after its first item
        n = _count(concurrency() if callable(concurrency) else concurrency)
        chunk = [first]
        chunk.extend(itertools.islice(it, n - 1))
        yield chunk


class ConcurrencyGate:
    """An asyncio gate whose limit can be changed while tasks wait: generation requests enter
    with `async with gate:`, and `resize(n)` lets more in at once or stops admitting until the
    number in flight falls below n (requests already running are never interrupted)."""

    def __init__(self, limit: int) -> None:
        self._limit = max(1, int(limit))
        self._in_flight = 0
        self._cond = asyncio.Condition()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def resize(self, limit: int) -> None:
        async with self._cond:
            self._limit = max(1, int(limit))
            self._cond.notify_all()

    async def __aenter__(self) -> "ConcurrencyGate":
        async with self._cond:
            await self._cond.wait_for(lambda: self._in_flight < self._limit)
            self._in_flight += 1
        return self

    async def __aexit__(self, *exc: Any) -> bool:
        async with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()
        return False


def _distributed() -> Any:
    """torch.distributed when a process group is initialized, else None (torch not installed,
    not imported, built without distributed, or no process group).

    Never imports torch: a process group exists only in a process that has imported
    torch.distributed, so a trainer without one pays no import (seconds for torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _leads(dist: Any, group: Any) -> bool:
    """Whether this process talks to the agent: no process group, or rank 0 of `group`."""
    return dist is None or dist.get_rank(group) == 0


def _from_rank0(dist: Any, group: Any, value: Optional[Actuation]) -> Actuation:
    """Broadcasts rank 0's value (of `group`; None: the world) to every rank of the group."""
    if group is None or group is dist.group.WORLD:
        src = 0
    elif hasattr(dist, "get_global_rank"):
        src = dist.get_global_rank(group, 0)
    else:  # torch < 2.0
        src = dist.distributed_c10d._get_global_rank(group, 0)
    box = [value]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


def _read(client: Optional[AgentClient], wait_s: float) -> Actuation:
    if client is None:
        raise ValueError("the rank that reads the agent (rank 0 of the group) needs a client")
    return client.actuation(wait_s)


def rank0_actuation(client: Optional[AgentClient], group: Any = None,
                    wait_s: float = 0.0) -> Actuation:
    """The agent's decision, read once by rank 0 of `group` and given to every rank of it.

    Collective: every rank of `group` (a torch.distributed process group; None: the world)
    calls it. Rank 0 calls `client.actuation(wait_s)` and broadcasts the answer
    (broadcast_object_list); the other ranks may pass client=None and never talk to the agent.
    Without torch, or without an initialized process group: `client.actuation(wait_s)`.
    With NCCL, set each rank's CUDA device first (torch.cuda.set_device), as for any object
    collective."""
    dist = _distributed()
    if dist is None:
        return _read(client, wait_s)
    return _from_rank0(dist, group, _read(client, wait_s) if _leads(dist, group) else None)


class HeadroomCallback:
    """Step boundaries and phase reports for a training loop, in the shape of an HF-style
    trainer callback (transformers.TrainerCallback: `on_step_begin(args, state, control)`,
    `state.global_step`) without depending on transformers.

        cb = HeadroomCallback(AgentClient("http://127.0.0.1:10470", safe_group_size=8))
        for step in range(steps):
            a = cb.on_step_begin(step=step, tokens=tokens)   # holds taken here, every rank
            cb.on_phase("rollout")
            for chunk in batched(prompts, cb.concurrency):
                ...                                          # cb.group_size completions each
            cb.on_phase("train", tokens=tokens)

    Multi-rank (torch.distributed initialized): every rank of `group` (None: the world) calls
    on_step_begin and refresh (collectives); only rank 0 talks to the agent, so the others may
    pass client=None. A site's holds are taken by rank 0 before the broadcast, so they hold
    every rank. Called by an HF-style trainer (a `control` passed in), the step methods return
    that control unchanged, as such trainers take any other value as the new control; events
    this class does not handle (on_train_begin, on_log, ...) are no-ops.

    Not thread-safe: call it from the training loop's thread.
    """

    def __init__(self, client: Optional[AgentClient], group: Any = None, *,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        # Constant after construction.
        self.client = client
        self.group = group
        self._sleep = sleep
        # The training loop's state.
        self.actuation: Optional[Actuation] = None  # the latest decision (step boundary/refresh)
        self.group_size: Optional[int] = None  # in force this step; set at the step boundary
        self.step = 0       # the step under way
        self.tokens: float = 0  # the last token count given (tokens=), reported with each phase
        self._next_step = 0  # the step number when neither step= nor state.global_step says

    def on_step_begin(self, args: Any = None, state: Any = None, control: Any = None, *,
                      step: Optional[int] = None, tokens: Optional[float] = None,
                      **kwargs: Any) -> Any:
        """The step boundary: reads the decision, waits the site's holds (rank 0, reporting
        "idle"; every rank waits in the broadcast), and fixes the group size for the step.

        The step number: `step`, else `state.global_step`, else one more than the last.
        Returns the decision (also in self.actuation), or `control` when one is passed in."""
        if tokens is not None:
            self.tokens = tokens
        if step is None:
            step = getattr(state, "global_step", None)
        self.step = int(step) if step is not None else self._next_step
        self._next_step = self.step + 1

        dist = _distributed()
        a: Optional[Actuation] = None
        if _leads(dist, self.group):
            client = self._lead_client()
            a = client.actuation()
            while (hold_s := client.take_hold(a)) > 0:
                client.report(self.step, "idle", self.tokens, 0)
                self._sleep(hold_s)
                a = client.actuation()
        if dist is not None:
            a = _from_rank0(dist, self.group, a)
        assert a is not None
        self.actuation = a
        self.group_size = int(a["group_size"])
        return control if control is not None else a

    def on_phase(self, phase: str, *, tokens: Optional[float] = None, in_flight: int = 0,
                 progress: Optional[float] = None) -> Optional[bool]:
        """Reports a phase of the current step (rank 0; the other ranks do nothing), with the
        group size in force. Returns whether the agent took the report (None on other ranks).

        Raises ValueError for a phase the agent does not know (on every rank)."""
        if phase not in PHASES:
            raise ValueError("unknown phase %r: one of %s" % (phase, ", ".join(PHASES)))
        if tokens is not None:
            self.tokens = tokens
        if not _leads(_distributed(), self.group):
            return None
        return self._lead_client().report(self.step, phase, self.tokens, in_flight, progress,
                                          group_size=self.group_size)

    def on_step_end(self, args: Any = None, state: Any = None, control: Any = None, *,
                    tokens: Optional[float] = None, **kwargs: Any) -> Any:
        """Keeps the token count for later reports; reports nothing (the next on_step_begin is
        the boundary). Returns `control` (None when not given)."""
        if tokens is not None:
            self.tokens = tokens
        return control

    def concurrency(self) -> int:
        """The latest decision's concurrency (1 before the first on_step_begin or refresh)."""
        return _count(self.actuation.get("concurrency")) if self.actuation is not None else 1

    def refresh(self, wait_s: float = 0.0) -> Actuation:
        """Reads the decision again within a step, taking no hold: the concurrency may change
        now, the group size (self.group_size) only at the next step boundary. Collective in
        multi-rank, as rank0_actuation (wait_s > 0: rank 0 long-polls, the others wait)."""
        self.actuation = rank0_actuation(self.client, self.group, wait_s)
        return self.actuation

    def _lead_client(self) -> AgentClient:
        if self.client is None:
            raise ValueError("the rank that reads the agent (rank 0 of the group) needs a client")
        return self.client

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # The events of an HF-style trainer this class does not handle: no-ops returning
        # None (such a trainer then keeps its control).
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError("%s has no attribute %r" % (type(self).__name__, name))

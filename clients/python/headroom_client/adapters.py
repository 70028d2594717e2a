"""Adapters between the agent's decisions and a trainer's loop.

- batched: a batched generate call, split into chunks the current concurrency allows. Only for
  engines with no per-request API: a chunk waits for its longest sequence, so with long-tailed
  lengths the number in flight decays inside each chunk (occupancy below the cap). Prefer a gate.
- ConcurrencyGate / ThreadConcurrencyGate and CapFollower (gates.py): continuous admission, a
  new sequence as soon as one ends while fewer than the concurrency are in flight, the gates
  resized by a follower thread that long-polls the agent.
- Heartbeat (heartbeat.py): the trainer's state re-sent from a background thread.
- rank0_actuation: a collective in which one rank reads the agent and every rank of a
  torch.distributed group gets its decision (for trainers that want it; HeadroomCallback does
  not use it).
- HeadroomCallback: step boundaries (holds, group size, read by every rank for its step) and
  phase reports, a transformers.TrainerCallback when transformers is already imported.

Standard library only: torch and transformers are never imported here; a torch.distributed
process group, and transformers' TrainerCallback, are used where the trainer has imported them.
"""

import datetime
import itertools
import math
import numbers
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple, TypeVar, Union

from .client import ADMISSIONS, PHASES, Actuation, AgentClient
from .gates import CapFollower, ConcurrencyGate, ThreadConcurrencyGate
from .heartbeat import DEFAULT_PERIOD_S, Heartbeat

__all__ = ["batched", "ConcurrencyGate", "ThreadConcurrencyGate", "CapFollower", "Heartbeat",
           "rank0_actuation", "HeadroomCallback", "CollectiveTimeoutError", "collective_timeout",
           "PHASES"]

T = TypeVar("T")


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

    Only for engines with no per-request API (one blocking generate call per batch): each
    chunk waits for its longest sequence, so with long-tailed lengths the number in flight
    decays inside the chunk and the engine runs below the agent's concurrency for most of it.
    An engine that takes requests one at a time is better served by a gate
    (ConcurrencyGate, ThreadConcurrencyGate): it stays at the cap while work remains.
    """
    it = iter(items)
    for first in it:  # the concurrency is read once per chunk, after its first item
        n = _count(concurrency() if callable(concurrency) else concurrency)
        chunk = [first]
        chunk.extend(itertools.islice(it, n - 1))
        yield chunk


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
    collective.

    A collective for trainers that want one: while rank 0 waits for the agent (a long-poll),
    the others wait in the broadcast, so never take a hold (take_hold) around it -- a hold
    inside a collective is bounded by the collective's timeout. HeadroomCallback does not use
    it: each rank reads the agent itself (actuation_for_step)."""
    dist = _distributed()
    if dist is None:
        return _read(client, wait_s)
    return _from_rank0(dist, group, _read(client, wait_s) if _leads(dist, group) else None)


# -- HeadroomCallback

TOKEN_LOG_KEYS = ("num_tokens", "num_input_tokens_seen")  # on_log: TRL's, then transformers'


class CollectiveTimeoutError(ValueError):
    """The agent may hold a step longer than the trainer's collectives wait for a peer: one
    rank held at its boundary while another waits in a collective would time the run out.
    Raised at start (HeadroomCallback.on_train_begin, check_collective_timeout), one line
    naming both numbers and the two ways out."""


def _trainer_callback_base() -> type:
    """transformers.TrainerCallback when the trainer has already imported transformers, else
    object. Never imports transformers (seconds, and not a dependency of this package)."""
    tf = sys.modules.get("transformers")
    try:
        base = getattr(tf, "TrainerCallback", None) if tf is not None else None
    except Exception:  # noqa: BLE001 -- a lazy module whose import fails: no base
        base = None
    return base if isinstance(base, type) else object


def _seconds(v: Any) -> Optional[float]:
    """A timeout as seconds: a number or a datetime.timedelta; None for anything else."""
    if isinstance(v, datetime.timedelta):
        v = v.total_seconds()
    if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
        return float(v)
    return None


def _torch_default_timeout(dist: Any) -> Optional[Tuple[float, str, str]]:
    """torch.distributed's default process-group timeout for the default group's backend
    (torch.distributed.constants: default_pg_nccl_timeout for NCCL where torch has one, else
    default_pg_timeout). torch does not expose a group's own timeout publicly: a trainer that
    passed init_process_group(timeout=...) passes the same as collective_timeout_s."""
    constants = getattr(dist, "constants", None) or sys.modules.get("torch.distributed.constants")
    try:
        backend = str(dist.get_backend())
    except Exception:  # noqa: BLE001 -- no default group
        backend = "?"
    t = None
    if "nccl" in backend.lower():
        t = _seconds(getattr(constants, "default_pg_nccl_timeout", None))
    if t is None:
        t = _seconds(getattr(constants, "default_pg_timeout", None))
    if t is None:
        return None
    return (t, "torch.distributed's default for %s" % backend, "init_process_group's timeout")


def collective_timeout(timeout_s: Any = None, args: Any = None
                       ) -> Optional[Tuple[float, str, str]]:
    """(seconds, where it was read, what to raise) of the trainer's collective timeout, or
    None where ranks do not wait for each other (or nothing says how long they would).

    In order: `timeout_s` (seconds or a timedelta: the caller's word); transformers'
    `args.ddp_timeout` (seconds; transformers' default 1800) when more than one process runs
    (a torch.distributed process group is initialized, or `args.world_size` > 1); torch's
    default process-group timeout for the backend when a group is initialized."""
    t = _seconds(timeout_s)
    if t is not None:
        return (t, "timeout_s", "the collective timeout")
    dist = _distributed()
    try:  # transformers' TrainingArguments.world_size: a property over accelerate's state
        world = getattr(args, "world_size", None) if args is not None else None
    except Exception:  # noqa: BLE001 -- unknown: taken as one process
        world = None
    several = dist is not None or (isinstance(world, int) and world > 1)
    t = _seconds(getattr(args, "ddp_timeout", None)) if args is not None else None
    if t is not None and several:
        return (t, "ddp_timeout", "ddp_timeout")
    return _torch_default_timeout(dist) if dist is not None else None


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class HeadroomCallback(_trainer_callback_base()):  # type: ignore[misc]
    """Step boundaries and phase reports for a training loop, as a transformers
    TrainerCallback (its subclass when transformers is imported before headroom_client; the
    same events either way, and transformers' CallbackHandler needs no base class):

        cb = HeadroomCallback(AgentClient("http://127.0.0.1:10470", safe_group_size=8))
        cb.on_train_begin()                                  # startup; the timeout check
        for step in range(steps):
            a = cb.on_step_begin(step=step, tokens=tokens)   # holds taken here, every rank
            cb.on_phase("rollout", in_flight=0, admission="continuous")
            for chunk in batched(prompts, cb.concurrency):
                ...                                          # cb.group_size completions each
            cb.on_phase("train", tokens=tokens)
        cb.on_train_end()                                    # stopped

    Every rank reads the agent itself: each rank has its own AgentClient (client=None is
    refused) and nothing here is a collective. At its step boundary a rank reads the decision
    for that step (AgentClient.actuation_for_step): the agent fixes its group size and hold at
    the first read of the step, so every rank gets the same ones and takes the same hold at
    its own boundary, between collectives, never inside one. A rank that cannot hear the agent
    runs on its client's fallback (the last decision while valid, then the safe values; in a
    site, held): give every rank the same safe values. Reports (idle while held, phases) come
    from one rank per group: rank 0 of `group` (None: the world), or this process without a
    torch.distributed process group.

    A hold must end before a rank that was not held (one that could not hear the agent) times
    out waiting in the next collective: at start (on_train_begin, or
    check_collective_timeout) the agent's /v1/status `max_hold_s` is compared with the
    collective timeout (collective_timeout()) and CollectiveTimeoutError raised when the hold
    may be as long. An agent not heard at start is a warning line on stderr, never a refusal.

    heartbeat=True: reports go through a Heartbeat (a background thread re-sending the phase
    every heartbeat_period_s while it lasts; on_phase then never waits on the network).

    Called by an HF-style trainer (a `control` passed in), on_step_begin and on_step_end
    return that control unchanged, the other events None (such a trainer keeps its control);
    events this class does not handle are no-ops. Thread-safe: one lock guards its state,
    never held across a request or a hold.
    """

    def __init__(self, client: AgentClient, group: Any = None, *,
                 sleep: Callable[[float], Any] = time.sleep, heartbeat: bool = False,
                 heartbeat_period_s: float = DEFAULT_PERIOD_S,
                 collective_timeout_s: Any = None) -> None:
        if client is None:
            raise ValueError("headroom: HeadroomCallback needs an AgentClient on every rank "
                             "(each rank reads the agent itself; none is a collective)")
        # Constant after construction.
        self.client = client
        self.group = group
        self.collective_timeout_s = collective_timeout_s
        self._sleep = sleep
        self._heartbeat: Optional[Heartbeat] = (Heartbeat(client, heartbeat_period_s)
                                                if heartbeat else None)  # started lazily
        # Guarded by _lock (the public ones may be read without it: one assignment each).
        self._lock = threading.Lock()
        self.actuation: Optional[Actuation] = None  # the latest decision (step boundary/refresh)
        self.group_size: Optional[int] = None  # in force this step; set at the step boundary
        self.step = 0       # the step under way
        self.tokens: float = 0  # the last token count given, reported with each phase
        self.engines: Optional[int] = None     # the last given to on_phase, reported after
        self.admission: Optional[str] = None   # the same
        self.phase: Optional[str] = None       # the last phase reported (by this rank)
        self._next_step = 0  # the step number when neither step= nor state.global_step says
        self._heartbeat_on = False  # started at the reporting rank's first report

    # -- the step boundary

    def on_step_begin(self, args: Any = None, state: Any = None, control: Any = None, *,
                      step: Optional[int] = None, tokens: Optional[float] = None,
                      **kwargs: Any) -> Any:
        """The step boundary: reads the decision for this step, waits its holds (reporting
        "idle" from the reporting rank), and fixes the group size for the step.

        The step number: `step`, else `state.global_step`, else one more than the last.
        Returns the decision (also in self.actuation), or `control` when one is passed in."""
        if step is None:
            step = getattr(state, "global_step", None)
        with self._lock:
            if tokens is not None:
                self.tokens = tokens
            self.step = int(step) if step is not None else self._next_step
            self._next_step = self.step + 1
            this_step = self.step
        a = self.client.actuation_for_step(this_step)
        while (hold_s := self.client.take_hold(a)) > 0:
            self._report("idle")
            self._sleep(hold_s)
            a = self.client.actuation_for_step(this_step)
        with self._lock:
            self.actuation = a
            self.group_size = int(a["group_size"])
        return control if control is not None else a

    def on_step_end(self, args: Any = None, state: Any = None, control: Any = None, *,
                    tokens: Optional[float] = None, **kwargs: Any) -> Any:
        """Keeps the token count for later reports. An HF trainer's control saying that an
        evaluation or a checkpoint follows: reports "eval" or "checkpoint" (they run before
        the next step boundary). Returns `control` (None when not given)."""
        if tokens is not None:
            with self._lock:
                self.tokens = tokens
        if getattr(control, "should_evaluate", False) is True:
            self._report("eval")
        elif getattr(control, "should_save", False) is True:
            self._report("checkpoint")
        return control

    def concurrency(self) -> int:
        """The latest decision's concurrency (1 before the first on_step_begin or refresh)."""
        with self._lock:
            a = self.actuation
        return _count(a.get("concurrency")) if a is not None else 1

    def refresh(self, wait_s: float = 0.0) -> Actuation:
        """Reads the decision again within a step, taking no hold: the concurrency may change
        now, the group size (self.group_size) only at the next step boundary. This rank only
        (not a collective; wait_s > 0 long-polls)."""
        a = self.client.actuation(wait_s)
        with self._lock:
            self.actuation = a
        return a

    # -- phases

    def on_phase(self, phase: str, *, tokens: Optional[float] = None, in_flight: int = 0,
                 progress: Optional[float] = None, engines: Optional[int] = None,
                 admission: Optional[str] = None) -> Optional[bool]:
        """Reports a phase of the current step (from the reporting rank; the others do
        nothing), with the group size in force. tokens, engines and admission ("continuous" or
        "chunked") are kept for later reports; in_flight and progress are this report's.
        Returns whether the agent took the report (with a heartbeat: True, handed to it; None
        on the other ranks).

        Raises ValueError for a phase or admission the agent does not know (on every rank)."""
        if phase not in PHASES:
            raise ValueError("unknown phase %r: one of %s" % (phase, ", ".join(PHASES)))
        if admission is not None and admission not in ADMISSIONS:
            raise ValueError("unknown admission %r: one of %s" %
                             (admission, ", ".join(ADMISSIONS)))
        with self._lock:
            if tokens is not None:
                self.tokens = tokens
            if engines is not None:
                self.engines = int(engines)
            if admission is not None:
                self.admission = admission
        return self._report(phase, in_flight, progress)

    def _reports(self) -> bool:
        """Whether this process reports: no process group, or rank 0 of the group."""
        return _leads(_distributed(), self.group)

    def _report(self, phase: str, in_flight: int = 0,
                progress: Optional[float] = None) -> Optional[bool]:
        if not self._reports():
            return None
        with self._lock:
            self.phase = phase
            fields = dict(step=self.step, phase=phase, tokens=self.tokens, in_flight=in_flight,
                          progress=progress, group_size=self.group_size,
                          engines=self.engines, admission=self.admission)
            hb = self._heartbeat_locked()
        if hb is not None:
            hb.update(**fields)
            return True
        return self.client.report(fields["step"], phase, fields["tokens"], in_flight, progress,
                                  group_size=fields["group_size"], engines=fields["engines"],
                                  admission=fields["admission"])

    def _heartbeat_locked(self) -> Optional[Heartbeat]:
        # REQUIRES: _lock held.
        if self._heartbeat is not None and not self._heartbeat_on:
            self._heartbeat.start()
            self._heartbeat_on = True
        return self._heartbeat

    def _report_once(self, phase: str) -> None:
        """Reports `phase` unless it is the last one reported (an event called per batch)."""
        with self._lock:
            if self.phase == phase:
                return
        self._report(phase)

    def close(self) -> None:
        """Stops the heartbeat (after sending what it holds), if there is one."""
        with self._lock:
            hb = self._heartbeat if self._heartbeat_on else None
            self._heartbeat_on = False
        if hb is not None:
            hb.stop()

    # -- the other events of a transformers trainer

    def on_train_begin(self, args: Any = None, state: Any = None, control: Any = None,
                       **kwargs: Any) -> None:
        """The collective-timeout check (may raise CollectiveTimeoutError), then "startup"."""
        self.check_collective_timeout(args=args)
        self._report("startup")

    def on_train_end(self, args: Any = None, state: Any = None, control: Any = None,
                     **kwargs: Any) -> None:
        """Reports "stopped" and stops the heartbeat."""
        self._report("stopped")
        self.close()

    def on_save(self, args: Any = None, state: Any = None, control: Any = None,
                **kwargs: Any) -> None:
        """A checkpoint (transformers calls it after the save: on_step_end reported it before,
        from control.should_save; this covers trainers that call it otherwise)."""
        self._report_once("checkpoint")

    def on_prediction_step(self, args: Any = None, state: Any = None, control: Any = None,
                           **kwargs: Any) -> None:
        """Evaluation under way (called per batch: reported once)."""
        self._report_once("eval")

    def on_evaluate(self, args: Any = None, state: Any = None, control: Any = None,
                    **kwargs: Any) -> None:
        """Evaluation done: "checkpoint" when a save follows (control.should_save)."""
        if getattr(control, "should_save", False) is True:
            self._report_once("checkpoint")

    def on_log(self, args: Any = None, state: Any = None, control: Any = None,
               logs: Any = None, **kwargs: Any) -> None:
        """Keeps the trainer's token count from its logs, for later reports: TRL's
        `num_tokens` (GRPOTrainer and others: the tokens processed so far, all ranks), else
        transformers' `num_input_tokens_seen` (with include_num_input_tokens_seen). Without
        either, nothing."""
        if not isinstance(logs, dict):
            return
        for key in TOKEN_LOG_KEYS:
            v = logs.get(key)
            if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v):
                with self._lock:
                    self.tokens = float(v)
                return

    def check_collective_timeout(self, timeout_s: Any = None, *, args: Any = None
                                 ) -> Optional[float]:
        """Refuses (CollectiveTimeoutError) an agent whose `max_hold_s` is at least the
        trainer's collective timeout (collective_timeout(): timeout_s, else the constructor's
        collective_timeout_s, else args.ddp_timeout, else torch's default). Returns the
        agent's max_hold_s when checked; None (a warning line on stderr where it matters)
        when there is nothing to check against or the agent does not say."""
        found = collective_timeout(timeout_s if timeout_s is not None
                                   else self.collective_timeout_s, args)
        if found is None:
            return None
        timeout, source, what = found
        status = self.client.status()
        if status is None:
            _warn("headroom: the agent at %s did not answer at start: its max_hold_s is not "
                  "checked against the collective timeout (%g s, %s)"
                  % (self.client.base_url, timeout, source))
            return None
        max_hold = status.get("max_hold_s")
        if (not isinstance(max_hold, numbers.Real) or isinstance(max_hold, bool)
                or not math.isfinite(max_hold) or max_hold < 0):
            _warn("headroom: the agent's /v1/status has no max_hold_s (an older agent): the "
                  "collective timeout (%g s, %s) is not checked" % (timeout, source))
            return None
        if max_hold >= timeout:
            raise CollectiveTimeoutError(
                "headroom: the agent may hold a step for up to %g s (max_hold_s) but the "
                "collective timeout is %g s (%s): raise %s above %g s or start the agent with "
                "--max-hold-s below %g" % (max_hold, timeout, source, what, max_hold, timeout))
        return float(max_hold)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # The events of an HF-style trainer this class does not handle: no-ops returning
        # None (such a trainer then keeps its control).
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError("%s has no attribute %r" % (type(self).__name__, name))

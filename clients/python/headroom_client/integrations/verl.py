"""verl (volcengine/verl b178a3c) with continuous admission under the agent's cap, per replica.

Where the sequences go at this commit: the driver's AgentLoopManager.generate_sequences splits
the step's batch over `rollout.agent.num_workers` AgentLoopWorker actors
(verl/experimental/agent_loop/agent_loop.py:947); each worker runs every sample at once
(asyncio.gather, :481), and each sample's agent loop calls its worker's
AsyncLLMServerManager.generate (:95), which picks a replica and awaits
`server.generate.remote(...)` (:115) on that replica's server actor. The pick is round-robin,
not by load: its "least requests" heap counts what that worker has sent to each replica and never
decrements (:77-90), in the worker's own shuffled order (:74), sticky per request id. All workers
send to all replicas, from separate processes, none knowing a replica's load.

What this adds, named in the config as
`actor_rollout_ref.rollout.agent.agent_loop_manager_class=headroom_client.integrations.verl.HeadroomAgentLoopManager`
(loaded by RayPPOTrainer.init_workers, ray_trainer.py:901):

- one gate per replica: a ReplicaGate actor (a ConcurrencyGate with counts) for each rollout
  replica, and the replica's server handle, as the workers receive it, wrapped so that the
  server manager's `server.generate.remote(...)` passes through that replica's gate (acquire,
  generate, release). Every worker's sequences for a replica share its one gate: in flight on a
  replica <= the cap at every moment, and = the cap while its sequences wait, across workers.
  Not driver-side chunks: the whole batch is handed over at once, as upstream does.
- one CapFollower per replica, in the driver, resizing its gate (`resize.remote(n)`): only the
  driver talks to the agent.
- the step boundary at each generate_sequences (meta_info["global_steps"], ray_trainer.py:1382):
  holds taken in the driver, outside any collective; reports through a Heartbeat: "rollout"
  with in flight (the gates' sum, read every 0.5 s), progress, engines = replicas, admission
  "continuous", group size = rollout.n; "logprob" when the batch is back (the manager sees no
  later phase); validation batches (meta_info["validate"]) report "eval" and take no boundary.

Settings, read where the manager is built (the driver, a Ray actor: pass them through the job's
runtime_env env_vars, or the environment of the process that starts a local Ray):
HEADROOM_AGENT_URL (default http://127.0.0.1:10470, as seen from the driver's node),
HEADROOM_AGENT_TOKEN, HEADROOM_SAFE_CONCURRENCY (default 1).

Not supported: the one-step-off recipe (verl/experimental/one_step_off_policy, which builds
its own manager and generates step k+1 while step k trains) and fully async
(verl/experimental/fully_async_policy: partial rollouts through generate_for_partial,
cancelled and resumed around weight syncs) -- a step boundary before generation and one
phase at a time are what the agent's decisions assume.

Standard library only at import: verl and Ray are imported when HeadroomAgentLoopManager is
first looked up (PEP 562 module __getattr__).
"""

import asyncio
import atexit
import os
from typing import Any, Dict, List

from ..client import AgentClient
from ..gates import CapFollower
from ._common import (ADMISSION, DEFAULT_POLL_PERIOD_S, CountingGate, Poller, RolloutReporter,
                      TrainerGroupCallback, concurrency_of)

ENV_URL = "HEADROOM_AGENT_URL"
ENV_TOKEN = "HEADROOM_AGENT_TOKEN"
ENV_SAFE = "HEADROOM_SAFE_CONCURRENCY"
DEFAULT_URL = "http://127.0.0.1:10470"
GATE_MAX_CONCURRENCY = 100000  # a ReplicaGate actor's calls at once: every waiting sequence


class ReplicaGate:
    """One replica's gate, as a Ray async actor (one event loop: the actor's): acquire() waits
    for a place in arrival order, release() gives it back, resize(n) from the driver's
    follower. counts(): {"limit", "in_flight", "waiting", "admitted", "finished"}."""

    def __init__(self, limit: int) -> None:
        self.gate = CountingGate(limit)

    async def acquire(self) -> None:
        await self.gate.__aenter__()

    async def release(self) -> None:
        await self.gate.__aexit__(None, None, None)

    async def resize(self, limit: int) -> None:
        self.gate.set_limit(limit)

    async def counts(self) -> Dict[str, int]:
        return self.gate.counts()

    async def wait_limit(self, limit: int) -> None:
        await self.gate.wait_limit(limit)


async def _release_when_admitted(admitted: Any, gate: Any) -> None:
    """A caller cancelled while its acquire was under way: the place, if it comes, goes back."""
    try:
        await admitted
    except BaseException:  # noqa: BLE001 -- not admitted: nothing to give back
        return
    await gate.release.remote()


class _GatedGenerate:
    def __init__(self, handle: "GatedServerHandle") -> None:
        self.handle = handle

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.handle.gated_generate(*args, **kwargs)


class GatedServerHandle:
    """A replica's server actor handle whose `generate.remote(...)` (what
    AsyncLLMServerManager.generate awaits, agent_loop.py:115) passes through the replica's
    ReplicaGate. Anything else is the server handle's. Picklable (two actor handles), so the
    manager hands it to the workers in place of the server handle."""

    def __init__(self, server: Any, gate: Any) -> None:
        self.server = server
        self.gate = gate

    @property
    def generate(self) -> _GatedGenerate:
        return _GatedGenerate(self)

    async def gated_generate(self, *args: Any, **kwargs: Any) -> Any:
        admitted = self.gate.acquire.remote()
        try:
            await admitted
        except asyncio.CancelledError:
            asyncio.ensure_future(_release_when_admitted(admitted, self.gate))
            raise
        try:
            return await self.server.generate.remote(*args, **kwargs)
        finally:
            await self.gate.release.remote()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "server" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["server"], name)


class _RemoteResize:
    """A ReplicaGate as CapFollower sees a gate: resize_threadsafe(n) sends resize(n)."""

    def __init__(self, gate: Any) -> None:
        self.gate = gate

    def resize_threadsafe(self, limit: int) -> None:
        self.gate.resize.remote(limit)


def _settings() -> Dict[str, Any]:
    return {"url": os.environ.get(ENV_URL) or DEFAULT_URL,
            "token": os.environ.get(ENV_TOKEN) or None,
            "safe": int(os.environ.get(ENV_SAFE, "1"))}


class _Headroom:
    """The manager's headroom side (in the driver): client, callback, gates, followers, and the
    reports around each generate_sequences."""

    def __init__(self, config: Any, poll_period_s: float) -> None:
        s = _settings()
        self.group_size = int(config.actor_rollout_ref.rollout.n)
        self.client = AgentClient(s["url"], token=s["token"], safe_concurrency=s["safe"],
                                  safe_group_size=self.group_size)
        self.callback = TrainerGroupCallback(self.client, self.group_size)
        self.poll_period_s = poll_period_s
        self.gates: List[Any] = []
        self.followers: List[CapFollower] = []

    def wrap(self, server_handles: List[Any]) -> List[Any]:
        """One ReplicaGate per replica, at the agent's concurrency now; the handles gated."""
        import ray
        limit = concurrency_of(self.client.actuation())
        actor = ray.remote(ReplicaGate).options(max_concurrency=GATE_MAX_CONCURRENCY, num_cpus=0)
        self.gates = [actor.remote(limit) for _ in server_handles]
        return [GatedServerHandle(h, g) for h, g in zip(server_handles, self.gates)]

    def start(self) -> None:
        self.followers = [CapFollower(self.client, [_RemoteResize(g)]).start()
                          for g in self.gates]
        self.callback.on_train_begin()
        atexit.register(self.callback.on_train_end)

    def counts(self) -> List[Dict[str, int]]:
        import ray
        return ray.get([g.counts.remote() for g in self.gates])

    def around(self, generate: Any, prompts: Any) -> Any:
        meta = getattr(prompts, "meta_info", {}) or {}
        if meta.get("validate", False):
            self.callback.on_phase("eval", in_flight=0)
            return generate(prompts)
        step = meta.get("global_steps")
        self.callback.on_step_begin(step=int(step) if step is not None else None)
        reporter = RolloutReporter(self.callback, engines=len(self.gates), interval_s=0.0)
        start = sum(c["finished"] for c in self.counts())
        total = len(prompts)  # sequences: the driver repeated every prompt rollout.n times

        def poll() -> None:
            counts = self.counts()
            reporter.update(sum(c["in_flight"] for c in counts),
                            sum(c["finished"] for c in counts) - start, total)

        reporter.update(0, 0, total, force=True)
        with Poller(poll, self.poll_period_s):
            out = generate(prompts)
        reporter.update(0, total, total, force=True)
        self.callback.on_phase("logprob", in_flight=0)
        return out

    def close(self) -> None:
        for f in self.followers:
            f.stop(timeout_s=0.0)


def _manager_class() -> type:
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    class HeadroomAgentLoopManager(AgentLoopManager):  # type: ignore[misc, valid-type]
        """AgentLoopManager (agent_loop.py:845) whose replicas each admit through one gate at
        the agent's concurrency (module doc)."""

        headroom_poll_period_s = DEFAULT_POLL_PERIOD_S

        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            self.headroom = _Headroom(config, self.headroom_poll_period_s)
            super().__init__(config, *args, **kwargs)  # builds replicas, then workers
            self.headroom.start()

        def _initialize_llm_servers(self, *args: Any, **kwargs: Any) -> None:
            super()._initialize_llm_servers(*args, **kwargs)
            # _init_agent_loop_workers (next, in __init__) hands these to every worker.
            self.server_handles = self.headroom.wrap(self.server_handles)

        def generate_sequences(self, prompts: Any) -> Any:
            whole = super().generate_sequences
            return self.headroom.around(whole, prompts)

    HeadroomAgentLoopManager.__module__ = __name__
    return HeadroomAgentLoopManager


_BUILT: Dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """HeadroomAgentLoopManager, built on first use from the installed verl's class."""
    if name == "HeadroomAgentLoopManager":
        if name not in _BUILT:
            _BUILT[name] = _manager_class()
        return _BUILT[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["HeadroomAgentLoopManager", "ReplicaGate", "GatedServerHandle", "ADMISSION"]

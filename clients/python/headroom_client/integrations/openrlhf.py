"""OpenRLHF (OpenRLHF/OpenRLHF 3c3be62, v0.11.0) with continuous admission under the agent's
cap, per vLLM engine.

Where the sequences go at this commit: the driver, PPOTrainer.fit (a Ray actor,
openrlhf/trainer/ppo_trainer.py:499), asks SamplesGenerator.generate_samples for a step's batch
(:527); _dispatch_prompts_to_vllm sends every prompt at once, each to the engine with the
fewest unfinished requests (samples_generator.py:199-245, `get_num_unfinished_requests`), as
`generate_responses.remote(...)`; the engine actor, RolloutRayActor
(openrlhf/trainer/ray/vllm_engine.py:34), starts the prompt's n_samples_per_prompt samples
together (:185-208) and each sample's executor calls the actor's own `generate` (:155;
openrlhf/utils/agent.py:240) around vLLM's AsyncLLMEngine.

What install() changes (in the process that runs `openrlhf.cli.train_ppo_ray`, before train()):

- RolloutRayActor (the name create_vllm_engines builds engines from) becomes a subclass whose
  `generate` passes through one ConcurrencyGate per engine: in flight on an engine <= the cap
  at every moment, and = the cap while its samples wait. Its get_num_unfinished_requests also
  counts the samples waiting at the gate, so the driver's least-loaded assignment still sees
  them. headroom_resize(n), headroom_counts() are new actor methods.
- PPOTrainer (the name train() builds the driver from) becomes a subclass that runs one
  CapFollower per engine (only the driver talks to the agent; each follower sends its engine
  `headroom_resize.remote(n)`), takes the step boundary before each generate_samples (holds in
  the driver, outside any collective) and reports through a Heartbeat: "rollout" with in flight
  (the engines' gates summed, read every 0.5 s), progress, engines, admission "continuous",
  group size = --rollout.n_samples_per_prompt; then "logprob" (make_experience_batch),
  "train" (ppo_train), "sync" (broadcast_to_vllm); "eval" for evaluation.
- PPOTrainerAsync (--train.async_enable) is refused at construction: generation there overlaps
  training (rollouts queued ahead, partial rollouts paused around weight syncs), so there is no
  step boundary before a rollout and no single phase to report.

    python3 -m headroom_client.integrations.openrlhf --agent http://127.0.0.1:10470 \\
        --safe-concurrency 8 -- <the arguments of openrlhf.cli.train_ppo_ray>

The settings travel inside the two classes (Ray pickles them by value), not through the
environment. The agent must be reachable from the node Ray places the PPOTrainer actor on.

Standard library only at import: OpenRLHF and Ray are imported by install().
"""

import argparse
import atexit
import runpy
import sys
from typing import Any, Dict, List, Optional

from ..client import AgentClient
from ..gates import CapFollower
from ._common import (ADMISSION, DEFAULT_POLL_PERIOD_S, CountingGate, Poller, RolloutReporter,
                      TrainerGroupCallback, undecorated)

ASYNC_REFUSED = ("headroom: OpenRLHF --train.async_enable is not supported: generation overlaps "
                 "training there (rollouts queued ahead, partial rollouts paused around weight "
                 "syncs), so a rollout has no step boundary before it and no phase of its own")


def gated_rollout_actor_class(upstream: Any, initial_limit: int = 1) -> Any:
    """A Ray actor class: RolloutRayActor (vllm_engine.py:34) whose generate passes through one
    gate per engine (module doc). initial_limit: the cap until the driver's follower resizes it."""
    import ray
    base = undecorated(upstream)

    class HeadroomRolloutRayActor(base):  # type: ignore[misc, valid-type]
        async def __init__(self, *args: Any, **kwargs: Any) -> None:
            await super().__init__(*args, **kwargs)  # async at 3c3be62 (vllm_engine.py:37)
            self._headroom_gate = CountingGate(initial_limit)

        async def generate(self, prompt_token_ids: Any, sampling_params: Any,
                           multi_modal_data: Any = None) -> Any:
            async with self._headroom_gate:
                return await super().generate(prompt_token_ids, sampling_params,
                                              multi_modal_data)

        def get_num_unfinished_requests(self) -> int:
            return super().get_num_unfinished_requests() + self._headroom_gate.waiting

        async def headroom_resize(self, limit: int) -> None:
            self._headroom_gate.set_limit(limit)

        async def headroom_counts(self) -> Dict[str, int]:
            return self._headroom_gate.counts()

        async def headroom_wait_limit(self, limit: int) -> None:
            await self._headroom_gate.wait_limit(limit)

    HeadroomRolloutRayActor.__qualname__ = "HeadroomRolloutRayActor"
    return ray.remote(HeadroomRolloutRayActor)


class _EngineResize:
    """An engine actor as CapFollower sees a gate."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def resize_threadsafe(self, limit: int) -> None:
        self.engine.headroom_resize.remote(limit)


class _Driver:
    """The driver's headroom side: client, callback (Heartbeat), one follower per engine, the
    step boundary and the reports around a step's generation."""

    def __init__(self, engines: List[Any], group_size: int, settings: Dict[str, Any]) -> None:
        self.engines = list(engines)
        self.client = AgentClient(settings["url"], token=settings.get("token"),
                                  safe_concurrency=settings["safe"], safe_group_size=group_size)
        self.callback = TrainerGroupCallback(self.client, group_size)
        self.poll_period_s = settings.get("poll_period_s", DEFAULT_POLL_PERIOD_S)
        self.step = 0  # the trainer's global_step last seen
        self.followers = [CapFollower(self.client, [_EngineResize(e)]).start()
                          for e in self.engines]
        self.callback.on_train_begin()
        atexit.register(self.callback.on_train_end)

    def counts(self) -> List[Dict[str, int]]:
        import ray
        return ray.get([e.headroom_counts.remote() for e in self.engines])

    def rollout(self, generate: Any, total: int, **kwargs: Any) -> Any:
        """generate(**kwargs) (a step's generate_samples) between the step boundary and
        "logprob". total: the sequences expected (prompts x samples; dynamic filtering may
        send more: the total then grows with what the engines have seen)."""
        self.callback.on_step_begin(step=self.step + 1)
        reporter = RolloutReporter(self.callback, engines=len(self.engines), interval_s=0.0)
        start = sum(c["finished"] for c in self.counts())
        state = {"total": int(total)}

        def poll() -> None:
            counts = self.counts()
            finished = sum(c["finished"] for c in counts) - start
            seen = finished + sum(c["in_flight"] + c["waiting"] for c in counts)
            state["total"] = max(state["total"], seen)
            reporter.update(sum(c["in_flight"] for c in counts), finished, state["total"])

        reporter.update(0, 0, state["total"], force=True)
        with Poller(poll, self.poll_period_s):
            out = generate(**kwargs)
        self.callback.on_phase("logprob", in_flight=0)
        return out

    def close(self) -> None:
        for f in self.followers:
            f.stop(timeout_s=0.0)


def headroom_ppo_trainer_class(upstream: Any, settings: Dict[str, Any]) -> Any:
    """A Ray actor class: PPOTrainer (ppo_trainer.py:445) with the driver's headroom side."""
    import ray
    base = undecorated(upstream)

    class HeadroomPPOTrainer(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            gen = self.samples_generator
            rollout = gen.args.rollout
            n = int(rollout.n_samples_per_prompt)
            prompts = getattr(rollout, "vllm_generate_batch_size", None) or rollout.batch_size
            self.headroom = _Driver(gen.vllm_engines, n, settings)
            whole, whole_eval = gen.generate_samples, gen.generate_eval_samples
            gen.generate_samples = lambda **kw: self.headroom.rollout(whole, int(prompts) * n,
                                                                      **kw)

            def eval_samples(**kw: Any) -> Any:
                self.headroom.callback.on_phase("eval", in_flight=0)
                return whole_eval(**kw)
            gen.generate_eval_samples = eval_samples

        def fit(self, global_step: int = 0) -> None:
            self.headroom.step = int(global_step)
            return super().fit(global_step)

        def init_checkpoint_states(self) -> Any:
            states = super().init_checkpoint_states()
            if isinstance(states, dict) and int(states.get("global_step", 0) or 0) > 0:
                self.headroom.step = int(states["global_step"])
            return states

        def train_step(self, rollout_samples: Any, global_step: int) -> Any:
            status, step = super().train_step(rollout_samples, global_step)
            self.headroom.step = int(step)
            return status, step

        def ppo_train(self, *args: Any, **kwargs: Any) -> Any:
            self.headroom.callback.on_phase("train", in_flight=0)
            return super().ppo_train(*args, **kwargs)

        def broadcast_to_vllm(self, *args: Any, **kwargs: Any) -> Any:
            self.headroom.callback.on_phase("sync", in_flight=0)
            return super().broadcast_to_vllm(*args, **kwargs)

    HeadroomPPOTrainer.__qualname__ = "HeadroomPPOTrainer"
    return ray.remote(HeadroomPPOTrainer)


def _refusing_class(message: str) -> Any:
    import ray

    class Refused:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError(message)

    return ray.remote(Refused)


def install(agent_url: str, *, token: Optional[str] = None, safe_concurrency: int = 1,
            poll_period_s: float = DEFAULT_POLL_PERIOD_S) -> None:
    """Replaces RolloutRayActor, PPOTrainer and PPOTrainerAsync in OpenRLHF's modules (module
    doc). Call in the driver process before openrlhf.cli.train_ppo_ray.train()."""
    from openrlhf.trainer import ppo_trainer, ppo_trainer_async
    from openrlhf.trainer.ray import vllm_engine
    settings = {"url": agent_url, "token": token, "safe": int(safe_concurrency),
                "poll_period_s": float(poll_period_s)}
    vllm_engine.RolloutRayActor = gated_rollout_actor_class(vllm_engine.RolloutRayActor,
                                                            int(safe_concurrency))
    ppo_trainer.PPOTrainer = headroom_ppo_trainer_class(ppo_trainer.PPOTrainer, settings)
    ppo_trainer_async.PPOTrainerAsync = _refusing_class(ASYNC_REFUSED)


def main(argv: Optional[List[str]] = None) -> None:
    """python3 -m headroom_client.integrations.openrlhf --agent URL [--token T]
    [--safe-concurrency N] -- <train_ppo_ray's arguments>"""
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(prog="python3 -m headroom_client.integrations.openrlhf")
    parser.add_argument("--agent", default="http://127.0.0.1:10470")
    parser.add_argument("--token", default=None)
    parser.add_argument("--safe-concurrency", type=int, default=1)
    opts = parser.parse_args(argv)
    install(opts.agent, token=opts.token, safe_concurrency=opts.safe_concurrency)
    sys.argv = ["openrlhf.cli.train_ppo_ray"] + rest
    runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

__all__ = ["install", "main", "gated_rollout_actor_class", "headroom_ppo_trainer_class",
           "ASYNC_REFUSED", "ADMISSION"]

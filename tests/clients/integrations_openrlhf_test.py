#!/usr/bin/python3
"""The OpenRLHF integration (headroom_client.integrations.openrlhf, issue 52 item 3) against a
stand-in of OpenRLHF 3c3be62 (tests/clients/standins/openrlhf_*: train_ppo_ray.train, the
PPOTrainer driver and its SamplesGenerator, two RolloutRayActor engines on the vLLM engine
stand-in; Ray replaced by threads and one event loop), with an in-process fake agent whose
concurrency changes mid-rollout.

Checked at every engine step by an auditor on the engine (standins/audit.py GateAuditor): the
engine holds exactly what its gate admitted; nothing is added above the cap; above it only
while draining; while samples wait at the gate, the engine runs at the cap. Each cap decided
mid-rollout is in force at the following steps. Every sample comes back. No torch.distributed
collective during generation. The reports: the trainer's own group size
(n_samples_per_prompt 4, while the agent decides 2), admission "continuous", engines 2, in
flight within cap x engines; phases rollout, logprob, train, sync, eval. --train.async_enable
is refused.

Deterministic: seeded lengths; each decision is made at its step once the cap before it has met
a queue (not by step alone: the driver's next rollout comes when its thread gets to it), and
pauses every engine at its next step until its gate has the new cap (awaiting a condition, no
sleeps).

Usage: integrations_openrlhf_test.py. Exit 0 on success, 1 on a failure.
"""

import os
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, HERE)
import standins  # noqa: E402
from fake_agent import StepAgent  # noqa: E402
from standins.audit import GateAuditor  # noqa: E402
from headroom_client.integrations import openrlhf as headroom_openrlhf  # noqa: E402

N = 4                    # --rollout.n_samples_per_prompt
AGENT_G = 2
FIRST_CAP = 3
SCHEDULE = {15: 2, 200: 6, 265: 4}  # engine 0's step -> concurrency decided then
ENGINES, BATCH, STEPS = 2, 10, 2
PROMPTS = ["p%d" % i for i in range(BATCH * STEPS)]
IDS = {p: [1000 * (i + 1)] for i, p in enumerate(PROMPTS + ["e0", "e1"])}


def tokenizer(text, **kwargs):
    return {"input_ids": [list(IDS[text])]}


def ns(**kw):
    return types.SimpleNamespace(**kw)


def arguments(async_enable=False):
    args = ns(rollout=ns(n_samples_per_prompt=N, batch_size=BATCH, vllm_generate_batch_size=None,
                         max_new_tokens=200),
              vllm=ns(num_engines=ENGINES, tensor_parallel_size=1),
              actor=ns(model_name_or_path="standin"),
              train=ns(seed=7, async_enable=async_enable, num_episodes=1),
              eval=ns(steps=2))
    args.strategy = ns(args=args, prompts=PROMPTS, eval_prompts=["e0", "e1"], tokenizer=tokenizer)
    return args


class OpenRLHF(unittest.TestCase):
    def setUp(self):
        self.mods = standins.install(["torch", "ray", "vllm", "openrlhf.trainer.ray.vllm_engine",
                                      "openrlhf.trainer.ppo_trainer",
                                      "openrlhf.trainer.ppo_trainer_async",
                                      "openrlhf.cli.train_ppo_ray"])
        self.ray, self.torch = self.mods["ray"], self.mods["torch"]
        self.ray.init()
        self.agent = StepAgent(concurrency=FIRST_CAP, group_size=AGENT_G)

    def tearDown(self):
        self.agent.stop()
        self.ray.shutdown()
        standins.uninstall()

    def install(self):
        headroom_openrlhf.install(self.agent.url, safe_concurrency=FIRST_CAP, poll_period_s=0.005)

    def attach_auditors(self):
        """Hooks every engine the gated actor class builds: an auditor, and the mid-rollout
        decisions (engine 0 decides; every engine waits at its next step for the new cap)."""
        cls = self.mods["openrlhf.trainer.ray.vllm_engine"].RolloutRayActor.__ray_metadata__.modified_class
        init = cls.__init__
        auditors, target = [], [None]
        test = self

        async def hooked_init(actor, *args, **kwargs):
            await init(actor, *args, **kwargs)
            gate = actor._headroom_gate
            auditor = GateAuditor(lambda: gate)
            # Engine 0 decides each cap at its step in SCHEDULE or, when later, once the cap
            # before it has run at its limit with requests waiting: the engine steps whether or
            # not the driver has sent the next rollout yet, so a cap decided by step alone could
            # fall between two rollouts on a loaded machine and never meet a queue (seen once
            # under ASan: 6 decided at step 200, the second rollout's queue only after 265).
            pending = sorted(SCHEDULE.items()) if not auditors else []
            previous = [FIRST_CAP]
            auditors.append(auditor)
            stepper = actor.llm.stepper

            async def after_step(engine):
                if (pending and engine.steps >= pending[0][0]
                        and previous[0] in auditor.at_cap_while_waiting):
                    _, c = pending.pop(0)
                    previous[0] = target[0] = c
                    test.agent.decide(concurrency=c)
                if target[0] is not None:
                    await gate.wait_until(lambda limit: limit == target[0])

            stepper.engine.on_step = auditor
            stepper.after_step = after_step
        cls.__init__ = hooked_init
        return auditors

    def test_a_gate_per_engine_under_the_agents_cap(self):
        self.install()
        auditors = self.attach_auditors()
        train = self.mods["openrlhf.cli.train_ppo_ray"].train
        trainer, engines = train(arguments())
        try:
            rollouts = self.ray.get(trainer.get_rollouts.remote())
            phases = self.ray.get(trainer.get_phases.remote())
        finally:
            trainer._instance.headroom.close()
            trainer._instance.headroom.callback.on_train_end()

        self.assertEqual(len(auditors), ENGINES)
        for a in auditors:
            self.assertFalse(a.violations, "\n".join(a.violations[:10]))
        self.assertTrue({FIRST_CAP} | set(SCHEDULE.values()) <= auditors[0].at_cap_while_waiting,
                        (auditors[0].at_cap_while_waiting, auditors[0].trace[::10]))
        self.assertEqual([len(r) for r in rollouts], [BATCH * N] * STEPS)
        for rollout in rollouts:  # every sample back, its completion from its own prompt
            for sample in rollout:
                start, _ = sample["action_ranges"][0]
                self.assertEqual(sample["observation_tokens"][start], IDS[sample["prompt"]][0])
        self.assertEqual(phases, ["make_experience", "ppo_train", "broadcast_to_vllm"] * STEPS)
        self.assertEqual(self.torch.violations, [])
        self.assertIn(("get_rank", True), self.torch.calls)  # the fake is live during generation
        self.check_reports()

    def check_reports(self):
        reports = [body for body, _ in self.agent.reports]
        phases = [r["phase"] for r in reports]
        for phase in ("startup", "rollout", "logprob", "train", "sync", "eval", "stopped"):
            self.assertIn(phase, phases)
        for r in reports:
            if r.get("group_size") is not None:
                self.assertEqual(r["group_size"], N, r)
        rollout = [r for r in reports if r["phase"] == "rollout"]
        self.assertTrue(any(r["in_flight"] > 0 for r in rollout), rollout)
        for r in rollout:
            self.assertEqual(r.get("admission"), "continuous", r)
            self.assertEqual(r.get("engines"), ENGINES, r)
            self.assertLessEqual(r["in_flight"], ENGINES * max(SCHEDULE.values()), r)
        self.assertEqual({r["step"] for r in rollout}, {1, 2})

    def test_waiting_samples_count_as_unfinished(self):
        """The driver's least-loaded assignment (get_num_unfinished_requests) sees the samples
        waiting at an engine's gate, not only those in vLLM."""
        self.install()
        vllm_engine = self.mods["openrlhf.trainer.ray.vllm_engine"]
        engine = vllm_engine.create_vllm_engines(1, 1, "standin", 0)[0]
        actor = engine._instance
        actor.llm.stepper.after_step = None
        counts = []

        def on_step(e):
            counts.append((actor.get_num_unfinished_requests(), e.get_num_unfinished_requests(),
                           actor._headroom_gate.waiting))
        actor.llm.engine.on_step = on_step
        params = self.mods["vllm"].SamplingParams(max_tokens=30)
        self.ray.get(engine.generate_responses.remote(prompt="p0", label=None,
                                                      sampling_params=params, max_length=100,
                                                      hf_tokenizer=tokenizer, num_samples=8))
        self.assertEqual(counts[0], (8, FIRST_CAP, 8 - FIRST_CAP))

    def test_async_training_is_refused(self):
        self.install()
        train = self.mods["openrlhf.cli.train_ppo_ray"].train
        with self.assertRaises(NotImplementedError) as e:
            train(arguments(async_enable=True))
        self.assertIn("async_enable", str(e.exception))


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)

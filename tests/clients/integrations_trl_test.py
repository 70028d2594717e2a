#!/usr/bin/python3
"""The TRL integration (headroom_client.integrations.trl, issue 52 item 3) against stand-ins of
TRL f2cd577's GRPOTrainer, transformers' Trainer loop, vLLM's engine and `trl vllm-serve`
(tests/clients/standins), with an in-process fake agent whose concurrency changes mid-rollout.

Checked, by an auditor on the engine (not the integration's own counts), at every engine step:
no sequence is added while the cap in force is reached; in flight never exceeds the cap (after
the cap is lowered it may only drain); while sequences wait to be added, in flight = the cap
(continuous admission); the engine runs min(in flight, max_num_seqs). Each cap the agent
decided mid-rollout is the one in force at the following steps. Every completion comes back
in prompt order. No torch.distributed collective runs inside generation. The reports carry
the trainer's own group size (num_generations 8, while the agent decides 4), admission
"continuous" and the engines. Tensor parallel colocate is refused. Server mode: each
vllm-serve worker's engine under its own follower; the route's gate keeps its signature.

Deterministic: seeded lengths; a mid-rollout decision is made from the engine's step hook,
which then waits (on a condition, not a sleep) until the follower has applied it.

Usage: integrations_trl_test.py. Exit 0 on success, 1 on a failure.
"""

import asyncio
import inspect
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, HERE)
import standins  # noqa: E402
from standins.audit import StepAuditor  # noqa: E402
from fake_agent import StepAgent  # noqa: E402
from headroom_client import AgentClient  # noqa: E402
from headroom_client.integrations import CountingGate  # noqa: E402
from headroom_client.integrations import trl as headroom_trl  # noqa: E402

WAIT_S = 10.0            # the longest a follower may take to apply a decision
G = 8                    # the trainer's num_generations
AGENT_G = 4              # what the agent decides: the reports must carry G, not this
FIRST_CAP = 5
SCHEDULE = {10: 3, 40: 9, 80: 2, 130: 6}  # engine step -> the concurrency decided then
PROMPTS = [[100 * (i + 1)] for i in range(8)]  # token ids: completions start at prompt[0]


class TrlBase(unittest.TestCase):
    def setUp(self):
        self.mods = standins.install(["torch", "vllm", "transformers", "trl.scripts.vllm_serve",
                                      "trl.trainer.grpo_trainer"])
        self.torch = self.mods["torch"]
        self.agent = StepAgent(concurrency=FIRST_CAP, group_size=AGENT_G)

    def tearDown(self):
        self.agent.stop()
        standins.uninstall()

    def client(self):
        return AgentClient(self.agent.url, safe_concurrency=2, safe_group_size=G)

    def config(self, mode, tp=1):
        trl = self.mods["trl.trainer.grpo_trainer"]
        return trl.GRPOConfig(num_generations=G, per_device_train_batch_size=8,
                              gradient_accumulation_steps=4, use_vllm=True, vllm_mode=mode,
                              vllm_tensor_parallel_size=tp, max_completion_length=200)

    def decide_at(self, schedule, caps):
        """An engine hook: at the scheduled steps the agent decides a new concurrency, and the
        hook waits until every Cap in caps() has it."""
        def hook(engine):
            c = schedule.get(engine.steps)
            if c is None:
                return
            self.agent.decide(concurrency=c)
            for cap in caps():
                self.assertTrue(cap.wait_for_limit(c, WAIT_S), "cap %d not applied" % c)
        return hook

    def reports(self):
        return [body for body, _ in self.agent.reports]

    def check_reports(self, engines, max_in_flight):
        reports = self.reports()
        phases = [r["phase"] for r in reports]
        for phase in ("startup", "rollout", "train", "stopped"):
            self.assertIn(phase, phases)
        for r in reports:
            if r.get("group_size") is not None:
                self.assertEqual(r["group_size"], G, r)
        rollout = [r for r in reports if r["phase"] == "rollout"]
        self.assertTrue(any(r["in_flight"] > 0 for r in rollout), rollout)
        for r in rollout:
            self.assertEqual(r.get("admission"), "continuous", r)
            self.assertEqual(r.get("engines"), engines, r)
            self.assertLessEqual(r["in_flight"], max_in_flight, r)


class Colocate(TrlBase):
    def test_refill_under_the_agents_cap(self):
        trl, vllm = self.mods["trl.trainer.grpo_trainer"], self.mods["vllm"]
        client = self.client()
        cb = headroom_trl.callback_for(self.config("colocate"), client)
        events = []

        class Recorder:
            def __getattr__(self, name):
                return lambda args, state, control, **kw: events.append(name)

        trainer = trl.GRPOTrainer(args=self.config("colocate"), train_dataset=PROMPTS,
                                  callbacks=[Recorder(), cb])
        refill = headroom_trl.install(trainer, cb, client)
        engine = trainer.vllm_generation.llm.llm_engine
        self.assertEqual(engine.max_num_running_reqs, 32)  # 8 x tp 1 x steps_per_generation 4
        auditor = StepAuditor(lambda: refill.loop.cap_in_force,
                              lambda: refill.loop.pending)
        hook = self.decide_at(SCHEDULE, lambda: [refill.cap])

        def on_step(e):
            auditor(e)
            hook(e)
        engine.on_step = on_step
        try:
            trainer.train()
        finally:
            refill.close()

        self.assertEqual(auditor.violations, [])
        for cap in [FIRST_CAP] + list(SCHEDULE.values()):
            self.assertIn(cap, auditor.at_cap_while_waiting)
        self.assertEqual(len(trainer.generated), 2)
        for completions in trainer.generated:  # every prompt back, in order
            self.assertEqual(len(completions), 32)
        batches = trainer.get_train_dataloader()[::4]
        for batch, completions in zip(batches, trainer.generated):
            self.assertEqual([c[0] for c in completions], [p[0] for p in batch])
        self.assertEqual(self.torch.violations, [])
        self.assertIn(("get_rank", True), self.torch.calls)  # the fake is live during generation
        # transformers' order: train_begin, epoch_begin, step_begin before any generation.
        self.assertEqual(events[:3], ["on_train_begin", "on_epoch_begin", "on_step_begin"])
        self.assertEqual(events[-1], "on_train_end")
        self.assertEqual(events.count("on_step_begin"), 2)
        self.check_reports(engines=1, max_in_flight=max(SCHEDULE.values()))
        self.assertIn("logprob", [r["phase"] for r in self.reports()])

    def test_without_the_integration_the_engine_takes_everything(self):
        """The stand-in is not trivially under a cap: TRL's own call runs the whole batch."""
        trl = self.mods["trl.trainer.grpo_trainer"]
        trainer = trl.GRPOTrainer(args=self.config("colocate"), train_dataset=PROMPTS)
        engine = trainer.vllm_generation.llm.llm_engine
        seen = []
        engine.on_step = lambda e: seen.append(e.num_running)
        trainer.train()
        self.assertEqual(max(seen), 32)

    def test_tensor_parallel_is_refused(self):
        trl = self.mods["trl.trainer.grpo_trainer"]
        client = self.client()
        cb = headroom_trl.callback_for(self.config("colocate", tp=2), client)
        trainer = trl.GRPOTrainer(args=self.config("colocate", tp=2), train_dataset=PROMPTS)
        with self.assertRaises(ValueError) as e:
            headroom_trl.install(trainer, cb, client)
        self.assertIn("tensor_parallel_size", str(e.exception))

    def test_n_samples_per_request_are_split_and_merged(self):
        """An LLM.generate call with n > 1 (what vllm-serve's workers get): n sequences each
        under the cap, merged back into one RequestOutput per prompt, in order."""
        vllm = self.mods["vllm"]
        llm = vllm.LLM(max_num_seqs=64)
        refill = headroom_trl.EngineRefill(llm, self.client()).install()
        auditor = StepAuditor(lambda: refill.loop.cap_in_force,
                              lambda: refill.loop.pending)
        llm.llm_engine.on_step = auditor
        try:
            outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS],
                                sampling_params=vllm.SamplingParams(n=3, max_tokens=50, seed=7))
        finally:
            refill.close()
        self.assertEqual(auditor.violations, [])
        self.assertEqual([o.prompt_token_ids for o in outs], PROMPTS)
        self.assertEqual([[c.index for c in o.outputs] for o in outs], [[0, 1, 2]] * 8)
        self.assertEqual(llm.llm_engine.added_total, 24)


class Server(TrlBase):
    def test_each_worker_under_its_follower(self):
        trl, serve = self.mods["trl.trainer.grpo_trainer"], self.mods["trl.scripts.vllm_serve"]
        headroom_trl.install_vllm_serve(self.agent.url, safe_concurrency=2)
        server = serve.main(serve.ScriptArguments(data_parallel_size=2, max_num_seqs=64))
        route = server.routes["/generate/"]
        gate = CountingGate(1)
        server.routes["/generate/"] = gated = headroom_trl.gate_generate_route(route, gate)
        self.assertEqual(inspect.signature(gated), inspect.signature(route))
        refills = headroom_trl.serve_refills()
        self.assertEqual(len(refills), 2)
        auditors = []
        for i, refill in enumerate(refills):
            auditor = StepAuditor(lambda r=refill: r.loop.cap_in_force,
                                  lambda r=refill: r.loop.pending)
            auditors.append(auditor)
            hook = (self.decide_at({15: 3, 45: 7}, lambda: [r.cap for r in refills])
                    if i == 0 else (lambda e: None))
            refill.engine.on_step = (lambda a, h: lambda e: (a(e), h(e)))(auditor, hook)
        client = self.client()
        cb = headroom_trl.callback_for(self.config("server"), client)
        trainer = trl.GRPOTrainer(args=self.config("server"), train_dataset=PROMPTS,
                                  callbacks=[cb], server=server)
        headroom_trl.install(trainer, cb, client, server_engines=2)
        try:
            trainer.train()
        finally:
            server.shutdown()
        for auditor in auditors:
            self.assertEqual(auditor.violations, [])
        self.assertTrue({FIRST_CAP, 3, 7} <= auditors[0].at_cap_while_waiting,
                        auditors[0].at_cap_while_waiting)
        self.assertEqual(gate.admitted, 2)  # one request per generation
        self.assertEqual(gate.in_flight, 0)
        for completions in trainer.generated:
            self.assertEqual(len(completions), 32)
        self.assertEqual(self.torch.violations, [])
        for name in ("all_gather_object", "broadcast_object_list"):  # TRL's, outside generation
            self.assertIn((name, False), self.torch.calls)
        self.check_reports(engines=2, max_in_flight=2 * 7)
        for refill in refills:  # the workers closed their refills at shutdown
            self.assertNotIn("generate", vars(refill.llm))

    def test_the_route_gate_admits_one_request_at_a_time(self):
        gate = CountingGate(1)
        seen = []

        async def handler(request):
            seen.append(gate.in_flight)
            await asyncio.sleep(0)
            return request

        gated = headroom_trl.gate_generate_route(handler, gate)

        async def many():
            return await asyncio.gather(*(gated(i) for i in range(5)))

        self.assertEqual(asyncio.run(many()), list(range(5)))
        self.assertEqual(seen, [1] * 5)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)

#!/usr/bin/python3
"""The verl integration (headroom_client.integrations.verl, issue 52 item 3) against a stand-in
of verl b178a3c's async rollout (tests/clients/standins/verl_standin.py: RayPPOTrainer.fit, the
AgentLoopManager named by agent_loop_manager_class, three AgentLoopWorkers, two replica
servers on the vLLM engine stand-in; Ray replaced by threads and one event loop), with an
in-process fake agent whose concurrency changes mid-rollout.

Checked at every engine step by an auditor on the engine (standins/audit.py GateAuditor): the
engine holds exactly what its replica's gate admitted, every worker's requests included;
nothing is added above the cap; above it only while draining; while requests wait, the engine
runs at the cap. Each cap decided mid-rollout is in force at the following steps. Every sample
comes back. No torch.distributed collective during generation. The reports: the trainer's
own group size (rollout.n 5, while the agent decides 4), admission "continuous", engines = 2
replicas, in flight within cap x replicas; "eval" for validation, "logprob" after a rollout.
The one-step-off / fully-async recipes are not covered (not supported).

Deterministic: seeded lengths; each decision is made at its step once the cap before it has met
a queue (not by step alone: the trainer's next batch comes when its thread gets to it), and
pauses every engine at its next step until its gate has the new cap (awaiting a condition, no
sleeps).

Usage: integrations_verl_test.py. Exit 0 on success, 1 on a failure.
"""

import asyncio
import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, HERE)
import standins  # noqa: E402
from fake_agent import StepAgent  # noqa: E402
from standins.audit import GateAuditor  # noqa: E402
from headroom_client.integrations import verl as headroom_verl  # noqa: E402

N = 5                   # rollout.n: the trainer's group size
AGENT_G = 4             # the agent's decision: the reports must carry N
FIRST_CAP = 4
SCHEDULE = {20: 2, 110: 7, 160: 3}   # replica 0's engine step -> concurrency decided then
WORKERS, REPLICAS, BATCH, STEPS = 3, 2, 24, 2
PROMPTS = [[1000 * (i + 1)] for i in range(BATCH)]
FQN = "headroom_client.integrations.verl.HeadroomAgentLoopManager"


def config():
    verl = sys.modules["verl.experimental.agent_loop.agent_loop"]
    return verl.Cfg({
        "actor_rollout_ref": {"rollout": {
            "n": N, "name": "vllm", "tensor_model_parallel_size": 1, "data_parallel_size": 1,
            "pipeline_model_parallel_size": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
            "calculate_log_probs": False, "max_num_seqs": 64, "response_length": 200,
            "val_kwargs": {"temperature": 0.0},
            "agent": {"num_workers": WORKERS, "agent_loop_manager_class": FQN}}},
        "trainer": {"n_gpus_per_node": REPLICAS, "nnodes": 1, "total_training_steps": STEPS},
        "data": {"train_batch_size": BATCH}})


class Verl(unittest.TestCase):
    def setUp(self):
        random.seed(52)  # AsyncLLMServerManager shuffles its handles (random.shuffle)
        self.mods = standins.install(["torch", "ray", "vllm",
                                      "verl.experimental.agent_loop.agent_loop"])
        self.ray, self.verl, self.torch = (self.mods["ray"],
                                           self.mods["verl.experimental.agent_loop.agent_loop"],
                                           self.mods["torch"])
        self.ray.init()
        self.agent = StepAgent(concurrency=FIRST_CAP, group_size=AGENT_G)
        os.environ[headroom_verl.ENV_URL] = self.agent.url
        os.environ[headroom_verl.ENV_SAFE] = "2"
        headroom_verl._BUILT.clear()  # built against this test's stand-in
        headroom_verl.HeadroomAgentLoopManager.headroom_poll_period_s = 0.005

    def tearDown(self):
        self.agent.stop()
        self.ray.shutdown()
        standins.uninstall()
        for k in (headroom_verl.ENV_URL, headroom_verl.ENV_SAFE):
            os.environ.pop(k, None)

    def test_a_gate_per_replica_under_the_agents_cap(self):
        trainer = self.verl.RayPPOTrainer(config(), PROMPTS)
        trainer.init_workers()
        manager = trainer.async_rollout_manager
        self.assertEqual(type(manager).__name__, "HeadroomAgentLoopManager")
        servers = self.verl.vLLMHttpServer.created
        self.assertEqual(len(servers), REPLICAS)
        gate_of = {h.server._instance: h.gate._instance.gate for h in manager.server_handles}
        target = [None]
        auditors = []

        def after_step(server, auditor, schedule):
            # Replica 0 decides each cap at its step in SCHEDULE or, when later, once the cap
            # before it has run at its limit with requests waiting: the engine steps whether or
            # not the trainer has sent the next batch, so a cap decided by step alone could fall
            # between two batches on a loaded machine and never meet a queue.
            gate = gate_of[server]
            pending = sorted(schedule.items())
            previous = [FIRST_CAP]

            async def hook(engine):
                if (pending and engine.steps >= pending[0][0]
                        and previous[0] in auditor.at_cap_while_waiting):
                    _, c = pending.pop(0)
                    previous[0] = target[0] = c
                    self.agent.decide(concurrency=c)
                if target[0] is not None:  # the follower's resize to the latest, then go on
                    await gate.wait_until(lambda limit: limit == target[0])
            return hook

        for i, server in enumerate(servers):
            auditor = GateAuditor(lambda s=server: gate_of[s])
            auditors.append(auditor)
            server.stepper.engine.on_step = auditor
            server.stepper.after_step = after_step(server, auditor, SCHEDULE if i == 0 else {})
        try:
            outs = trainer.fit()
        finally:
            manager.headroom.close()
            manager.headroom.callback.on_train_end()

        for a in auditors:
            self.assertFalse(a.violations, "\n".join(a.violations[:10]))
            self.assertGreater(a.steps, 0)
        self.assertTrue({FIRST_CAP} | set(SCHEDULE.values()) <= auditors[0].at_cap_while_waiting,
                        (auditors[0].at_cap_while_waiting, auditors[0].trace))
        self.assertEqual([len(o) for o in outs], [BATCH] + [BATCH * N] * STEPS)
        for o in outs[1:]:  # every sample back, its completion from its own prompt
            for prompt, response in zip(o.non_tensor_batch["raw_prompt_ids"], o.batch["responses"]):
                self.assertEqual(response[0], prompt[0])
        self.assertEqual(self.torch.violations, [])
        self.assertIn(("get_rank", True), self.torch.calls)  # the fake is live during generation
        self.check_reports(max(auditors[0].max_in_flight, auditors[1].max_in_flight))

    def check_reports(self, max_seen):
        reports = [body for body, _ in self.agent.reports]
        phases = [r["phase"] for r in reports]
        for phase in ("startup", "eval", "rollout", "logprob", "stopped"):
            self.assertIn(phase, phases)
        self.assertLess(phases.index("eval"), phases.index("rollout"))
        for r in reports:
            if r.get("group_size") is not None:
                self.assertEqual(r["group_size"], N, r)
        rollout = [r for r in reports if r["phase"] == "rollout"]
        self.assertTrue(any(r["in_flight"] > 0 for r in rollout), rollout)
        for r in rollout:
            self.assertEqual(r.get("admission"), "continuous", r)
            self.assertEqual(r.get("engines"), REPLICAS, r)
            self.assertLessEqual(r["in_flight"], REPLICAS * max(SCHEDULE.values()), r)
        self.assertEqual({r["step"] for r in rollout}, {1, 2})

    def test_a_gated_handle_passes_anything_else_through(self):
        h = headroom_verl.GatedServerHandle(server="server", gate="gate")
        self.assertEqual(h.upper(), "SERVER")
        self.assertTrue(hasattr(h.generate, "remote"))

    def test_a_cancelled_wait_gives_its_place_back(self):
        gate = self.ray.remote(headroom_verl.ReplicaGate).remote(1)
        loop = self.ray.cluster_loop()

        class Server:
            async def generate(self, **kw):
                await asyncio.sleep(0)
                return kw["x"]
        server = self.ray.remote(Server).remote()
        h = headroom_verl.GatedServerHandle(server, gate)

        async def scenario():
            first = asyncio.ensure_future(h.generate.remote(x=1))
            await asyncio.sleep(0)
            second = asyncio.ensure_future(h.generate.remote(x=2))
            for _ in range(20):
                await asyncio.sleep(0)
            second.cancel()
            got = await first
            for _ in range(50):
                await asyncio.sleep(0)
            return got, await gate.counts.remote()

        got, counts = asyncio.run_coroutine_threadsafe(scenario(), loop).result(10)
        self.assertEqual(got, 1)
        self.assertEqual((counts["in_flight"], counts["waiting"]), (0, 0))


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)

#!/usr/bin/python3
"""examples/grpo_torch/train.py learns, and its GRPO math is what the papers write.

Usage: grpo_learning_test.py [REPO_ROOT]. Exit 0 pass, 1 fail, 77 skip (no torch).

- Learning: the --small preset, seed 1, 100 steps, in-process, with no agent (the client is
  pointed at a port that refuses, so it runs on the safe values, group 8 and concurrency 16):
  the mean reward of the last 10 steps must exceed the first 10's by LEARN_MARGIN. Measured on
  the development machine (2 cores, torch 1.13 CPU, one thread), first 10 -> last 10: seed 1
  0.10 -> 0.96, 2: 0.10 -> 0.57, 3: 0.12 -> 0.85, 4: 0.10 -> 0.89, 5: 0.11 -> 0.88, 6: 0.10 ->
  0.81. The margin asks for 0.3, under two thirds of the smallest gain (0.47, seed 2); the
  seed is fixed at 1 (gain 0.86), so only a change to the trainer, not chance, can fail it.
- The math, against hand computations: group-relative advantages, the clipped surrogate, the
  k3 KL estimator (exact expectation = KL), and `batched` with a concurrency that changes.
"""

import importlib.util
import math
import os
import socket
import sys
import unittest

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # before torch: one core, as train.py runs
try:
    import torch
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)

torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location(
    "grpo_train", os.path.join(ROOT, "examples", "grpo_torch", "train.py"))
grpo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grpo)  # also puts clients/python on sys.path
from headroom_client import batched  # noqa: E402

SEED = 1
STEPS = 100
LEARN_MARGIN = 0.3  # last-10 mean reward - first-10 mean reward; measured gains 0.47 .. 0.86 (seeds 1-6)


class Math(unittest.TestCase):
    def test_group_advantages(self):
        r = torch.tensor([[1.0, 0.0, 0.0, 1.0],
                          [0.5, 0.5, 0.5, 0.5],
                          [0.0, 0.2, 0.4, 0.6]])
        adv = grpo.group_advantages(r, eps=1e-4)
        # Group 0: mean 0.5, deviations +-0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3).
        s0 = math.sqrt(1.0 / 3.0) + 1e-4
        # Group 2: mean 0.3, deviations -0.3 -0.1 0.1 0.3, std sqrt(0.2 / 3).
        s2 = math.sqrt(0.2 / 3.0) + 1e-4
        want = [[0.5 / s0, -0.5 / s0, -0.5 / s0, 0.5 / s0],
                [0.0, 0.0, 0.0, 0.0],  # all equal: no signal
                [-0.3 / s2, -0.1 / s2, 0.1 / s2, 0.3 / s2]]
        for got_row, want_row in zip(adv.tolist(), want):
            for g, w in zip(got_row, want_row):
                self.assertAlmostEqual(g, w, places=5)
        self.assertEqual(grpo.group_advantages(torch.tensor([[0.3], [0.9]])).tolist(),
                         [[0.0], [0.0]])  # a group of one has no baseline

    def test_clipped_objective(self):
        # ratio, advantage -> min(ratio * A, clip(ratio, 0.8, 1.2) * A), by hand:
        cases = [(0.5, 1.0, 0.5, False),    # min(0.5, 0.8)
                 (1.0, 1.0, 1.0, False),    # min(1.0, 1.0)
                 (1.5, 1.0, 1.2, True),     # min(1.5, 1.2): clipped
                 (0.7, -1.0, -0.8, True),   # min(-0.7, -0.8): clipped
                 (1.3, -1.0, -1.3, False),  # min(-1.3, -1.2): the unclipped, pessimistic
                 (1.1, 2.0, 2.2, False)]    # inside the interval
        ratio = torch.tensor([[c[0] for c in cases]])
        adv = torch.tensor([[c[1] for c in cases]])
        obj, clipped = grpo.clipped_objective(torch.log(ratio), torch.zeros_like(ratio), adv,
                                              0.2)
        for g, c in zip(obj[0].tolist(), cases):
            self.assertAlmostEqual(g, c[2], places=5)
        self.assertEqual(clipped[0].tolist(), [c[3] for c in cases])
        # One advantage per sequence is broadcast over its tokens.
        obj2, _ = grpo.clipped_objective(torch.log(torch.tensor([[1.5, 0.5]])),
                                         torch.zeros(1, 2), torch.tensor([2.0]), 0.2)
        self.assertAlmostEqual(obj2[0, 0].item(), 2.4, places=5)  # min(3.0, 2.4)
        self.assertAlmostEqual(obj2[0, 1].item(), 1.0, places=5)  # min(1.0, 1.6)

    def test_k3(self):
        # pi(x) = 0.5, ref(x) = 0.25: d = ln 0.5, k3 = 0.5 - ln 0.5 - 1.
        got = grpo.k3_kl(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
        self.assertAlmostEqual(got.item(), 0.5 + math.log(2.0) - 1.0, places=6)
        self.assertEqual(grpo.k3_kl(torch.tensor([-1.3]), torch.tensor([-1.3])).item(), 0.0)
        # Its expectation under pi is KL(pi || ref) exactly: sum over a whole distribution.
        pi = [0.5, 0.3, 0.2]
        ref = [0.2, 0.2, 0.6]
        k3 = grpo.k3_kl(torch.log(torch.tensor(pi, dtype=torch.float64)),
                        torch.log(torch.tensor(ref, dtype=torch.float64)))
        expect = sum(p * k for p, k in zip(pi, k3.tolist()))
        kl = sum(p * math.log(p / q) for p, q in zip(pi, ref))
        self.assertAlmostEqual(expect, kl, places=12)
        self.assertTrue(bool((k3 >= 0).all()))

    def test_batched_follows_a_changing_concurrency(self):
        limits = iter([3, 1, 4, 2, 10])
        self.assertEqual([len(c) for c in batched(range(12), lambda: next(limits))],
                         [3, 1, 4, 2, 2])
        # As the trainer uses it: the decision changes inside the loop, the next chunk obeys.
        box = [2]
        sizes = []
        for i, chunk in enumerate(batched(list(range(10)), lambda: box[0])):
            sizes.append(len(chunk))
            box[0] = 5 if i == 0 else 1
        self.assertEqual(sizes, [2, 5, 1, 1, 1])
        self.assertEqual([len(c) for c in batched(range(7), 3)], [3, 3, 1])

    def test_reward_and_masking(self):
        prompts = grpo.make_prompts(torch.Generator().manual_seed(0), 2, 3, 10)
        target = prompts[:, 1:-1].flip(1)
        self.assertEqual(grpo.rewards_of(prompts, target).tolist(), [1.0, 1.0])
        wrong = target.clone()
        wrong[:, 0] = (wrong[:, 0] + 1) % 10
        for r in grpo.rewards_of(prompts, wrong).tolist():
            self.assertAlmostEqual(r, 2.0 / 3.0, places=6)
        # Completions are scored among the digits only: their probabilities sum to 1.
        torch.manual_seed(0)
        model = grpo.TinyLM(12, 8, 16, 1, 2)
        logits = grpo.digit_logits(model(prompts), 10, 1.0)
        self.assertTrue(torch.allclose(logits.softmax(-1)[..., :10].sum(-1),
                                       torch.ones(2, prompts.shape[1])))


class Learning(unittest.TestCase):
    def test_small_preset_learns_from_grpo_alone(self):
        # A port that is bound but not listening refuses at once: the client falls back to
        # the safe values, whatever else runs on this machine.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
            closed.bind(("127.0.0.1", 0))
            agent = "http://127.0.0.1:%d" % closed.getsockname()[1]
            args = grpo.parse_args(["--small", "--steps", str(STEPS), "--seed", str(SEED),
                                    "--agent", agent, "--quiet"])
            run = grpo.train(0, 1, args)
        steps = run["steps"]
        self.assertEqual(len(steps), STEPS)
        self.assertEqual({s["group_size"] for s in steps}, {8})  # the safe values
        self.assertEqual({c for s in steps for c in s["concurrency"]}, {16})
        first, last = run["reward_first10"], run["reward_last10"]
        print("small preset, seed %d: reward %.3f (first 10 steps) -> %.3f (last 10), %.1f s" %
              (SEED, first, last, run["seconds_total"]))
        self.assertLess(abs(first - 0.1), 0.05, "a random model scores about 1/10")
        self.assertGreater(last - first, LEARN_MARGIN)


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)

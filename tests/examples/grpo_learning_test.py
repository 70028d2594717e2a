#!/usr/bin/python3
"""examples/grpo_torch/train.py learns, and its GRPO math is what the papers write.

Usage: grpo_learning_test.py [REPO_ROOT]. Exit 0 pass, 1 fail, 77 skip (no torch).

- Learning: the --small preset, seed 1, 100 steps, in-process, with no agent (the client is
  pointed at a port that refuses, so it runs on the safe values, group 8 and cap 16): the mean
  reward of the last 10 steps must exceed the first 10's by LEARN_MARGIN, and so must the
  accuracy (the answer's digits alone). The reward is the accuracy minus a length penalty
  (0.01 per token after the answer, the closing EOS aside), so a random model's first-10
  reward is ~0.06, not 1/10: the "random model scores about 1/10" check is on the accuracy.
  Measured on the development machine (2 cores, torch 1.13 CPU, one thread), accuracy first 10
  -> last 10: seed 1 0.10 -> 0.86, 2: 0.09 -> 0.74, 3: 0.10 -> 0.93, 4: 0.10 -> 0.91, 5: 0.10
  -> 0.78, 6: 0.11 -> 0.92; reward 0.05-0.06 -> 0.85, 0.73, 0.93, 0.91, 0.78, 0.92. The margin
  asks for 0.3, under half the smallest gain (0.65, seed 2's accuracy); the seed is fixed at 1
  (gains 0.79 reward, 0.76 accuracy), so only a change to the trainer, not chance, can fail it.
- The math, against hand computations: group-relative advantages, the clipped surrogate, the
  k3 KL estimator (exact expectation = KL), the reward and the completion masks.
  (tests/examples/grpo_engine_test.py checks the rollout engine.)
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
spec.loader.exec_module(grpo)

SEED = 1
STEPS = 100
LEARN_MARGIN = 0.3  # last-10 - first-10 mean, reward and accuracy; measured >= 0.65 (seeds 1-6)


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

    def test_reward_and_masking(self):
        prompts = grpo.make_prompts(torch.Generator().manual_seed(0), 2, 3, 10)
        target = prompts[:, 1:-1].flip(1)
        self.assertEqual(grpo.rewards_of(prompts, target).tolist(), [1.0, 1.0])
        wrong = target.clone()
        wrong[:, 0] = (wrong[:, 0] + 1) % 10
        for r in grpo.rewards_of(prompts, wrong).tolist():
            self.assertAlmostEqual(r, 2.0 / 3.0, places=6)
        # Tokens after the answer do not count in the accuracy; they cost the length penalty.
        eos = grpo.vocab(10)["eos"]
        comps, mask = grpo.pad_completions([target[0].tolist() + [eos],
                                            target[1].tolist() + [4, 4, 4]], eos)
        self.assertEqual(grpo.rewards_of(prompts, comps).tolist(), [1.0, 1.0])
        self.assertEqual(grpo.extra_tokens(comps, mask, 3, eos).tolist(), [0, 3])
        self.assertEqual(mask.tolist(), [[True] * 4 + [False] * 2, [True] * 6])
        # Completions are scored among the digits and EOS, EOS only after the answer's L
        # digits: at every position the probabilities of those tokens sum to 1.
        torch.manual_seed(0)
        v = grpo.vocab(10)
        model = grpo.TinyLM(v["size"], 12, 16, 1, 2)
        logits = grpo.completion_logits(model(comps)[:, :6], 10, 3, 1.0)
        p = logits.softmax(-1)
        self.assertTrue(torch.allclose(p[..., :10].sum(-1) + p[..., eos], torch.ones(2, 6)))
        self.assertEqual(p[:, :3, eos].abs().max().item(), 0.0)  # no EOS inside the answer
        self.assertTrue(bool((p[:, 3:, eos] > 0).all()))
        self.assertEqual(p[..., v["sep"]].abs().max().item(), 0.0)
        self.assertEqual(p[..., v["bos"]].abs().max().item(), 0.0)


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
        self.assertEqual({c for s in steps for c, _ in s["caps"]}, {16})
        first, last = run["reward_first10"], run["reward_last10"]
        acc_first, acc_last = run["accuracy_first10"], run["accuracy_last10"]
        print("small preset, seed %d: reward %.3f -> %.3f, accuracy %.3f -> %.3f (first 10 "
              "steps -> last 10), completion length %.1f -> %.1f, %.1f s" %
              (SEED, first, last, acc_first, acc_last, steps[0]["lengths"]["mean"],
               steps[-1]["lengths"]["mean"], run["seconds_total"]))
        self.assertLess(abs(acc_first - 0.1), 0.05, "a random model scores about 1/10")
        self.assertGreater(last - first, LEARN_MARGIN)
        self.assertGreater(acc_last - acc_first, LEARN_MARGIN)

if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)

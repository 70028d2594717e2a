#!/usr/bin/python3
"""examples/grpo_torch/engine.py: the rollout engine (vLLM LLMEngine's call shape) and its
use by train.py.

Usage: grpo_engine_test.py [REPO_ROOT]. Exit 0 pass, 1 fail, 77 skip (no torch).

- KV cache: the model's cached forward (a prefill, then one token at a time) gives the logits
  of a full recompute within 1e-5 at every position; the engine's sampled-token
  log-probabilities equal a full recompute's within 1e-5, also for sequences preempted and
  resumed by a falling and rising cap.
- The cap: read at every step, never exceeded; while requests wait the engine runs exactly the
  cap (continuous admission); a slot freed at step k is filled at step k+1; a cap change applies
  at the next step (preempting the latest admitted, resuming them first).
- Lengths: under the initial model, with train.py's sampling (EOS once the answer is out, at
  most --max-completion-len), completion lengths are long-tailed: p90 / p50 > 1.5.
- Pacing: a step lasts its cost-model target (fake clock); the built-in cost constants are
  those of scenarios/a100-7b-tp1-vllm.toml; the decode step time is continuous at n_min.
- train.py with --engine-log and --time-scale: every engine step keeps running <= cap and
  runs the cap while requests wait; phases last at least their target; --json has the
  per-step completion-length stats.
"""

import importlib.util
import json
import math
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")
try:
    import torch
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)

torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location(
    "grpo_train", os.path.join(ROOT, "examples", "grpo_torch", "train.py"))
grpo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grpo)  # also puts examples/grpo_torch on sys.path
import engine as eng  # noqa: E402

TOL = 1e-5  # cached vs recomputed logits and log-probabilities
LONG_TAIL = 1.5  # p90 / p50 of completion lengths under the initial model
OCCUPANCY = 0.9  # running / cap while requests wait


def small_model(seed=0, max_len=29, layers=1):
    torch.manual_seed(seed)
    return grpo.TinyLM(13, max_len, 32, layers, 2).eval()


def small_args(*extra):
    return grpo.parse_args(["--small", "--agent", "http://127.0.0.1:1", "--quiet", *extra])


def run_engine(engine, requests, cap_box=None, caps=None):
    """Adds `requests` [(id, prompt, params)], steps until done; caps[i] (if given) is put in
    cap_box before step i. Returns ({id: output}, [StepStats])."""
    for r in requests:
        engine.add_request(*r)
    outs, stats = {}, []
    while engine.has_unfinished_requests():
        if caps is not None:
            cap_box[0] = caps[len(stats) % len(caps)]
        for o in engine.step():
            outs[o.request_id] = o
        stats.append(engine.last)
    return outs, stats


class KVCache(unittest.TestCase):
    def test_cached_forward_equals_full_recompute(self):
        model = small_model(layers=2, max_len=20)
        gen = torch.Generator().manual_seed(3)
        seqs = torch.randint(0, 13, (5, 20), generator=gen)
        with torch.no_grad():
            full = model(seqs)  # [5, 20, vocab]
            cache = eng.KVCache(*model.cache_shape(), capacity=2)  # grows to 8
            slots = torch.tensor([cache.alloc() for _ in range(5)])
            prompt = 6
            got = [model.forward_cached(seqs[:, :prompt],
                                        torch.arange(prompt).expand(5, prompt), cache, slots)]
            for t in range(prompt, 20):
                got.append(model.forward_cached(seqs[:, t:t + 1],
                                                torch.full((5, 1), t), cache, slots))
            got = torch.cat(got, 1)
        self.assertEqual(cache.capacity, 8)
        diff = (got - full).abs().max().item()
        self.assertLess(diff, TOL)

    def test_engine_logprobs_equal_full_recompute_across_preemption(self):
        model = small_model()
        args = small_args()
        params = grpo.sampling_params(args)
        prompts = grpo.make_prompts(torch.Generator().manual_seed(0), 40, 3, 10)
        box = [8]
        engine = eng.LLMEngine(model, cap=lambda: box[0],
                               generator=torch.Generator().manual_seed(1))
        outs, stats = run_engine(engine, [(i, prompts[i].tolist(), params) for i in range(40)],
                                 box, caps=[8, 8, 3, 3, 12, 5, 8])
        self.assertGreater(sum(s.preempted for s in stats), 0)
        self.assertGreater(sum(s.resumed for s in stats), 0)
        comp, mask = grpo.pad_completions([outs[i].token_ids for i in range(40)],
                                          grpo.vocab(10)["eos"])
        with torch.no_grad():
            full = grpo.completion_logprobs(model, prompts, comp, 10, 3, 1.0)
        for i in range(40):
            n = len(outs[i].token_ids)
            d = (full[i, :n] - torch.tensor(outs[i].logprobs)).abs().max().item()
            self.assertLess(d, TOL, "request %d" % i)
            self.assertTrue(bool(torch.isfinite(full[i, :n]).all()))


class Cap(unittest.TestCase):
    def engine(self, box, model=None):
        return eng.LLMEngine(model or small_model(), cap=lambda: box[0],
                             generator=torch.Generator().manual_seed(2))

    def test_never_exceeded_and_full_while_waiting(self):
        box = [1]
        e = self.engine(box)
        params = grpo.sampling_params(small_args())
        prompts = grpo.make_prompts(torch.Generator().manual_seed(5), 60, 3, 10)
        caps = [5, 5, 1, 7, 7, 7, 2, 16, 3, 3, 9]
        outs, stats = run_engine(e, [(i, prompts[i].tolist(), params) for i in range(60)], box,
                                 caps)
        self.assertEqual(len(outs), 60)
        for i, s in enumerate(stats):
            self.assertEqual(s.cap, caps[i % len(caps)])  # read at every step
            self.assertLessEqual(s.running, s.cap, "step %d" % i)
            if s.waiting:
                self.assertGreaterEqual(s.running, OCCUPANCY * s.cap, "step %d" % i)
                self.assertEqual(s.running, s.cap, "step %d" % i)
        self.assertFalse(e.has_unfinished_requests())
        self.assertEqual(e.get_num_unfinished_requests(), 0)

    def test_a_freed_slot_is_filled_at_the_next_step(self):
        box = [2]
        e = self.engine(box)
        short = eng.SamplingParams(max_tokens=2)  # no EOS: lengths are max_tokens
        longer = eng.SamplingParams(max_tokens=6)
        outs, stats = run_engine(e, [("a", [1, 2], short), ("b", [3, 4], longer),
                                     ("c", [5, 6], longer)])
        self.assertEqual((outs["a"].admitted_step, outs["a"].finished_step), (0, 1))
        self.assertEqual(outs["c"].admitted_step, 2)  # a's slot, the step after it finished
        self.assertEqual([s.running for s in stats[:3]], [2, 2, 2])
        self.assertEqual([s.waiting for s in stats[:3]], [1, 1, 0])
        self.assertEqual(outs["a"].finish_reason, "length")
        self.assertEqual(len(outs["c"].token_ids), 6)
        self.assertEqual(e.get_num_unfinished_requests(), 0)

    def test_a_cap_change_applies_at_the_next_step(self):
        box = [4]
        e = self.engine(box)
        p = eng.SamplingParams(max_tokens=20)
        for i in range(10):
            e.add_request(i, [1, 2, 3], p)
        e.step()
        self.assertEqual((e.last.cap, e.last.running, e.last.admitted), (4, 4, 4))
        self.assertEqual(e.get_num_unfinished_requests(), 10)
        box[0] = 2
        e.step()
        self.assertEqual((e.last.cap, e.last.running, e.last.preempted), (2, 2, 2))
        box[0] = 6
        e.step()
        self.assertEqual((e.last.cap, e.last.running, e.last.resumed, e.last.admitted),
                         (6, 6, 2, 2))
        box[0] = 0  # not a count: 1
        e.step()
        self.assertEqual((e.last.cap, e.last.running), (1, 1))

    def test_requests_are_checked(self):
        e = self.engine([4])
        e.add_request("x", [1, 2], eng.SamplingParams(max_tokens=3))
        with self.assertRaises(ValueError):
            e.add_request("x", [1, 2], eng.SamplingParams(max_tokens=3))  # id in use
        with self.assertRaises(ValueError):
            e.add_request("y", [1] * 20, eng.SamplingParams(max_tokens=10))  # > max_len 29
        with self.assertRaises(ValueError):
            eng.SamplingParams(max_tokens=3, min_tokens=4)
        with self.assertRaises(ValueError):
            eng.SamplingParams(max_tokens=3, eos_token_id=5, allowed_token_ids=[1, 2])


class Lengths(unittest.TestCase):
    def test_long_tailed_under_the_initial_model(self):
        args = small_args()
        torch.manual_seed(args.seed)  # as train.py builds its initial model
        v = grpo.vocab(args.digits)
        model = grpo.TinyLM(v["size"], args.length + 2 + args.max_completion_len, args.d_model,
                            args.layers, args.heads).eval()
        params = grpo.sampling_params(args)
        prompts = grpo.make_prompts(torch.Generator().manual_seed(1), 128, args.length, 10)
        e = eng.LLMEngine(model, cap=lambda: 16, generator=torch.Generator().manual_seed(7))
        outs, _ = run_engine(e, [(i, prompts[i].tolist(), params) for i in range(128)])
        lengths = [len(o.token_ids) for o in outs.values()]
        st = eng.length_stats(lengths)
        print("initial model, --small: completion lengths %s" % st)
        self.assertGreater(st["p90"] / st["p50"], LONG_TAIL)
        self.assertGreaterEqual(min(lengths), args.length + 1)  # no EOS before the answer...
        self.assertLessEqual(st["max"], args.max_completion_len)
        for o in outs.values():  # ... and the answer's tokens are digits
            self.assertTrue(all(t < 10 for t in o.token_ids[:args.length]))
            self.assertEqual(o.finish_reason == "stop", o.token_ids[-1] == v["eos"])
        self.assertEqual(eng.length_stats([3, 1, 2, 10]),
                         {"mean": 4.0, "p50": 2, "p90": 10, "max": 10})

    def test_reward_penalises_tokens_after_the_answer(self):
        eos = grpo.vocab(10)["eos"]
        prompts = torch.tensor([[11, 1, 2, 3, 10]] * 4)
        comps, mask = grpo.pad_completions([[3, 2, 1, eos], [3, 2, 1, 5, 5, eos],
                                            [3, 0, 1, 5], [3, 2, 1]], eos)
        self.assertEqual(grpo.extra_tokens(comps, mask, 3, eos).tolist(), [0, 2, 1, 0])
        acc = grpo.rewards_of(prompts, comps).tolist()
        self.assertEqual([round(x, 4) for x in acc], [1.0, 1.0, 0.6667, 1.0])


class Pacing(unittest.TestCase):
    def test_cost_model_is_the_scenario(self):
        path = os.path.join(ROOT, "scenarios", "a100-7b-tp1-vllm.toml")
        built_in = eng.CostModel()
        from_file = eng.CostModel.from_scenario(path)
        self.assertEqual({k: v for k, v in vars(built_in).items() if k != "source"},
                         {k: v for k, v in vars(from_file).items() if k != "source"})
        c = built_in
        for n, ms in [(8, 10.8), (16, 13.0), (64, 19.2), (256, 45.7)]:  # the docstring's
            self.assertAlmostEqual(c.decode_step_s(n) * 1e3, ms, delta=0.2)
        m = c.decode_n_min  # continuous at n_min, rising below it
        self.assertAlmostEqual(c.decode_step_s(m - 1e-9), c.decode_step_s(m), places=6)
        self.assertLess(c.decode_step_s(1), c.decode_step_s(4))
        self.assertEqual(c.decode_step_s(0), 0.0)

    def test_a_step_lasts_its_target(self):
        now = [0.0]
        slept = []

        def sleep(s):
            slept.append(s)
            now[0] += s
        pacer = eng.Pacer(0.5, eng.CostModel(), tokens_per_token=10, clock=lambda: now[0],
                          sleep=sleep)
        e = eng.LLMEngine(small_model(), cap=lambda: 3,
                          generator=torch.Generator().manual_seed(0), pacer=pacer)
        for i in range(3):
            e.add_request(i, [1, 2, 3, 4], eng.SamplingParams(max_tokens=2))
        e.step()
        c = eng.CostModel()
        want = 0.5 * 10 * (c.decode_step_s(3) + 12 / c.prefill_tokens_per_s)
        self.assertAlmostEqual(e.last.target_s, want, places=12)
        self.assertAlmostEqual(now[0], want, places=12)  # the fake clock did not move itself
        e.step()
        self.assertAlmostEqual(e.last.target_s, 0.5 * 10 * c.decode_step_s(3), places=12)
        self.assertEqual(len(slept), 2)
        self.assertEqual(eng.Pacer().engine_step_s(100, 100), 0.0)  # time_scale 0: no pacing


class Trainer(unittest.TestCase):
    def test_engine_log_and_paced_phases(self):
        with tempfile.TemporaryDirectory() as tmp:
            log, out = os.path.join(tmp, "engine.jsonl"), os.path.join(tmp, "run.json")
            args = small_args("--steps", "3", "--safe-concurrency", "6", "--time-scale", "0.001",
                              "--engine-log", log, "--json", out)
            run = grpo.train(0, 1, args)
            with open(log) as f:
                lines = [json.loads(x) for x in f]
            with open(out) as f:
                self.assertEqual(json.load(f)["steps"], run["steps"])
        self.assertEqual(sorted({x["step"] for x in lines}), [0, 1, 2])
        self.assertEqual([x["engine_step"] for x in lines], list(range(len(lines))))
        for x in lines:
            self.assertEqual(x["cap"], 6)
            self.assertLessEqual(x["running"], x["cap"])
            if x["waiting"]:
                self.assertGreaterEqual(x["running"], OCCUPANCY * x["cap"])
            self.assertGreater(x["target_s"], 0)
        pacer = eng.Pacer(0.001, eng.CostModel(), 1024 / args.max_completion_len)
        for rec in run["steps"]:
            mine = [x for x in lines if x["step"] == rec["step"]]
            self.assertEqual(rec["engine_steps"], len(mine))
            self.assertEqual(rec["caps"], [[6, len(mine)]])
            self.assertGreaterEqual(rec["seconds"]["rollout"], sum(x["target_s"] for x in mine))
            self.assertGreaterEqual(rec["seconds"]["sync"], pacer.sync_s())
            ln = rec["lengths"]
            self.assertTrue(args.length + 1 <= ln["p50"] <= ln["p90"] <= ln["max"]
                            <= args.max_completion_len, ln)
            self.assertGreaterEqual(rec["seconds"]["train"],
                                    pacer.train_s(16 * 8 * (args.length + 2 + ln["mean"]))
                                    * 0.999)
            self.assertEqual(rec["tokens"] - (run["steps"][rec["step"] - 1]["tokens"]
                                              if rec["step"] else 0),
                             sum(x["running"] for x in mine))
        self.assertEqual(run["cost_model"]["time_scale"], 0.001)
        self.assertTrue(math.isclose(run["cost_model"]["tokens_per_token"],
                                     1024 / args.max_completion_len))


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)

#!/usr/bin/python3
"""GRPO in plain PyTorch on a digit-reversal task, steered by a headroom agent.

A small decoder-only transformer learns, from reinforcement alone (no supervised warm-up), to
write the reverse of a string of digits and then stop. Each step it samples completions with a
rollout engine shaped like vLLM's LLMEngine (engine.py: continuous batching under a running cap,
a KV cache per sequence, sampled EOS so that lengths are long-tailed), scores them, and takes a
clipped policy-gradient step with a KL term to the initial model. The agent decides the group
size (completions per prompt, read at the step boundary) and the concurrency (the engine's
running cap, kept current by a CapFollower thread and read at every engine step); the trainer
reports its phases through a Heartbeat. Without an agent it runs on the safe values.

    build/bin/headroom agent --source twin --scenario a100-7b-tp1 --controller ppo \\
        --policy policies/a100-7b-tp1.json --speed 20 --listen 127.0.0.1:10470 &
    /usr/bin/python3 examples/grpo_torch/train.py --steps 100 --json run.json

The loop, top to bottom (one step): step boundary (holds, group size) -> rollout (every request
added to the engine, step() until none is left, the cap re-read at every engine step) ->
rewards and group-relative advantages -> logprob (old policy, frozen reference) -> train
(minibatches of the clipped loss + KL, gradients all-reduced) -> sync (rollout weights
refreshed, ranks checked identical) -> checkpoint (every --checkpoint-every). --time-scale S
stretches engine steps and phases to S x their duration for a 7B model on one A100.
README.md beside this file: the task, the engine, the cost model, the measured reward curves.
"""

import argparse
import copy
import dataclasses
import datetime
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "..", "clients", "python"))
sys.path.insert(0, _HERE)  # engine.py
from headroom_client import (AgentClient, CapFollower, CollectiveTimeoutError,  # noqa: E402
                             HeadroomCallback, ThreadConcurrencyGate)

# One core per rank unless told otherwise: torch.set_num_threads (--threads) does not reach the
# BLAS library's own thread pool, which would otherwise take every core.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from engine import CostModel, LLMEngine, Pacer, SamplingParams, length_stats
except ImportError:  # the math below is importable for --help; main() says what is missing
    torch = None

# ---------------------------------------------------------------------------------------------
# Configuration: every knob with a one-line description. Size flags default to None and are
# filled from a preset (DEFAULT, or SMALL with --small), so an explicit flag always wins.

DEFAULT = dict(d_model=64, layers=2, heads=4, length=5, digits=10, prompts_per_step=32,
               lr=3e-3, minibatches=2)
SMALL = dict(d_model=32, layers=1, heads=2, length=3, digits=10, prompts_per_step=16,
             lr=3e-3, minibatches=2)

COLLECTIVE_TIMEOUT_S = 24 * 3600.0  # gloo's timeout; holds may last an hour, standby longer
ADV_EPS = 1e-4  # (r - mean) / (std + ADV_EPS): a group whose rewards all agree gets 0
COMPLETION_LEN_PER_DIGIT = 8  # --max-completion-len's default: 8 x --length
FOLLOWER_STOP_S = 1.0  # at the end, how long to wait for the CapFollower's thread (a daemon)


def _preset(what, key):
    """A size flag's help: its default and its --small value."""
    return "%s (default %s; --small %s)" % (what, DEFAULT[key], SMALL[key])


def _agent_flags(p):
    """The agent: where it is, what to do without it, how to follow it."""
    g = p.add_argument_group("agent")
    g.add_argument("--agent", default="http://127.0.0.1:10470",
                   help="the agent's base URL (default %(default)s)")
    g.add_argument("--token", help="bearer token of the agent's API")
    g.add_argument("--safe-concurrency", type=int, default=16, metavar="N",
                   help="concurrency used while no agent answers (default %(default)s)")
    g.add_argument("--safe-group-size", type=int, default=8, metavar="G",
                   help="group size used while no agent answers (default %(default)s)")
    g.add_argument("--max-group-size", type=int, default=16, metavar="G",
                   help="the agent's group size is clipped to [1, G] (default %(default)s)")
    g.add_argument("--heartbeat-s", type=float, default=2.0, metavar="S",
                   help="the phase, progress and in_flight re-sent to the agent at least this "
                        "often (default %(default)s)")
    g.add_argument("--follow-wait-s", type=float, default=10.0, metavar="S",
                   help="the cap follower's long-poll of the agent (default %(default)s)")


def _run_flags(p):
    """The run: steps, seed, ranks, outputs."""
    g = p.add_argument_group("run")
    g.add_argument("--steps", type=int, default=100, help="GRPO steps (default %(default)s)")
    g.add_argument("--seed", type=int, default=1,
                   help="seed of prompts, initial model and sampling (default %(default)s)")
    g.add_argument("--ranks", type=int, default=1, metavar="N",
                   help="processes (torch.distributed gloo on 127.0.0.1), one rollout engine "
                        "each; prompts are split across them, gradients all-reduced; every "
                        "rank reads the agent, rank 0 reports (default %(default)s)")
    g.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch threads per rank (default %(default)s); the BLAS library's: "
                        "OPENBLAS_NUM_THREADS, 1 unless set")
    g.add_argument("--small", action="store_true",
                   help="the small preset of the size flags below (the tests')")
    g.add_argument("--json", metavar="PATH",
                   help="write the run here: per-step records (rewards, completion lengths, "
                        "caps), decisions applied and seen, each rank's parameter digest")
    g.add_argument("--decisions-log", metavar="PATH",
                   help="JSONL: every decision applied (step boundaries, cap changes)")
    g.add_argument("--phase-log", metavar="PATH",
                   help="JSONL (rank 0): every report to the agent as it was sent and taken: "
                        "sent_unix_s, acked_unix_s, step, phase, ok (make rehearsal compares the "
                        "agent's decisions with it)")
    g.add_argument("--collective-timeout-s", type=float, default=COLLECTIVE_TIMEOUT_S,
                   metavar="S",
                   help="gloo's timeout with --ranks > 1, compared at start with the agent's "
                        "longest hold (max_hold_s): the run is refused when a hold could outlast "
                        "it (default %(default)g)")
    g.add_argument("--engine-log", metavar="PATH",
                   help="JSONL: every engine step (running, cap in force, waiting, admitted, "
                        "finished, seconds); rank r > 0 writes PATH.rank<r>")
    g.add_argument("--out", metavar="DIR",
                   help="checkpoint directory: DIR/checkpoint.pt, replaced atomically "
                        "(none: no checkpoints)")
    g.add_argument("--checkpoint-every", type=int, default=25, metavar="STEPS",
                   help="steps between checkpoints, with --out; 0: none (default %(default)s)")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _model_flags(p):
    """The model and the task (sizes from the presets)."""
    g = p.add_argument_group("model and task")
    g.add_argument("--d-model", type=int, metavar="D", help=_preset("embedding width", "d_model"))
    g.add_argument("--layers", type=int, metavar="N",
                   help=_preset("transformer blocks", "layers"))
    g.add_argument("--heads", type=int, metavar="N",
                   help=_preset("attention heads, dividing --d-model", "heads"))
    g.add_argument("--untied", action="store_true",
                   help="a separate output head (default: tied to the token embedding)")
    g.add_argument("--length", type=int, metavar="L",
                   help=_preset("digits per string: the prompt, and the answer", "length"))
    g.add_argument("--digits", type=int, metavar="N",
                   help=_preset("alphabet: digits 0 .. N-1, N in 2 .. 10", "digits"))
    g.add_argument("--prompts-per-step", type=int, metavar="P",
                   help=_preset("prompts per step over all ranks, a multiple of --ranks",
                               "prompts_per_step"))


def _engine_flags(p):
    """The rollout engine: completion lengths, reward shaping, pacing."""
    g = p.add_argument_group("rollout engine")
    g.add_argument("--max-completion-len", type=int, metavar="T",
                   help="completion tokens at most, the EOS included; an EOS may be sampled "
                        "once the answer's L digits are out (default %d x --length)"
                        % COMPLETION_LEN_PER_DIGIT)
    g.add_argument("--length-penalty", type=float, default=0.01, metavar="P",
                   help="subtracted from the reward per token after the answer, the closing "
                        "EOS aside (default %(default)s)")
    g.add_argument("--time-scale", type=float, default=0.0, metavar="S",
                   help="stretch each engine step and the logprob, train and sync phases to S "
                        "x their duration for a 7B model on one A100 (engine.CostModel); 1: "
                        "real time, phases of minutes; 0: no stretching (default %(default)s)")
    g.add_argument("--cost-scenario", metavar="TOML",
                   help="a twin scenario file for the cost model (default: the constants of "
                        "scenarios/a100-7b-tp1-vllm.toml, built in)")


def _grpo_flags(p):
    """GRPO's hyperparameters."""
    g = p.add_argument_group("GRPO")
    g.add_argument("--lr", type=float, help=_preset("AdamW learning rate", "lr"))
    g.add_argument("--minibatches", type=int, metavar="N",
                   help=_preset("optimizer steps per pass over a rollout", "minibatches"))
    g.add_argument("--epochs", type=int, default=1, metavar="N",
                   help="passes over each rollout (default %(default)s)")
    g.add_argument("--clip", type=float, default=0.2, metavar="EPS",
                   help="PPO ratio clip: ratio kept in [1-EPS, 1+EPS] (default %(default)s)")
    g.add_argument("--kl-coef", type=float, default=0.001, metavar="BETA",
                   help="weight of the k3 KL estimate to the frozen initial model "
                        "(default %(default)s: the initial model ends a completion at each "
                        "token with p ~ 1/11, so a policy that learned to stop is far from "
                        "it; README.md)")
    g.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature (default %(default)s)")
    g.add_argument("--max-grad-norm", type=float, default=1.0, metavar="NORM",
                   help="gradient norm clip; 0: none (default %(default)s)")
    g.add_argument("--weight-decay", type=float, default=0.0,
                   help="AdamW weight decay (default %(default)s)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="train.py",
        description="GRPO on digit reversal in plain PyTorch, steered by a headroom agent "
                    "(group size at step boundaries, the rollout engine's running cap at "
                    "every engine step). Without an agent it runs on --safe-concurrency and "
                    "--safe-group-size.",
        epilog="example: train.py --steps 100 --json run.json --engine-log engine.jsonl"
               "  (README.md beside this file: running it beside `headroom agent`)")

    def one_line_error(message):  # bad flags: one clear line, exit 2
        sys.stderr.write("train.py: error: %s (see --help)\n" % message)
        sys.exit(2)
    p.error = one_line_error
    for add in (_agent_flags, _run_flags, _model_flags, _engine_flags, _grpo_flags):
        add(p)

    a = p.parse_args(argv)
    for k, v in (SMALL if a.small else DEFAULT).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.max_completion_len is None and a.length is not None and a.length > 0:
        a.max_completion_len = COMPLETION_LEN_PER_DIGIT * a.length

    positive = ["steps", "ranks", "threads", "safe_concurrency", "safe_group_size",
                "max_group_size", "d_model", "layers", "heads", "length", "prompts_per_step",
                "minibatches", "epochs"]
    for k in positive:
        if getattr(a, k) < 1:
            p.error("--%s must be >= 1, not %d" % (k.replace("_", "-"), getattr(a, k)))
    if a.checkpoint_every < 0:
        p.error("--checkpoint-every must be >= 0")
    if not 2 <= a.digits <= 10:
        p.error("--digits must be in 2 .. 10, not %d" % a.digits)
    if a.d_model % a.heads:
        p.error("--heads (%d) must divide --d-model (%d)" % (a.heads, a.d_model))
    if a.prompts_per_step % a.ranks:
        p.error("--prompts-per-step (%d) must be a multiple of --ranks (%d)" %
                (a.prompts_per_step, a.ranks))
    if a.max_completion_len < a.length:
        p.error("--max-completion-len (%d) must be >= --length (%d)" %
                (a.max_completion_len, a.length))
    for k in ["lr", "temperature", "heartbeat_s", "collective_timeout_s"]:
        if not getattr(a, k) > 0 or not math.isfinite(getattr(a, k)):
            p.error("--%s must be > 0" % k.replace("_", "-"))
    for k in ["clip", "kl_coef", "max_grad_norm", "weight_decay", "length_penalty",
              "time_scale", "follow_wait_s"]:
        if not getattr(a, k) >= 0 or not math.isfinite(getattr(a, k)):
            p.error("--%s must be >= 0" % k.replace("_", "-"))
    if a.cost_scenario and not os.path.isfile(a.cost_scenario):
        p.error("--cost-scenario %s: no such file" % a.cost_scenario)
    return a


# ---------------------------------------------------------------------------------------------
# The task: reverse a string of digits. Prompt = [BOS, d_1 .. d_L, SEP]; completion = the
# answer d_L .. d_1, then EOS. The completion is sampled among the digits and EOS, EOS only once
# L digits are out, and ends at EOS or at --max-completion-len tokens: its length is the
# model's choice, long-tailed under the initial model. Reward = the fraction of the first L
# tokens equal to d_L .. d_1 (dense and verifiable: a random model scores 1/digits), minus
# --length-penalty per token after them, the closing EOS aside.

def vocab(digits):
    """Token ids: digits 0 .. digits-1, then SEP, BOS, EOS."""
    return {"sep": digits, "bos": digits + 1, "eos": digits + 2, "size": digits + 3}


def make_prompts(gen, n, length, digits):
    v = vocab(digits)
    body = torch.randint(0, digits, (n, length), generator=gen)
    return torch.cat([torch.full((n, 1), v["bos"]), body, torch.full((n, 1), v["sep"])], 1)


def sampling_params(args):
    """The engine's sampling of one completion (vLLM's SamplingParams, its min_tokens)."""
    v = vocab(args.digits)
    return SamplingParams(max_tokens=args.max_completion_len, min_tokens=args.length,
                          temperature=args.temperature, eos_token_id=v["eos"],
                          allowed_token_ids=tuple(range(args.digits)) + (v["eos"],))


def pad_completions(token_lists, pad):
    """Completions of varying length -> (tokens [n, T] padded with `pad`, mask [n, T] bool)."""
    width = max(len(t) for t in token_lists)
    tokens = torch.full((len(token_lists), width), pad, dtype=torch.long)
    mask = torch.zeros(len(token_lists), width, dtype=torch.bool)
    for i, t in enumerate(token_lists):
        tokens[i, :len(t)] = torch.tensor(t, dtype=torch.long)
        mask[i, :len(t)] = True
    return tokens, mask


def rewards_of(prompts, completions):
    """Fraction of the first L completion tokens equal to the reversed prompt digits. [n]."""
    target = prompts[:, 1:-1].flip(1)
    return (completions[:, :target.shape[1]] == target).float().mean(1)


def extra_tokens(completions, mask, length, eos):
    """Tokens after the answer's L, the closing EOS aside (0 for the answer then EOS). [n]."""
    n_tok = mask.sum(1)
    last = completions.gather(1, (n_tok - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    return (n_tok - length - (last == eos).long()).clamp(min=0)


# ---------------------------------------------------------------------------------------------
# The model: token + position embeddings, pre-norm blocks (causal self-attention, MLP), final
# norm, head tied to the token embedding unless --untied. forward() runs whole sequences (the
# trainer's log-probabilities); forward_cached() runs new tokens against a KV cache (the
# engine: prefill, then one token per sequence per step).

class Block(nn.Module if torch else object):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x, causal):
        t = x.shape[1]
        q, k, v = self._qkv(x)
        x = x + self._attend(q, k, v, causal[:t, :t])
        return x + self._mlp(x)

    def forward_cached(self, x, positions, k_cache, v_cache, slots):
        """x [n, t, c]: new tokens at `positions` [n, t] of the sequences in cache rows
        `slots` [n]. Writes their keys and values into the cache, attends to every cached
        position up to each query's own."""
        q, k, v = self._qkv(x)  # [n, heads, t, head_dim]
        rows = slots.unsqueeze(1)
        k_cache[rows, :, positions] = k.transpose(1, 2)  # [n, t, heads, head_dim]
        v_cache[rows, :, positions] = v.transpose(1, 2)
        span = int(positions.max()) + 1
        keys, values = k_cache[slots, :, :span], v_cache[slots, :, :span]
        visible = torch.arange(span) <= positions.unsqueeze(-1)  # [n, t, span]
        x = x + self._attend(q, keys, values, visible.unsqueeze(1))
        return x + self._mlp(x)

    def _qkv(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        return [z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v)]

    def _attend(self, q, k, v, visible):
        b, h, t, dh = q.shape
        att = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
        att = att.masked_fill(~visible, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, h * dh))

    def _mlp(self, x):
        return self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module if torch else object):
    def __init__(self, vocab_size, max_len, d_model, layers, heads, tied=True):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if tied:
            self.head.weight = self.tok.weight
        self.register_buffer("causal", torch.ones(max_len, max_len, dtype=torch.bool).tril(),
                             persistent=False)
        for m in self.modules():  # GPT-2's init: a random model is close to uniform
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for blk in self.blocks:
            x = blk(x, self.causal)
        return self.head(self.ln(x))

    def forward_cached(self, tokens, positions, cache, slots):
        """Logits [n, t, vocab] of `tokens` [n, t] at `positions` [n, t], the sequences' keys
        and values read from and written to `cache` (engine.KVCache) rows `slots` [n]."""
        x = self.tok(tokens) + self.pos(positions)
        for blk, k, v in zip(self.blocks, cache.k, cache.v):
            x = blk.forward_cached(x, positions, k, v, slots)
        return self.head(self.ln(x))

    def cache_shape(self):
        """(layers, heads, head_dim, max_len): what a KV cache for this model holds."""
        d = self.tok.weight.shape[1]
        return len(self.blocks), self.heads, d // self.heads, self.pos.weight.shape[0]


def completion_logits(logits, digits, length, temperature):
    """Logits [n, T, vocab] at completion positions 0 .. T-1 -> the distribution sampled from:
    tempered, the digits and EOS only, EOS only from position `length` on."""
    eos = vocab(digits)["eos"]
    allowed = torch.zeros(logits.shape[-1], dtype=torch.bool)
    allowed[:digits] = True
    allowed[eos] = True
    logits = (logits / temperature).masked_fill(~allowed, float("-inf"))
    logits[..., :length, eos] = float("-inf")
    return logits


def completion_logprobs(model, prompts, completions, digits, length, temperature):
    """log pi(completion token | prefix) at every completion position (padding included:
    mask it). [n, T]."""
    seq = torch.cat([prompts, completions], 1)
    logits = model(seq[:, :-1])[:, prompts.shape[1] - 1:, :]
    logp = completion_logits(logits, digits, length, temperature).log_softmax(-1)
    return logp.gather(-1, completions.unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------------------------------------
# GRPO's math, each piece a function the test checks against a hand computation.

def group_advantages(rewards, eps=ADV_EPS):
    """rewards [prompts, group] -> (r - mean over the group) / (std over the group + eps).
    std is the unbiased one (TRL's GRPO); a group of one has no baseline: advantage 0."""
    if rewards.shape[1] < 2:
        return torch.zeros_like(rewards)
    mean = rewards.mean(1, keepdim=True)
    std = rewards.std(1, keepdim=True)
    return (rewards - mean) / (std + eps)


def clipped_objective(logp, old_logp, adv, clip):
    """PPO's clipped surrogate per token: min(ratio * A, clip(ratio, 1-e, 1+e) * A), ratio =
    exp(logp - old_logp); adv broadcast over the tokens of its sequence. To be maximised.
    Returns (objective [n, T], whether each token's ratio was clipped [n, T])."""
    ratio = torch.exp(logp - old_logp)
    a = adv.unsqueeze(-1) if adv.dim() == logp.dim() - 1 else adv
    unclipped = ratio * a
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * a
    return torch.minimum(unclipped, clipped), (clipped < unclipped)


def k3_kl(logp, ref_logp):
    """The k3 estimator of KL(pi || ref) per sampled token (Schulman): with x ~ pi and
    d = log ref(x) - log pi(x), exp(d) - d - 1 >= 0, unbiased, lower variance than -d."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


# ---------------------------------------------------------------------------------------------
# Ranks, and the agent's client.

def param_digest(model):
    """sha256 of every parameter's bytes, in order: equal digests = identical models."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def all_reduce_sum(t, world):
    if world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


class CountingClient(AgentClient):
    """AgentClient that counts its requests by kind, so a run shows who talked to the agent.
    Thread-safe, as AgentClient: the cap follower and the heartbeat share it."""

    def __init__(self, *args, phase_log=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._count_lock = threading.Lock()
        self.requests = {"actuation": 0, "actuation_for_step": 0, "report": 0, "status": 0}
        self._phase_log = phase_log  # an open file, or None

    def _count(self, kind):
        with self._count_lock:
            self.requests[kind] += 1

    def actuation(self, wait_s=0.0, **kwargs):
        self._count("actuation")
        return super().actuation(wait_s, **kwargs)

    def actuation_for_step(self, step):
        self._count("actuation_for_step")
        return super().actuation_for_step(step)

    def report(self, step, phase, *args, **kwargs):
        self._count("report")
        sent = time.time()
        ok = super().report(step, phase, *args, **kwargs)
        if self._phase_log is not None:
            line = json.dumps({"sent_unix_s": sent, "acked_unix_s": time.time(), "step": step,
                               "phase": phase, "ok": bool(ok)})
            with self._count_lock:  # the heartbeat's thread and the loop's
                self._phase_log.write(line + "\n")
                self._phase_log.flush()
        return ok

    def status(self, *args, **kwargs):
        self._count("status")
        return super().status(*args, **kwargs)


def runs(values):
    """[16, 16, 16, 4, 8, 8] -> [[16, 3], [4, 1], [8, 2]]: values with their repeat counts."""
    out = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def runs_text(pairs):
    """[[16, 3], [4, 1]] -> "16x3,4"."""
    return ",".join("%dx%d" % (v, n) if n > 1 else str(v) for v, n in pairs)


def rendezvous_file():
    """A file the ranks meet through (torch's FileStore): a new path in a directory of its own.
    A port picked free and bound later by the store could be taken meanwhile by another program
    (two runs, or tests, starting at once); a file cannot."""
    return os.path.join(tempfile.mkdtemp(prefix="grpo-rendezvous-"), "store")


@dataclasses.dataclass
class Rollout:
    """One step's completions on this rank, prompt-major ([p0 x G, p1 x G, ...])."""
    prompts: "torch.Tensor"      # [n, L + 2]
    completions: "torch.Tensor"  # [n, T], padded with EOS
    mask: "torch.Tensor"         # [n, T] bool: the completion's own tokens
    reward: "torch.Tensor" = None    # [n]
    accuracy: "torch.Tensor" = None  # [n]
    extra: "torch.Tensor" = None     # [n] tokens after the answer, the closing EOS aside
    eos: "torch.Tensor" = None       # [n] bool: ended on EOS (else at --max-completion-len)

    @property
    def seq_tokens(self):
        """Prompt and completion tokens: what a logprob or train pass processes."""
        return self.prompts.numel() + int(self.mask.sum())


# ---------------------------------------------------------------------------------------------
# The trainer (one rank).

class Trainer:
    """One rank of the run: its models, rollout engine, agent client, cap follower, records.
    Driven by one thread (run()); the cap follower's thread resizes the gate and appends to
    `decisions` and `seen` (list.append: atomic)."""

    def __init__(self, rank, world, args, rendezvous=None):
        torch.set_num_threads(args.threads)
        if world > 1:
            # While one rank waits out a site's hold, the others wait in a collective: a hold
            # must not look like a dead peer (a dead rank ends the run through spawn).
            dist.init_process_group("gloo", init_method="file://" + rendezvous,
                                    rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=args.collective_timeout_s))
        # Constant after construction.
        self.rank, self.world, self.args, self.lead = rank, world, args, rank == 0
        self.v = vocab(args.digits)
        self.local_prompts = args.prompts_per_step // world
        self.params = sampling_params(args)
        torch.manual_seed(args.seed)  # the same initial model on every rank
        self.policy = TinyLM(self.v["size"], args.length + 2 + args.max_completion_len,
                             args.d_model, args.layers, args.heads, tied=not args.untied)
        self.reference = copy.deepcopy(self.policy).eval().requires_grad_(False)  # frozen
        self.rollout_model = copy.deepcopy(self.policy).eval().requires_grad_(False)
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=args.lr,
                                     weight_decay=args.weight_decay)
        self.prompt_gen = torch.Generator().manual_seed(args.seed)  # same prompts on every rank
        sample_gen = torch.Generator().manual_seed(args.seed * 7919 + 1 + rank)  # per rank
        # The agent: every rank reads it for its steps; rank 0 reports, through a heartbeat.
        self.phase_log = open(args.phase_log, "w") if args.phase_log and rank == 0 else None
        self.client = CountingClient(args.agent, token=args.token, phase_log=self.phase_log,
                                     safe_concurrency=args.safe_concurrency,
                                     safe_group_size=args.safe_group_size)
        self.cb = HeadroomCallback(self.client, heartbeat=True,
                                   heartbeat_period_s=args.heartbeat_s,
                                   collective_timeout_s=args.collective_timeout_s if world > 1 else None)
        self.gate = ThreadConcurrencyGate(args.safe_concurrency)  # holds the engine's cap
        self.follower = CapFollower(self.client, [self.gate], wait_s=args.follow_wait_s,
                                    on_change=self._cap_changed)
        cost = CostModel.from_scenario(args.cost_scenario) if args.cost_scenario else CostModel()
        self.pacer = Pacer(args.time_scale, cost, cost.max_new_tokens / args.max_completion_len)
        self.engine = LLMEngine(self.rollout_model, cap=lambda: self.gate.limit,
                                generator=sample_gen, pacer=self.pacer,
                                on_step=self._engine_stepped)
        # The run's state and records (this thread's).
        self.step = 0
        self.tokens = 0.0  # completion tokens generated so far, all ranks
        self.steps, self.decisions, self.seen, self.groups = [], [], [], []
        self.step_engine = []  # this step's engine StepStats
        self.engine_log = None
        if args.engine_log:
            path = args.engine_log + (".rank%d" % rank if rank else "")
            self.engine_log = open(path, "w")

    # -- the run

    def run(self):
        """args.steps GRPO steps; rank 0 returns the run's record, the others None."""
        t_start = time.perf_counter()
        if self.lead and not self.args.quiet:
            cfg = {k: x for k, x in sorted(vars(self.args).items()) if k != "token"}
            print("grpo: %d parameters, %d rank(s), config %s" %
                  (sum(p.numel() for p in self.policy.parameters()), self.world,
                   json.dumps(cfg)), file=sys.stderr, flush=True)
        self.cb.on_train_begin()  # startup; the agent's longest hold against gloo's timeout
        self.follower.start()
        try:
            for step in range(self.args.steps):
                self.one_step(step)
        finally:
            self.follower.stop(FOLLOWER_STOP_S)
            if self.engine_log:
                self.engine_log.close()
        self.cb.on_train_end()  # stopped; the heartbeat sends what it holds
        return self.finish(time.perf_counter() - t_start)

    def one_step(self, step):
        sec = {}
        self.step = step
        group = self.step_boundary(step, sec)
        batch = self.rollout(group, sec)
        self.score(batch)
        adv = group_advantages(batch.reward.view(self.local_prompts, group)).reshape(-1)
        old_logp, ref_logp = self.logprobs(batch, sec)
        stats = self.optimize(batch, adv, old_logp, ref_logp, sec)
        sums, lengths = self.sync(step, batch, stats, sec)
        self.checkpoint(step, sec)
        self.cb.on_step_end(tokens=self.tokens)
        self.record(step, group, sums, lengths, sec)

    # -- the phases of a step

    def step_boundary(self, step, sec):
        """The site's holds, then the group size for the whole step (the same on every rank:
        the agent fixes it at the step's first read)."""
        t0 = time.perf_counter()
        a = self.cb.on_step_begin(step=step, tokens=self.tokens)
        self.seen.append(dict(a, step=step, where="step_begin"))
        group = min(max(int(self.cb.group_size), 1), self.args.max_group_size)
        self.groups.append(group)
        self.decisions.append({"step": step, "phase": "step_begin",
                               "concurrency": int(a["concurrency"]), "group_size": group,
                               "seq": a.get("seq")})
        sec["idle"] = time.perf_counter() - t0
        return group

    def rollout(self, group, sec):
        """This rank's prompts x `group` completions through the engine: all added, then
        step() until none is left, the cap read at every engine step."""
        t0 = time.perf_counter()
        a = self.args
        everyone = make_prompts(self.prompt_gen, a.prompts_per_step, a.length, a.digits)
        mine = everyone[self.rank * self.local_prompts:(self.rank + 1) * self.local_prompts]
        prompts = mine.repeat_interleave(group, 0)
        n = prompts.shape[0]
        for i in range(n):
            self.engine.add_request(i, prompts[i].tolist(), self.params)
        self.step_engine = []
        outs, generated = [None] * n, 0
        self.cb.on_phase("rollout", tokens=self.tokens, in_flight=0, progress=0.0, engines=1,
                         admission="continuous")
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                outs[out.request_id] = out
            generated += self.engine.last.running
            left = self.engine.get_num_unfinished_requests()
            self.cb.on_phase("rollout", tokens=self.tokens + generated,
                             in_flight=self.engine.last.running, progress=(n - left) / n)
        completions, mask = pad_completions([o.token_ids for o in outs], self.v["eos"])
        self.tokens += all_reduce_sum(torch.tensor([float(generated)], dtype=torch.float64),
                                      self.world).item()
        sec["rollout"] = time.perf_counter() - t0
        return Rollout(prompts, completions, mask)

    def score(self, b):
        a = self.args
        b.accuracy = rewards_of(b.prompts, b.completions)
        b.extra = extra_tokens(b.completions, b.mask, a.length, self.v["eos"])
        b.reward = b.accuracy - a.length_penalty * b.extra.float()
        last = b.completions.gather(1, (b.mask.sum(1) - 1).unsqueeze(1)).squeeze(1)
        b.eos = last == self.v["eos"]

    def logprobs(self, b, sec):
        """The old policy's and the reference's log-probabilities of every completion token."""
        t0, m0 = time.perf_counter(), self.pacer.clock()
        self.cb.on_phase("logprob", tokens=self.tokens)
        a = self.args
        with torch.no_grad():
            old = completion_logprobs(self.policy, b.prompts, b.completions, a.digits, a.length,
                                      a.temperature)
            ref = completion_logprobs(self.reference, b.prompts, b.completions, a.digits,
                                      a.length, a.temperature)
        self.pacer.pad(m0, self.pacer.logprob_s(b.seq_tokens))
        sec["logprob"] = time.perf_counter() - t0
        return old, ref

    def optimize(self, b, adv, old_logp, ref_logp, sec):
        """--epochs x --minibatches AdamW steps on the clipped surrogate + KL, a mean over the
        completion tokens of all ranks (each rank divides its sum by the global token count of
        the minibatch, gradients are summed). Returns sums: loss, kl, clipped, tokens."""
        t0, m0 = time.perf_counter(), self.pacer.clock()
        self.cb.on_phase("train", tokens=self.tokens)
        a = self.args
        n_local = b.prompts.shape[0]
        bounds = [round(j * n_local / a.minibatches) for j in range(a.minibatches + 1)]
        stats = torch.zeros(4, dtype=torch.float64)
        for _ in range(a.epochs):
            for j in range(a.minibatches):  # never skipped: every rank makes the same calls
                sl = slice(bounds[j], bounds[j + 1])
                m = b.mask[sl]
                n_tok = all_reduce_sum(m.sum().double().reshape(1), self.world)
                logp = completion_logprobs(self.policy, b.prompts[sl], b.completions[sl],
                                           a.digits, a.length, a.temperature)
                obj, clipped = clipped_objective(logp, old_logp[sl], adv[sl], a.clip)
                kl = k3_kl(logp, ref_logp[sl])
                per_token = (-obj + a.kl_coef * kl) * m
                loss = per_token.sum() / n_tok.clamp(min=1.0).item()
                self.opt.zero_grad(set_to_none=False)
                loss.backward()
                if self.world > 1:  # average over ranks: every rank then takes the same step
                    for p in self.policy.parameters():
                        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                if a.max_grad_norm > 0:
                    nn.utils.clip_grad_norm_(self.policy.parameters(), a.max_grad_norm)
                self.opt.step()
                stats += torch.tensor([per_token.sum().item(), (kl * m).sum().item(),
                                       (clipped & m).sum().item(), m.sum().item()],
                                      dtype=torch.float64)
        self.pacer.pad(m0, self.pacer.train_s(a.epochs * b.seq_tokens))
        sec["train"] = time.perf_counter() - t0
        return stats

    def sync(self, step, b, stats, sec):
        """The rollout model takes the new weights; ranks checked identical; the step's sums
        and completion lengths of all ranks."""
        t0, m0 = time.perf_counter(), self.pacer.clock()
        self.cb.on_phase("sync", tokens=self.tokens)
        self.rollout_model.load_state_dict(self.policy.state_dict())
        lengths = b.mask.sum(1).tolist()
        if self.world > 1:
            digests = [None] * self.world
            dist.all_gather_object(digests, param_digest(self.policy))
            if len(set(digests)) != 1:
                raise RuntimeError("step %d: ranks' parameters differ: %s" % (step, digests))
            everyone = [None] * self.world
            dist.all_gather_object(everyone, lengths)
            lengths = [x for r in everyone for x in r]
        mine = torch.tensor([b.reward.sum().item(), b.accuracy.sum().item(), b.reward.numel(),
                             b.eos.sum().item(), b.extra.sum().item()], dtype=torch.float64)
        sums = all_reduce_sum(torch.cat([stats, mine]), self.world)
        self.pacer.pad(m0, self.pacer.sync_s())
        sec["sync"] = time.perf_counter() - t0
        return sums, lengths

    def checkpoint(self, step, sec):
        """Every --checkpoint-every steps with --out: rank 0 writes, then renames over."""
        a = self.args
        if not (a.out and a.checkpoint_every and (step + 1) % a.checkpoint_every == 0):
            return
        t0 = time.perf_counter()
        self.cb.on_phase("checkpoint", tokens=self.tokens)
        if self.lead:
            os.makedirs(a.out, exist_ok=True)
            path = os.path.join(a.out, "checkpoint.pt")
            torch.save({"step": step + 1, "model": self.policy.state_dict(),
                        "optimizer": self.opt.state_dict(), "config": vars(a)}, path + ".tmp")
            os.replace(path + ".tmp", path)
        sec["checkpoint"] = time.perf_counter() - t0

    # -- records

    def _cap_changed(self, a):
        """The follower's thread, after it resized the gate: the cap from the next engine
        step on."""
        rec = {"step": self.step, "phase": "cap", "engine_step": self.engine.steps,
               "concurrency": int(a["concurrency"]), "group_size": None, "seq": a.get("seq")}
        self.decisions.append(rec)
        self.seen.append(dict(a, step=self.step, where="follower"))

    def _engine_stepped(self, st):
        self.step_engine.append(st)
        if self.engine_log:
            rec = {"rank": self.rank, "step": self.step, "engine_step": st.index}
            rec.update((k, x) for k, x in dataclasses.asdict(st).items() if k != "index")
            self.engine_log.write(json.dumps(rec) + "\n")

    def record(self, step, group, sums, lengths, sec):
        es = self.step_engine
        waiting = [s for s in es if s.waiting > 0]
        rec = {"step": step, "group_size": group, "decided_group_size": int(self.cb.group_size),
               "reward": sums[4].item() / sums[6].item(),
               "accuracy": sums[5].item() / sums[6].item(),
               "eos_frac": sums[7].item() / sums[6].item(),
               "extra_tokens": sums[8].item() / sums[6].item(),
               "lengths": length_stats(lengths), "engine_steps": len(es),
               "caps": runs([s.cap for s in es]), "max_running": max(s.running for s in es),
               "occupancy_while_waiting": (sum(s.running / s.cap for s in waiting) /
                                           len(waiting) if waiting else None),
               "loss": sums[0].item() / sums[3].item(), "kl": sums[1].item() / sums[3].item(),
               "clip_frac": sums[2].item() / sums[3].item(), "tokens": self.tokens,
               "seconds": {k: round(x, 6) for k, x in sec.items()}}
        self.steps.append(rec)
        if self.lead and not self.args.quiet:
            ln = rec["lengths"]
            print("step %3d  reward %+.3f  acc %.3f  len %.1f p50 %d p90 %d max %d  group %2d  "
                  "cap %s  loss %+.4f  kl %.4f  clip %.3f  %.2f s" %
                  (step, rec["reward"], rec["accuracy"], ln["mean"], ln["p50"], ln["p90"],
                   ln["max"], group, runs_text(rec["caps"]), rec["loss"], rec["kl"],
                   rec["clip_frac"], sum(sec.values())), file=sys.stderr, flush=True)

    def finish(self, seconds_total):
        mine = {"rank": self.rank, "param_sha256": param_digest(self.policy),
                "group_sizes": self.groups, "engine_steps": [r["engine_steps"] for r in self.steps],
                "agent_requests": dict(self.client.requests)}
        by_rank = [mine]
        if self.world > 1:
            by_rank = [None] * self.world
            dist.all_gather_object(by_rank, mine)
            dist.destroy_process_group()
        if not self.lead:
            return None

        def mean(key, recs):
            return sum(r[key] for r in recs) / max(len(recs), 1)
        s = self.steps
        run = {"config": {k: x for k, x in vars(self.args).items() if k != "token"},
               "parameters": sum(p.numel() for p in self.policy.parameters()),
               "world": self.world, "seconds_total": seconds_total,
               "cost_model": dict(dataclasses.asdict(self.pacer.cost),
                                  tokens_per_token=self.pacer.tokens_per_token,
                                  time_scale=self.pacer.time_scale),
               "reward_first10": mean("reward", s[:10]), "reward_last10": mean("reward", s[-10:]),
               "accuracy_first10": mean("accuracy", s[:10]),
               "accuracy_last10": mean("accuracy", s[-10:]),
               "steps": s, "decisions": list(self.decisions), "decisions_seen": list(self.seen),
               "ranks": by_rank}
        a = self.args
        if a.json:
            with open(a.json + ".tmp", "w") as f:
                json.dump(run, f, indent=1)
            os.replace(a.json + ".tmp", a.json)
        if a.decisions_log:
            with open(a.decisions_log, "w") as f:
                for d in run["decisions"]:
                    f.write(json.dumps(d) + "\n")
        if not a.quiet:
            print("grpo: %d steps in %.1f s, reward %+.3f -> %+.3f, accuracy %.3f -> %.3f "
                  "(first 10 steps -> last 10)" %
                  (len(s), seconds_total, run["reward_first10"], run["reward_last10"],
                   run["accuracy_first10"], run["accuracy_last10"]), file=sys.stderr, flush=True)
        return run


def train(rank, world, args, rendezvous=None):
    """Runs args.steps GRPO steps as `rank` of `world`; rank 0 returns the run's record."""
    return Trainer(rank, world, args, rendezvous).run()


REFUSED_EXIT = 3  # a rank refused to start (CollectiveTimeoutError): its one line said why


def _train_or_refuse(rank, world, args, rendezvous=None):
    """train(), with a refusal to start said in one line and exit status REFUSED_EXIT."""
    try:
        return train(rank, world, args, rendezvous)
    except CollectiveTimeoutError as e:
        if rank == 0:
            print("train.py: %s" % e, file=sys.stderr, flush=True)
        sys.exit(REFUSED_EXIT)


def _spawned(rank, world, args, rendezvous):
    _train_or_refuse(rank, world, args, rendezvous)


def main(argv=None):
    args = parse_args(argv)
    if torch is None:
        print("train.py: needs PyTorch (import torch failed)", file=sys.stderr)
        return 1
    if args.ranks == 1:
        _train_or_refuse(0, 1, args)
        return 0
    import torch.multiprocessing as mp
    rendezvous = rendezvous_file()
    try:
        mp.spawn(_spawned, args=(args.ranks, args, rendezvous), nprocs=args.ranks, join=True)
    except mp.ProcessRaisedException as e:
        print("train.py: a rank failed: %s" % str(e).strip().splitlines()[-1], file=sys.stderr)
        return 1
    except mp.ProcessExitedException as e:
        if e.exit_code == REFUSED_EXIT:
            return 1  # rank 0 said why
        print("train.py: a rank exited: %s" % e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(os.path.dirname(rendezvous), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

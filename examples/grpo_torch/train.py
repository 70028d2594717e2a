#!/usr/bin/python3
"""GRPO in plain PyTorch on a digit-reversal task, steered by a headroom agent.

A small decoder-only transformer learns, from reinforcement alone (no supervised warm-up), to
write the reverse of a string of digits. Each step it samples completions in chunks of the
agent's current concurrency, scores them, and takes a clipped policy-gradient step with a KL
term to the initial model. The agent decides the group size (completions per prompt, read at
the step boundary) and the concurrency (sequences decoded at once, re-read between chunks);
the trainer reports its phases. Without an agent it runs on the safe values.

    build/bin/headroom agent --source twin --scenario a100-7b-tp1 --controller ppo \\
        --policy policies/a100-7b-tp1.json --speed 20 --listen 127.0.0.1:10470 &
    /usr/bin/python3 examples/grpo_torch/train.py --steps 100 --json run.json

The loop, top to bottom (one step): step boundary (holds, group size) -> rollout (chunks of the
current concurrency) -> rewards and group-relative advantages -> logprob (old policy, frozen
reference) -> train (minibatches of the clipped loss + KL, gradients all-reduced) -> sync
(rollout copy refreshed, ranks checked identical) -> checkpoint (every --checkpoint-every).
README.md beside this file: the task, the sizes, the measured reward curves.
"""

import argparse
import copy
import datetime
import hashlib
import json
import math
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))
from headroom_client import AgentClient, HeadroomCallback, batched  # noqa: E402

# One core per rank unless told otherwise: torch.set_num_threads (--threads) does not reach the
# BLAS library's own thread pool, which would otherwise take every core.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="train.py",
        description="GRPO on digit reversal in plain PyTorch, steered by a headroom agent "
                    "(group size at step boundaries, generation concurrency between chunks). "
                    "Without an agent it runs on --safe-concurrency and --safe-group-size.",
        epilog="example: train.py --steps 100 --json run.json --decisions-log decisions.jsonl"
               "  (README.md beside this file: running it beside `headroom agent`)")

    def one_line_error(message):  # bad flags: one clear line, exit 2
        sys.stderr.write("train.py: error: %s (see --help)\n" % message)
        sys.exit(2)
    p.error = one_line_error

    def preset(what, key):  # a size flag's help: its default and its --small value
        return "%s (default %s; --small %s)" % (what, DEFAULT[key], SMALL[key])

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

    g = p.add_argument_group("run")
    g.add_argument("--steps", type=int, default=100, help="GRPO steps (default %(default)s)")
    g.add_argument("--seed", type=int, default=1,
                   help="seed of prompts, initial model and sampling (default %(default)s)")
    g.add_argument("--ranks", type=int, default=1, metavar="N",
                   help="processes (torch.distributed gloo on 127.0.0.1); prompts are split "
                        "across them, gradients all-reduced; rank 0 alone talks to the agent "
                        "(default %(default)s)")
    g.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch threads per rank (default %(default)s); the BLAS library's: "
                        "OPENBLAS_NUM_THREADS, 1 unless set")
    g.add_argument("--small", action="store_true",
                   help="the small preset of the size flags below (the test's)")
    g.add_argument("--json", metavar="PATH",
                   help="write the run here: per-step records, decisions applied and seen, "
                        "each rank's parameter digest")
    g.add_argument("--decisions-log", metavar="PATH",
                   help="JSONL: every decision applied (step, phase, chunk, concurrency, "
                        "group_size, seq)")
    g.add_argument("--out", metavar="DIR",
                   help="checkpoint directory: DIR/checkpoint.pt, replaced atomically "
                        "(none: no checkpoints)")
    g.add_argument("--checkpoint-every", type=int, default=25, metavar="STEPS",
                   help="steps between checkpoints, with --out; 0: none (default %(default)s)")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    g = p.add_argument_group("model and task")
    g.add_argument("--d-model", type=int, metavar="D", help=preset("embedding width", "d_model"))
    g.add_argument("--layers", type=int, metavar="N",
                   help=preset("transformer blocks", "layers"))
    g.add_argument("--heads", type=int, metavar="N",
                   help=preset("attention heads, dividing --d-model", "heads"))
    g.add_argument("--untied", action="store_true",
                   help="a separate output head (default: tied to the token embedding)")
    g.add_argument("--length", type=int, metavar="L",
                   help=preset("digits per string, prompt and completion", "length"))
    g.add_argument("--digits", type=int, metavar="N",
                   help=preset("alphabet: digits 0 .. N-1, N in 2 .. 10", "digits"))
    g.add_argument("--prompts-per-step", type=int, metavar="P",
                   help=preset("prompts per step over all ranks, a multiple of --ranks",
                               "prompts_per_step"))

    g = p.add_argument_group("GRPO")
    g.add_argument("--lr", type=float, help=preset("AdamW learning rate", "lr"))
    g.add_argument("--minibatches", type=int, metavar="N",
                   help=preset("optimizer steps per pass over a rollout", "minibatches"))
    g.add_argument("--epochs", type=int, default=1, metavar="N",
                   help="passes over each rollout (default %(default)s)")
    g.add_argument("--clip", type=float, default=0.2, metavar="EPS",
                   help="PPO ratio clip: ratio kept in [1-EPS, 1+EPS] (default %(default)s)")
    g.add_argument("--kl-coef", type=float, default=0.01, metavar="BETA",
                   help="weight of the k3 KL estimate to the frozen initial model "
                        "(default %(default)s)")
    g.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature (default %(default)s)")
    g.add_argument("--max-grad-norm", type=float, default=1.0, metavar="NORM",
                   help="gradient norm clip; 0: none (default %(default)s)")
    g.add_argument("--weight-decay", type=float, default=0.0,
                   help="AdamW weight decay (default %(default)s)")

    a = p.parse_args(argv)
    preset = SMALL if a.small else DEFAULT
    for k, v in preset.items():
        if getattr(a, k) is None:
            setattr(a, k, v)

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
    for k in ["lr", "temperature"]:
        if not getattr(a, k) > 0 or not math.isfinite(getattr(a, k)):
            p.error("--%s must be > 0" % k.replace("_", "-"))
    for k in ["clip", "kl_coef", "max_grad_norm", "weight_decay"]:
        if not getattr(a, k) >= 0 or not math.isfinite(getattr(a, k)):
            p.error("--%s must be >= 0" % k.replace("_", "-"))
    return a


# ---------------------------------------------------------------------------------------------
# The task: reverse a string of digits. Prompt = [BOS, d_1 .. d_L, SEP], completion = L digits
# (sampled among the digits only). Reward = the fraction of positions equal to d_L .. d_1: a
# dense, verifiable reward on which a random model already scores 1/digits on average.

def vocab(digits):
    """Token ids: digits 0 .. digits-1, then SEP, then BOS."""
    return {"sep": digits, "bos": digits + 1, "size": digits + 2}


def make_prompts(gen, n, length, digits):
    v = vocab(digits)
    body = torch.randint(0, digits, (n, length), generator=gen)
    return torch.cat([torch.full((n, 1), v["bos"]), body, torch.full((n, 1), v["sep"])], 1)


def rewards_of(prompts, completions):
    """Fraction of positions where the completion is the reversed prompt digits. [n] float."""
    target = prompts[:, 1:-1].flip(1)
    return (completions == target).float().mean(1)


# ---------------------------------------------------------------------------------------------
# The model: token + position embeddings, pre-norm blocks (causal self-attention, MLP), final
# norm, head tied to the token embedding unless --untied.

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
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~causal[:t, :t], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module if torch else object):
    def __init__(self, vocab_size, max_len, d_model, layers, heads, tied=True):
        super().__init__()
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


def digit_logits(logits, digits, temperature):
    """Completions are digits: the other tokens are masked out, in sampling and in scoring."""
    logits = logits / temperature
    logits[..., digits:] = float("-inf")
    return logits


@torch.no_grad() if torch else (lambda f: f)
def sample(model, prompts, length, digits, temperature, gen):
    """Batched generation by recompute (the sequences are a dozen tokens). [n, length]."""
    seq = prompts
    for _ in range(length):
        logits = digit_logits(model(seq)[:, -1, :], digits, temperature)
        seq = torch.cat([seq, torch.multinomial(logits.softmax(-1), 1, generator=gen)], 1)
    return seq[:, prompts.shape[1]:]


def completion_logprobs(model, prompts, completions, digits, temperature):
    """log pi(completion token | prefix) for every completion position. [n, length]."""
    seq = torch.cat([prompts, completions], 1)
    logits = model(seq[:, :-1])[:, prompts.shape[1] - 1:, :]
    logp = digit_logits(logits, digits, temperature).log_softmax(-1)
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
# Ranks.

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
    """AgentClient that counts its requests, so a run can show who talked to the agent."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = {"actuation": 0, "report": 0}

    def actuation(self, wait_s=0.0):
        self.requests["actuation"] += 1
        return super().actuation(wait_s)

    def report(self, *args, **kwargs):
        self.requests["report"] += 1
        return super().report(*args, **kwargs)


def runs(values):
    """[16, 16, 16, 4, 8, 8] -> "16x3,4,8x2": the concurrency of each chunk, run-length."""
    out = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return ",".join("%dx%d" % (v, n) if n > 1 else str(v) for v, n in out)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The trainer (one rank).

def train(rank, world, args, port=None):
    """Runs args.steps GRPO steps as `rank` of `world`; rank 0 returns the run's record."""
    torch.set_num_threads(args.threads)
    if world > 1:
        # While rank 0 waits out a site's hold, the others wait in the decision's broadcast:
        # a hold must not look like a dead peer (a dead rank ends the run through spawn).
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                                rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    lead = rank == 0
    client = (CountingClient(args.agent, token=args.token,
                             safe_concurrency=args.safe_concurrency,
                             safe_group_size=args.safe_group_size) if lead else None)
    cb = HeadroomCallback(client)  # group=None: the world; ranks > 0 get decisions by broadcast
    cb.on_phase("startup")
    t_start = time.perf_counter()

    v = vocab(args.digits)
    seq_len = 2 * args.length + 2  # BOS, L digits, SEP, L completion tokens
    torch.manual_seed(args.seed)  # the same initial model on every rank
    policy = TinyLM(v["size"], seq_len, args.d_model, args.layers, args.heads,
                    tied=not args.untied)
    reference = copy.deepcopy(policy).eval().requires_grad_(False)  # frozen initial model
    rollout_model = copy.deepcopy(policy).eval().requires_grad_(False)  # the "engine"
    opt = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    prompt_gen = torch.Generator().manual_seed(args.seed)  # same prompts on every rank
    sample_gen = torch.Generator().manual_seed(args.seed * 7919 + 1 + rank)  # per rank
    local_prompts = args.prompts_per_step // world
    n_params = sum(p.numel() for p in policy.parameters())

    if lead and not args.quiet:
        cfg = {k: v_ for k, v_ in sorted(vars(args).items()) if k != "token"}
        print("grpo: %d parameters, %d rank(s), config %s" % (n_params, world, json.dumps(cfg)),
              file=sys.stderr, flush=True)

    steps, decisions, seen, chunk_sizes_by_step = [], [], [], []
    tokens = 0.0  # completion tokens generated so far, all ranks

    def applied(step, phase, chunk, a, group_size, size=None):
        rec = {"step": step, "phase": phase, "chunk": chunk,
               "concurrency": int(a["concurrency"]), "group_size": group_size,
               "seq": a.get("seq")}
        if size is not None:
            rec["size"] = size
        decisions.append(rec)

    def saw(step, where, a):
        seen.append(dict(a, step=step, where=where))

    for step in range(args.steps):
        sec = {}
        t0 = time.perf_counter()
        # -- step boundary: the site's holds, then the group size for the whole step.
        a = cb.on_step_begin(step=step, tokens=tokens)
        saw(step, "step_begin", a)
        group = min(max(int(cb.group_size), 1), args.max_group_size)
        applied(step, "step_begin", None, a, group)
        sec["idle"] = time.perf_counter() - t0

        # -- rollout: this rank's prompts, `group` completions each, in chunks of the current
        # concurrency; the decision is re-read between chunks (a collective: every rank has
        # the same number of items and sees the same decisions, so the chunks line up).
        t0 = time.perf_counter()
        everyone = make_prompts(prompt_gen, args.prompts_per_step, args.length, args.digits)
        mine = everyone[rank * local_prompts:(rank + 1) * local_prompts]
        expanded = mine.repeat_interleave(group, 0)  # prompt-major: [p0 x G, p1 x G, ...]
        completions = torch.empty(expanded.shape[0], args.length, dtype=torch.long)
        done, chunk_sizes, chunk_conc = 0, [], []
        for i, chunk in enumerate(batched(range(expanded.shape[0]), cb.concurrency)):
            conc = cb.concurrency()
            applied(step, "rollout", i, cb.actuation, group, size=len(chunk))
            chunk_sizes.append(len(chunk))
            chunk_conc.append(conc)
            cb.on_phase("rollout", tokens=tokens + world * done * args.length,
                        in_flight=len(chunk), progress=done / expanded.shape[0])
            idx = torch.tensor(chunk)
            completions[idx] = sample(rollout_model, expanded[idx], args.length, args.digits,
                                      args.temperature, sample_gen)
            done += len(chunk)
            if done < expanded.shape[0]:
                saw(step, "refresh", cb.refresh())
        tokens += world * expanded.shape[0] * args.length
        rewards = rewards_of(expanded, completions)
        adv = group_advantages(rewards.view(local_prompts, group)).reshape(-1)
        sec["rollout"] = time.perf_counter() - t0

        # -- logprob: the old policy's and the reference's log-probabilities.
        t0 = time.perf_counter()
        cb.on_phase("logprob", tokens=tokens)
        with torch.no_grad():
            old_logp = completion_logprobs(policy, expanded, completions, args.digits,
                                           args.temperature)
            ref_logp = completion_logprobs(reference, expanded, completions, args.digits,
                                           args.temperature)
        sec["logprob"] = time.perf_counter() - t0

        # -- train: clipped surrogate + KL, token mean over all ranks (each rank divides by the
        # global token count, gradients are summed), minibatches split in order.
        t0 = time.perf_counter()
        cb.on_phase("train", tokens=tokens)
        n_local = expanded.shape[0]
        mb_bounds = [round(j * n_local / args.minibatches) for j in range(args.minibatches + 1)]
        stats = torch.zeros(4, dtype=torch.float64)  # loss, kl, clipped tokens, tokens
        for _ in range(args.epochs):
            for j in range(args.minibatches):
                if mb_bounds[j + 1] == mb_bounds[j]:
                    continue  # more minibatches than sequences (the same on every rank)
                sl = slice(mb_bounds[j], mb_bounds[j + 1])
                n_tok_global = world * (mb_bounds[j + 1] - mb_bounds[j]) * args.length
                logp = completion_logprobs(policy, expanded[sl], completions[sl], args.digits,
                                           args.temperature)
                obj, clipped = clipped_objective(logp, old_logp[sl], adv[sl], args.clip)
                kl = k3_kl(logp, ref_logp[sl])
                per_token = -obj + args.kl_coef * kl
                loss = per_token.sum() / n_tok_global
                opt.zero_grad(set_to_none=False)
                loss.backward()
                if world > 1:  # average over ranks: every rank then takes the same step
                    for p in policy.parameters():
                        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                if args.max_grad_norm > 0:
                    nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
                opt.step()
                stats += torch.tensor([per_token.sum().item(), kl.sum().item(),
                                       clipped.sum().item(), per_token.numel()],
                                      dtype=torch.float64)
        sec["train"] = time.perf_counter() - t0

        # -- sync: the rollout copy takes the new weights; ranks checked identical.
        t0 = time.perf_counter()
        cb.on_phase("sync", tokens=tokens)
        rollout_model.load_state_dict(policy.state_dict())
        if world > 1:
            digests = [None] * world
            dist.all_gather_object(digests, param_digest(policy))
            if len(set(digests)) != 1:
                raise RuntimeError("step %d: ranks' parameters differ: %s" % (step, digests))
        sums = all_reduce_sum(torch.cat([stats, torch.tensor(
            [rewards.sum().item(), rewards.numel()], dtype=torch.float64)]), world)
        sec["sync"] = time.perf_counter() - t0

        # -- checkpoint: rank 0, atomically (write, then rename over the last one).
        if args.out and args.checkpoint_every and (step + 1) % args.checkpoint_every == 0:
            t0 = time.perf_counter()
            cb.on_phase("checkpoint", tokens=tokens)
            if lead:
                os.makedirs(args.out, exist_ok=True)
                path = os.path.join(args.out, "checkpoint.pt")
                torch.save({"step": step + 1, "model": policy.state_dict(),
                            "optimizer": opt.state_dict(), "config": vars(args)}, path + ".tmp")
                os.replace(path + ".tmp", path)
            sec["checkpoint"] = time.perf_counter() - t0

        cb.on_step_end(tokens=tokens)
        rec = {"step": step, "group_size": group, "decided_group_size": int(cb.group_size),
               "concurrency": chunk_conc, "chunk_sizes": chunk_sizes,
               "reward": sums[4].item() / sums[5].item(),
               "loss": sums[0].item() / sums[3].item(), "kl": sums[1].item() / sums[3].item(),
               "clip_frac": sums[2].item() / sums[3].item(), "tokens": tokens,
               "seconds": {k: round(x, 6) for k, x in sec.items()}}
        steps.append(rec)
        chunk_sizes_by_step.append(chunk_sizes)
        if lead and not args.quiet:
            print("step %3d  reward %.3f  group %2d  concurrency %s  loss %+.4f  kl %.4f  "
                  "clip %.3f  %.2f s" %
                  (step, rec["reward"], group, runs(chunk_conc), rec["loss"], rec["kl"],
                   rec["clip_frac"], sum(sec.values())),
                  file=sys.stderr, flush=True)

    cb.on_phase("stopped", tokens=tokens)
    mine_summary = {"rank": rank, "param_sha256": param_digest(policy),
                    "chunk_sizes": chunk_sizes_by_step,
                    "agent_requests": client.requests if client else {"actuation": 0,
                                                                       "report": 0}}
    by_rank = [mine_summary]
    if world > 1:
        by_rank = [None] * world
        dist.all_gather_object(by_rank, mine_summary)
        dist.destroy_process_group()
    if not lead:
        return None

    def mean_reward(recs):
        return sum(r["reward"] for r in recs) / max(len(recs), 1)
    run = {"config": {k: x for k, x in vars(args).items() if k != "token"},
           "parameters": n_params, "world": world,
           "seconds_total": time.perf_counter() - t_start,
           "reward_first10": mean_reward(steps[:10]), "reward_last10": mean_reward(steps[-10:]),
           "steps": steps, "decisions": decisions, "decisions_seen": seen, "ranks": by_rank}
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(run, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    if args.decisions_log:
        with open(args.decisions_log, "w") as f:
            for d in decisions:
                f.write(json.dumps(d) + "\n")
    if not args.quiet:
        print("grpo: %d steps in %.1f s, reward %.3f (first 10 steps) -> %.3f (last 10)" %
              (len(steps), run["seconds_total"], run["reward_first10"], run["reward_last10"]),
              file=sys.stderr, flush=True)
    return run


def _spawned(rank, world, args, port):
    train(rank, world, args, port)


def main(argv=None):
    args = parse_args(argv)
    if torch is None:
        print("train.py: needs PyTorch (import torch failed)", file=sys.stderr)
        return 1
    if args.ranks == 1:
        train(0, 1, args)
        return 0
    import torch.multiprocessing as mp
    try:
        mp.spawn(_spawned, args=(args.ranks, args, free_port()), nprocs=args.ranks, join=True)
    except mp.ProcessRaisedException as e:
        print("train.py: a rank failed: %s" % str(e).strip().splitlines()[-1], file=sys.stderr)
        return 1
    except mp.ProcessExitedException as e:
        print("train.py: a rank exited: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

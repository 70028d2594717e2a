"""A rollout engine with vLLM LLMEngine's call shape, for the example trainer (train.py).

    engine = LLMEngine(model, cap=lambda: gate.limit, generator=gen)
    for i, prompt in enumerate(prompts):
        engine.add_request(i, prompt, SamplingParams(max_tokens=24, min_tokens=3, eos_token_id=12))
    while engine.has_unfinished_requests():
        for out in engine.step():          # one decode step for every running sequence
            done[out.request_id] = out     # the requests that finished at this step

- Continuous batching under a cap: `cap()` (the agent's concurrency, vLLM's max_num_seqs) is
  read at the start of every step. Requests already preempted, then waiting ones in arrival
  order, are admitted while fewer than the cap run; so a slot freed at step k is filled at step
  k+1. When the cap falls below the running count, the latest admitted sequences are preempted
  (vLLM's policy) with their KV cache kept, and resume first. Never more than cap() sequences
  run in a step.
- A KV cache per sequence (KVCache: one slot per live sequence, keys and values per layer): a
  step feeds each running sequence its last token only; an admitted request's prompt is
  prefilled in the step that admits it, which also samples its first token.
- Sampling per request (SamplingParams): temperature, the tokens allowed, an EOS that may be
  sampled once `min_tokens` are out (vLLM's min_tokens), `max_tokens` (finish "length"). Each
  output carries the sampled tokens' log-probabilities under the distribution sampled from.
- Pacing (Pacer, CostModel): each step can be stretched in real time to what it would take for
  a 7B model on one A100, so that a run's phases last as long as a real job's.

The model: anything with `forward_cached(tokens [n, t], positions [n, t], cache, slots [n]) ->
logits [n, t, vocab]` that writes its keys and values for those positions into the cache, and
`cache_shape() -> (layers, heads, head_dim, max_len)` (train.py's TinyLM).

Not thread-safe: one thread drives an engine; `cap` may read a value another thread writes (a
gate resized by a CapFollower).
"""

import collections
import dataclasses
import math
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import torch

# ---------------------------------------------------------------------------------------------
# Requests and outputs.


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How one request is sampled (vLLM's SamplingParams, the fields this example needs).

    REQUIRES: max_tokens >= 1, 0 <= min_tokens <= max_tokens, temperature > 0, eos_token_id in
    allowed_token_ids when both are given."""
    max_tokens: int
    min_tokens: int = 0            # EOS cannot be sampled before this many tokens
    temperature: float = 1.0
    eos_token_id: Optional[int] = None  # None: sequences end at max_tokens only
    allowed_token_ids: Optional[Sequence[int]] = None  # None: the whole vocabulary

    def __post_init__(self):
        if self.allowed_token_ids is not None:  # hashable: the engine keeps a mask per params
            object.__setattr__(self, "allowed_token_ids", tuple(self.allowed_token_ids))
        if self.max_tokens < 1 or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError("SamplingParams: need max_tokens >= 1 and 0 <= min_tokens <= "
                             "max_tokens, got %d, %d" % (self.max_tokens, self.min_tokens))
        if not self.temperature > 0:
            raise ValueError("SamplingParams: temperature must be > 0")
        if (self.eos_token_id is not None and self.allowed_token_ids is not None
                and self.eos_token_id not in self.allowed_token_ids):
            raise ValueError("SamplingParams: eos_token_id must be among allowed_token_ids")


@dataclasses.dataclass
class RequestOutput:
    """A finished request (vLLM's RequestOutput with its one CompletionOutput folded in)."""
    request_id: Any
    prompt_token_ids: List[int]
    token_ids: List[int]          # the completion, the EOS included when it ended on one
    logprobs: List[float]         # log p of each sampled token (temperature and masks applied)
    finish_reason: str            # "stop" (EOS) or "length" (max_tokens)
    admitted_step: int            # the engine step that prefilled it
    finished_step: int            # the engine step that sampled its last token


@dataclasses.dataclass(eq=False)  # compared by identity
class _Sequence:
    request_id: Any
    prompt: List[int]
    params: SamplingParams
    arrival: int                  # order of add_request
    slot: int = -1                # KV cache slot, -1 until admitted
    tokens: List[int] = dataclasses.field(default_factory=list)
    logprobs: List[float] = dataclasses.field(default_factory=list)
    admitted_step: int = -1

    @property
    def length(self) -> int:  # tokens in its KV cache once the last sampled one is fed
        return len(self.prompt) + len(self.tokens)


@dataclasses.dataclass
class StepStats:
    """What one engine step did (train.py's --engine-log writes one per line)."""
    index: int         # engine steps since the engine was made, from 0
    cap: int           # cap() read at the start of this step
    running: int       # sequences that got a token this step (<= cap)
    waiting: int       # unfinished requests that did not run this step (waiting + preempted)
    admitted: int      # prompts prefilled this step
    resumed: int       # preempted sequences running again
    preempted: int     # sequences stopped this step because the cap fell
    finished: int      # requests that ended this step
    prefill_tokens: int
    compute_s: float   # the step's own time
    target_s: float    # the pacer's target (0: not paced); the step lasted max(compute, target)


# ---------------------------------------------------------------------------------------------
# The KV cache.


class KVCache:
    """Keys and values of every live sequence: per layer a [capacity, heads, max_len, head_dim]
    tensor of each, a sequence owning one slot (row) from admission to its end. Capacity
    doubles when every slot is taken (preempted sequences keep theirs). Never shrinks."""

    def __init__(self, layers: int, heads: int, head_dim: int, max_len: int,
                 capacity: int = 16, dtype: torch.dtype = torch.float32) -> None:
        self.shape = (heads, max_len, head_dim)
        self.dtype = dtype
        self.k = [torch.zeros(capacity, *self.shape, dtype=dtype) for _ in range(layers)]
        self.v = [torch.zeros(capacity, *self.shape, dtype=dtype) for _ in range(layers)]
        self._free: List[int] = list(range(capacity - 1, -1, -1))

    @property
    def capacity(self) -> int:
        return self.k[0].shape[0]

    @property
    def max_len(self) -> int:
        return self.shape[1]

    def alloc(self) -> int:
        if not self._free:
            old = self.capacity
            grow = torch.zeros(old, *self.shape, dtype=self.dtype)
            self.k = [torch.cat([t, grow]) for t in self.k]
            self.v = [torch.cat([t, grow]) for t in self.v]
            self._free = list(range(2 * old - 1, old - 1, -1))
        return self._free.pop()

    def free(self, slot: int) -> None:
        self._free.append(slot)


# ---------------------------------------------------------------------------------------------
# Pacing: a 7B-like cost model.


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Seconds that the example's operations would take for a 7B model on one A100 SXM4 80GB,
    from scenarios/a100-7b-tp1-vllm.toml (the twin's own scenario for that job). They are
    approximations, as that file says: its decode curve is an H100 fit of Llama-3.1-8B moved
    to the A100 by bandwidth and model size; prefill, logprob and train throughputs are
    312 TFLOPS at an assumed MFU (50 %, 45 %, 40 %) over 2N or 6N FLOP per token.

    Decode, per engine: tokens/s = b0 + l / (1 + exp(-k (log2 n - x0))) at n >= n_min sequences
    in flight, so a step takes n / tokens/s; below n_min the step is memory-bound, t0 + c n,
    continued from the curve at n_min with its value and slope (src/twin/curves.cc). Between
    8 and 256 sequences this is close to a + b n with a ~ 10 ms, b ~ 0.14 ms: 10.8 ms at 8,
    13 ms at 16, 19 ms at 64, 46 ms at 256."""
    decode_tps_b0: float = 307.81
    decode_tps_l: float = 6404.5
    decode_tps_x0: float = 6.13348
    decode_tps_k: float = 0.837615
    decode_n_min: float = 7.98
    prefill_tokens_per_s: float = 10200.0
    logprob_tokens_per_s: float = 9200.0
    logprob_passes: int = 2            # old policy and reference
    train_tokens_per_s: float = 2730.0
    sync_s: float = 2.0                # weights reloaded into the colocated engine
    max_new_tokens: int = 1024         # the scenario's longest completion
    source: str = "scenarios/a100-7b-tp1-vllm.toml"

    @classmethod
    def from_scenario(cls, path: str) -> "CostModel":
        """The constants of a twin scenario file (its [rollout], [logprob], [train], [sync])."""
        import tomllib  # Python 3.11; only needed for another scenario than the default
        with open(path, "rb") as f:
            s = tomllib.load(f)
        r = s["rollout"]
        return cls(decode_tps_b0=r["decode_tokens_per_s_b0"],
                   decode_tps_l=r["decode_tokens_per_s_l"],
                   decode_tps_x0=r["decode_tokens_per_s_x0"],
                   decode_tps_k=r["decode_tokens_per_s_k"],
                   decode_n_min=r.get("decode_min_batch", 8.0),
                   prefill_tokens_per_s=r["prefill_tokens_per_s"],
                   logprob_tokens_per_s=s["logprob"]["tokens_per_s"],
                   logprob_passes=int(s["logprob"].get("passes", 2)),
                   train_tokens_per_s=s["train"]["tokens_per_s"],
                   sync_s=s["sync"]["duration_s"], max_new_tokens=int(r["max_new_tokens"]),
                   source=path)

    def _tps(self, n: float) -> float:
        x = math.log2(n)
        return self.decode_tps_b0 + self.decode_tps_l / (
            1.0 + math.exp(-self.decode_tps_k * (x - self.decode_tps_x0)))

    def decode_step_s(self, n: int) -> float:
        """One decode step of n sequences (0 for none)."""
        if n <= 0:
            return 0.0
        if n >= self.decode_n_min:
            return n / self._tps(n)
        m = self.decode_n_min  # memory-bound continuation: t0 + c n, slope of n / tps at n_min
        tps = self._tps(m)
        e = math.exp(-self.decode_tps_k * (math.log2(m) - self.decode_tps_x0))
        slope = self.decode_tps_l * self.decode_tps_k * e / (1.0 + e) ** 2 / (m * math.log(2.0))
        c = max(0.0, (tps - m * slope) / (tps * tps))
        return (m / tps - c * m) + c * n

    def prefill_s(self, tokens: int) -> float:
        return tokens / self.prefill_tokens_per_s

    def logprob_s(self, tokens: int) -> float:
        return self.logprob_passes * tokens / self.logprob_tokens_per_s

    def train_s(self, tokens: int) -> float:
        return tokens / self.train_tokens_per_s


class Pacer:
    """Stretches operations to `time_scale` x their 7B duration (CostModel), one toy token
    standing for `tokens_per_token` 7B tokens (so one engine step for that many decode steps).
    time_scale 0: nothing is stretched. The clock and the sleep are injected (tests)."""

    def __init__(self, time_scale: float = 0.0, cost: Optional[CostModel] = None,
                 tokens_per_token: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        if not (math.isfinite(time_scale) and time_scale >= 0 and tokens_per_token > 0):
            raise ValueError("Pacer: time_scale >= 0 and tokens_per_token > 0")
        self.time_scale = float(time_scale)
        self.cost = cost or CostModel()
        self.tokens_per_token = float(tokens_per_token)
        self.clock = clock
        self.sleep = sleep

    def engine_step_s(self, running: int, prefill_tokens: int) -> float:
        f, c = self.tokens_per_token, self.cost
        return self.time_scale * f * (c.decode_step_s(running) + c.prefill_s(prefill_tokens))

    def logprob_s(self, tokens: int) -> float:
        return self.time_scale * self.cost.logprob_s(tokens * self.tokens_per_token)

    def train_s(self, tokens: int) -> float:
        return self.time_scale * self.cost.train_s(tokens * self.tokens_per_token)

    def sync_s(self) -> float:
        return self.time_scale * self.cost.sync_s

    def pad(self, started: float, target_s: float) -> float:
        """Sleeps until `target_s` after `started` (a clock() reading). Returns the seconds
        slept (0 when the work already took that long)."""
        left = started + target_s - self.clock()
        if left > 0:
            self.sleep(left)
            return left
        return 0.0


# ---------------------------------------------------------------------------------------------
# The engine.


def _cap_value(v: Any) -> int:
    """cap()'s answer as a number of sequences: an int >= 1; anything else counts as 1."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v
    return 1


class LLMEngine:
    """Continuous batching over a model with a KV cache (module doc). One thread drives it."""

    def __init__(self, model: Any, cap: Callable[[], int], generator: torch.Generator,
                 pacer: Optional[Pacer] = None,
                 on_step: Optional[Callable[[StepStats], Any]] = None) -> None:
        """cap: read at the start of every step (the running cap, vLLM's max_num_seqs).
        on_step(stats): called at the end of every step, after pacing."""
        # Constant after construction.
        self.model = model      # its weights may be replaced between steps (weight sync)
        self.cap = cap
        self.generator = generator
        self.pacer = pacer or Pacer()
        self.on_step = on_step
        layers, heads, head_dim, max_len = model.cache_shape()
        # The engine's state.
        self.cache = KVCache(layers, heads, head_dim, max_len)
        self._waiting: Deque[_Sequence] = collections.deque()    # not yet admitted
        self._preempted: Deque[_Sequence] = collections.deque()  # admitted, stopped by the cap
        self._running: List[_Sequence] = []                      # in admission order
        self._arrivals = 0
        self._ids: set = set()
        self.steps = 0                       # engine steps taken
        self.last: Optional[StepStats] = None
        self._masks: Dict[SamplingParams, torch.Tensor] = {}

    # -- vLLM's calls

    def add_request(self, request_id: Any, prompt_token_ids: Sequence[int],
                    params: SamplingParams) -> None:
        """Queues a request; it starts at a later step(), in arrival order.
        REQUIRES: request_id not among the unfinished ones; 1 <= len(prompt) and
        len(prompt) + params.max_tokens <= the model's max_len."""
        prompt = [int(t) for t in prompt_token_ids]
        if request_id in self._ids:
            raise ValueError("add_request: request %r is already in the engine" % (request_id,))
        if not prompt or len(prompt) + params.max_tokens > self.cache.max_len:
            raise ValueError("add_request: prompt of %d + max_tokens %d does not fit the "
                             "model's %d positions" % (len(prompt), params.max_tokens,
                                                       self.cache.max_len))
        self._ids.add(request_id)
        self._waiting.append(_Sequence(request_id, prompt, params, self._arrivals))
        self._arrivals += 1

    def has_unfinished_requests(self) -> bool:
        return bool(self._running or self._waiting or self._preempted)

    def get_num_unfinished_requests(self) -> int:
        return len(self._running) + len(self._waiting) + len(self._preempted)

    @property
    def num_running(self) -> int:
        """Sequences that ran in the last step and are not finished."""
        return len(self._running)

    @torch.no_grad()
    def step(self) -> List[RequestOutput]:
        """One step: the cap read, sequences preempted or admitted to fit it, a prefill for
        those admitted, one token for every running sequence. Returns the requests that
        finished at this step (possibly none)."""
        t0 = self.pacer.clock()
        cap = _cap_value(self.cap())
        preempted = self._preempt_to(cap)
        admitted, resumed = self._admit_up_to(cap)
        prefill_tokens = sum(len(s.prompt) for s in admitted)
        if admitted:
            self._sample(admitted, self._prefill(admitted))
        old = [s for s in self._running if s not in admitted]
        if old:
            self._sample(old, self._decode(old))
        finished = self._finish()
        compute_s = self.pacer.clock() - t0
        running = len(self._running) + len(finished)
        target_s = self.pacer.engine_step_s(running, prefill_tokens)
        self.pacer.pad(t0, target_s)
        self.last = StepStats(index=self.steps, cap=cap, running=running,
                              waiting=len(self._waiting) + len(self._preempted),
                              admitted=len(admitted), resumed=resumed, preempted=preempted,
                              finished=len(finished), prefill_tokens=prefill_tokens,
                              compute_s=compute_s, target_s=target_s)
        self.steps += 1
        if self.on_step is not None:
            self.on_step(self.last)
        return finished

    # -- scheduling

    def _preempt_to(self, cap: int) -> int:
        """Stops the latest admitted sequences until at most `cap` run; they keep their KV
        cache and resume first, in admission order. Returns how many were stopped."""
        n = 0
        while len(self._running) > cap:
            self._preempted.appendleft(self._running.pop())
            n += 1
        return n

    def _admit_up_to(self, cap: int):
        """Fills the running set up to `cap`: preempted sequences first, then waiting requests
        (each given a KV cache slot). Returns (the newly admitted, how many resumed)."""
        resumed = 0
        while len(self._running) < cap and self._preempted:
            self._running.append(self._preempted.popleft())
            resumed += 1
        admitted = []
        while len(self._running) < cap and self._waiting:
            s = self._waiting.popleft()
            s.slot = self.cache.alloc()
            s.admitted_step = self.steps
            self._running.append(s)
            admitted.append(s)
        return admitted, resumed

    # -- the model

    def _prefill(self, seqs: List[_Sequence]) -> torch.Tensor:
        """The prompts through the model, their keys and values into the cache; right-padded
        (causal attention: the padding never reaches a real position, and the cache positions
        it fills are overwritten by the sequence's own tokens before they are attended to).
        Returns the logits after each prompt's last token [n, vocab]."""
        width = max(len(s.prompt) for s in seqs)
        tokens = torch.zeros(len(seqs), width, dtype=torch.long)
        for i, s in enumerate(seqs):
            tokens[i, :len(s.prompt)] = torch.tensor(s.prompt)
        positions = torch.arange(width).expand(len(seqs), width)
        slots = torch.tensor([s.slot for s in seqs])
        logits = self.model.forward_cached(tokens, positions, self.cache, slots)
        last = torch.tensor([len(s.prompt) - 1 for s in seqs])
        return logits[torch.arange(len(seqs)), last]

    def _decode(self, seqs: List[_Sequence]) -> torch.Tensor:
        """Each sequence's last token at its position: one token of compute per sequence, the
        prefix read from the cache. Returns the next-token logits [n, vocab]."""
        tokens = torch.tensor([[s.tokens[-1]] for s in seqs])
        positions = torch.tensor([[s.length - 1] for s in seqs])
        slots = torch.tensor([s.slot for s in seqs])
        return self.model.forward_cached(tokens, positions, self.cache, slots)[:, -1]

    def _allowed(self, params: SamplingParams, vocab: int) -> torch.Tensor:
        mask = self._masks.get(params)
        if mask is None:
            if params.allowed_token_ids is None:
                mask = torch.ones(vocab, dtype=torch.bool)
            else:
                mask = torch.zeros(vocab, dtype=torch.bool)
                mask[list(params.allowed_token_ids)] = True
            self._masks[params] = mask
        return mask

    def _sample(self, seqs: List[_Sequence], logits: torch.Tensor) -> None:
        """One token for each sequence from its masked, tempered distribution."""
        vocab = logits.shape[-1]
        mask = torch.stack([self._allowed(s.params, vocab) for s in seqs])
        for i, s in enumerate(seqs):
            eos = s.params.eos_token_id
            if eos is not None and len(s.tokens) < s.params.min_tokens:
                mask[i, eos] = False
        temps = torch.tensor([s.params.temperature for s in seqs]).unsqueeze(1)
        logp = (logits / temps).masked_fill(~mask, float("-inf")).log_softmax(-1)
        picked = torch.multinomial(logp.exp(), 1, generator=self.generator).squeeze(1)
        chosen = logp.gather(1, picked.unsqueeze(1)).squeeze(1)
        for s, t, lp in zip(seqs, picked.tolist(), chosen.tolist()):
            s.tokens.append(t)
            s.logprobs.append(lp)

    def _finish(self) -> List[RequestOutput]:
        """Ends the sequences that sampled their EOS or reached max_tokens; frees their slots."""
        out, still = [], []
        for s in self._running:
            eos = s.params.eos_token_id is not None and s.tokens[-1] == s.params.eos_token_id
            if eos or len(s.tokens) >= s.params.max_tokens:
                self.cache.free(s.slot)
                self._ids.discard(s.request_id)
                out.append(RequestOutput(s.request_id, s.prompt, s.tokens, s.logprobs,
                                         "stop" if eos else "length", s.admitted_step,
                                         self.steps))
            else:
                still.append(s)
        self._running = still
        return out


def length_stats(lengths: Sequence[int]) -> Dict[str, float]:
    """{"mean", "p50", "p90", "max"} of completion lengths (nearest-rank percentiles)."""
    xs = sorted(lengths)
    if not xs:
        return {"mean": 0.0, "p50": 0, "p90": 0, "max": 0}

    def rank(q):
        return xs[max(0, math.ceil(q * len(xs)) - 1)]
    return {"mean": sum(xs) / len(xs), "p50": rank(0.5), "p90": rank(0.9), "max": xs[-1]}

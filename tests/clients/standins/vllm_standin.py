"""Stand-in for vLLM's engine as the trainers call it, with continuous batching under a running
cap and long-tailed completion lengths. No model: a sequence's length is drawn (seeded,
lognormal) when it is added, and one engine step gives every running sequence one token.

Read (vllm-project/vllm, as stored in the reference index; the snapshot was too large to fetch):
- vllm/v1/engine/llm_engine.py at 1e8a83f2 and 001999d2 (V1 LLMEngine): `add_request(request_id,
  prompt, params, arrival_time=None, lora_request=None, ...)`, `step() -> list[RequestOutput]`,
  `has_unfinished_requests()`, `get_num_unfinished_requests()`, `abort_request(...)`.
- vllm/entrypoints/llm.py at 10fdb8f0: `LLM.generate` -> `_validate_and_add_requests` (sets
  `output_kind = FINAL_ONLY`) -> `_add_request` (`request_id = str(next(self.request_counter))`,
  then `self.llm_engine.add_request(request_id, ...)`) -> `_run_engine` (`while
  self.llm_engine.has_unfinished_requests(): step_outputs = self.llm_engine.step()`, keep the
  finished ones, `sorted(outputs, key=lambda x: int(x.request_id))`).
- vllm/v1/core/sched/scheduler.py at b4622cf9: `self.max_num_running_reqs =
  self.scheduler_config.max_num_seqs`; `schedule()` admits from `self.waiting` while
  `len(self.running) < self.max_num_running_reqs` (`if len(self.running) ==
  self.max_num_running_reqs: break`).
- An n > 1 request fans out into n sequences in the engine (vLLM V1's ParentRequest).

AsyncStepper stands in for AsyncLLMEngine / AsyncLLM's engine loop (OpenRLHF's RolloutRayActor,
verl's vLLMHttpServer): requests from coroutines, one engine step at a time on the loop. Before
each step it lets the loop run SETTLE_ITERATIONS times, so that a request on its way from a gate
to the engine (a few loop iterations) arrives before the step -- a real step takes milliseconds,
a request's admission microseconds.
"""

import asyncio
import collections
import copy
import enum
import itertools
import random
import types
from typing import Any, Callable, Dict, List, Optional

DEFAULT_MAX_NUM_SEQS = 256   # vLLM's EngineArgs default for max_num_seqs on GPUs
LENGTH_MU = 3.0              # lognormal of completion tokens: median e^3 = 20 tokens
LENGTH_SIGMA = 1.0           # long tail: p99 ~ 200 tokens
STEP_BASE_S = 0.015          # simulated seconds per engine step, plus per running sequence
STEP_PER_SEQ_S = 0.0002
SETTLE_ITERATIONS = 64       # loop iterations an AsyncStepper lets run before each step


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class SamplingParams:
    def __init__(self, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = -1, min_p: float = 0.0, max_tokens: Optional[int] = 16,
                 logprobs: Optional[int] = None, seed: Optional[int] = None,
                 repetition_penalty: float = 1.0, **kwargs: Any) -> None:
        self.n = n
        self.temperature, self.top_p, self.top_k, self.min_p = temperature, top_p, top_k, min_p
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.seed = seed
        self.repetition_penalty = repetition_penalty
        self.extra = kwargs
        self.output_kind = RequestOutputKind.CUMULATIVE

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)


sampling_params_module = types.ModuleType("vllm.sampling_params")
sampling_params_module.RequestOutputKind = RequestOutputKind
sampling_params_module.SamplingParams = SamplingParams


class TokensPrompt(dict):
    pass


class CompletionOutput:
    def __init__(self, index: int, token_ids: List[int]) -> None:
        self.index = index
        self.token_ids = token_ids
        self.text = ""
        self.logprobs = [{t: -0.5} for t in token_ids]


class RequestOutput:
    def __init__(self, request_id: str, prompt_token_ids: List[int],
                 outputs: List[CompletionOutput], finished: bool) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.outputs = outputs
        self.finished = finished


def _prompt_ids(prompt: Any) -> List[int]:
    if isinstance(prompt, dict):
        if "prompt_token_ids" in prompt:
            return list(prompt["prompt_token_ids"])
        return [len(str(prompt.get("prompt", "")))]
    if isinstance(prompt, str):
        return [len(prompt)]
    return list(prompt)


class _Seq:
    def __init__(self, parent: "_Request", k: int, length: int) -> None:
        self.parent, self.k, self.length, self.generated = parent, k, length, 0


class _Request:
    def __init__(self, request_id: str, prompt_ids: List[int], n: int) -> None:
        self.request_id, self.prompt_ids, self.n = request_id, prompt_ids, n
        self.done: Dict[int, List[int]] = {}


class LLMEngine:
    """vllm/v1/engine/llm_engine.py's call surface over a scheduler with max_num_seqs running.

    Counts for the tests: num_running, num_waiting (sequences), steps, added_since_step (requests
    added since the last step), now_s (simulated). on_step(engine), if set, after every step."""

    def __init__(self, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, seed: int = 0) -> None:
        self.max_num_running_reqs = int(max_num_seqs)
        self.rng = random.Random(seed)
        self.waiting: collections.deque = collections.deque()
        self.running: List[_Seq] = []
        self.requests: Dict[str, _Request] = {}
        self.steps = 0
        self.now_s = 0.0
        self.added_since_step = 0
        self.added_total = 0
        self.on_step: Optional[Callable[["LLMEngine"], Any]] = None

    def _length(self, max_tokens: Optional[int]) -> int:
        n = max(1, int(round(self.rng.lognormvariate(LENGTH_MU, LENGTH_SIGMA))))
        return min(n, max_tokens) if max_tokens else n

    def add_request(self, request_id: str, prompt: Any, params: SamplingParams,
                    arrival_time: Optional[float] = None, lora_request: Any = None,
                    **kwargs: Any) -> str:
        if request_id in self.requests:
            raise ValueError("request id %s already in the engine" % request_id)
        n = max(1, int(getattr(params, "n", 1) or 1))
        req = _Request(str(request_id), _prompt_ids(prompt), n)
        self.requests[req.request_id] = req
        for k in range(n):
            self.waiting.append(_Seq(req, k, self._length(getattr(params, "max_tokens", None))))
        self.added_since_step += 1
        self.added_total += 1
        return req.request_id  # recent vLLM returns the id it used

    def abort_request(self, request_ids: Any, internal: bool = False) -> None:
        ids = {request_ids} if isinstance(request_ids, str) else set(map(str, request_ids))
        self.waiting = collections.deque(s for s in self.waiting
                                         if s.parent.request_id not in ids)
        self.running = [s for s in self.running if s.parent.request_id not in ids]
        for i in ids:
            self.requests.pop(i, None)

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_sequences(self) -> int:
        return len(self.running) + len(self.waiting)

    def _schedule(self) -> None:
        while self.waiting and len(self.running) < self.max_num_running_reqs:
            self.running.append(self.waiting.popleft())

    def step(self) -> List[RequestOutput]:
        self._schedule()
        if self.on_step is not None:
            self.on_step(self)  # the running set this step computes
        self.steps += 1
        self.now_s += STEP_BASE_S + STEP_PER_SEQ_S * len(self.running)
        self.added_since_step = 0
        outputs = []
        still = []
        for s in self.running:
            s.generated += 1
            if s.generated < s.length:
                still.append(s)
                continue
            req = s.parent
            req.done[s.k] = [(req.prompt_ids[0] if req.prompt_ids else 0) + t
                             for t in range(s.length)]
            if len(req.done) == req.n:
                del self.requests[req.request_id]
                outputs.append(RequestOutput(
                    req.request_id, req.prompt_ids,
                    [CompletionOutput(k, req.done[k]) for k in range(req.n)], True))
        self.running = still
        return outputs


class LLM:
    """vllm/entrypoints/llm.py's LLM: generate() adds every prompt, then steps the engine until
    none is unfinished (the whole batch at once, up to max_num_seqs running)."""

    created: List["LLM"] = []  # every LLM built (the tests find the engines here)

    def __init__(self, model: str = "standin", *, tensor_parallel_size: int = 1, seed: int = 0,
                 max_num_seqs: Optional[int] = None, **kwargs: Any) -> None:
        self.llm_engine = LLMEngine(max_num_seqs or DEFAULT_MAX_NUM_SEQS,
                                    seed=seed * 1000 + len(type(self).created))
        self.request_counter = itertools.count()
        self.kwargs = kwargs
        type(self).created.append(self)

    def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams()

    def generate(self, prompts: Any, sampling_params: Any = None, use_tqdm: Any = True,
                 lora_request: Any = None, **kwargs: Any) -> List[RequestOutput]:
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        params = sampling_params or self.get_default_sampling_params()
        params = params if isinstance(params, list) else [params] * len(prompts)
        for p, sp in zip(prompts, params):  # _validate_and_add_requests / _add_request
            sp.output_kind = RequestOutputKind.FINAL_ONLY
            self.llm_engine.add_request(str(next(self.request_counter)), p, sp)
        outputs = []
        while self.llm_engine.has_unfinished_requests():  # _run_engine
            outputs += [o for o in self.llm_engine.step() if o.finished]
        return sorted(outputs, key=lambda o: int(o.request_id))

    def sleep(self, level: int = 1) -> None:
        pass

    def wake_up(self, tags: Any = None) -> None:
        pass

    def reset_prefix_cache(self) -> None:
        pass


class AsyncStepper:
    """An LLMEngine stepped by a task on the running loop: `await submit(...)` returns the
    request's final RequestOutput. after_step, if set, is awaited after every step (tests use
    it to pause the engine until a decision is in force)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.after_step: Optional[Callable[[LLMEngine], Any]] = None
        self._futures: Dict[str, asyncio.Future] = {}
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None

    async def submit(self, request_id: str, prompt: Any, params: SamplingParams) -> RequestOutput:
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())
        fut = loop.create_future()
        self._futures[request_id] = fut
        self.engine.add_request(request_id, prompt, params)
        assert self._wake is not None
        self._wake.set()
        return await fut

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            while not self.engine.has_unfinished_requests():
                self._wake.clear()
                await self._wake.wait()
            for _ in range(SETTLE_ITERATIONS):
                await asyncio.sleep(0)
            for out in self.engine.step():
                fut = self._futures.pop(out.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(out)
            if self.after_step is not None:
                await self.after_step(self.engine)


class AsyncEngineArgs:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _OutputProcessor:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine

    def get_num_unfinished_requests(self) -> int:
        return self.engine.get_num_unfinished_requests()


class AsyncLLMEngine:
    """vLLM's AsyncLLMEngine as OpenRLHF's RolloutRayActor uses it (vllm_engine.py:64-183):
    from_engine_args, is_sleeping, generate (an async generator of RequestOutputs; here the
    final one only), output_processor.get_num_unfinished_requests, sleep/wake_up."""

    created: List["AsyncLLMEngine"] = []

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.stepper = AsyncStepper(engine)
        self.output_processor = _OutputProcessor(engine)
        AsyncLLMEngine.created.append(self)

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> "AsyncLLMEngine":
        kw = engine_args.kwargs
        return cls(LLMEngine(kw.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS,
                             seed=int(kw.get("seed", 0))))

    async def is_sleeping(self) -> bool:
        return False

    async def generate(self, prompt: Any, sampling_params: SamplingParams, request_id: str) -> Any:
        yield await self.stepper.submit(request_id, prompt, sampling_params)

    async def sleep(self, level: int = 1) -> None:
        pass

    async def wake_up(self, tags: Any = None) -> None:
        pass

    async def reset_prefix_cache(self) -> None:
        pass

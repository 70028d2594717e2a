"""TRL GRPOTrainer (huggingface/trl f2cd577) with continuous admission under the agent's cap.

Colocate (`vllm_mode="colocate"`, every rank its own vLLM `LLM`): TRL calls
`self.llm.generate(vllm_prompts, sampling_params=..., use_tqdm=False)` once per rank and step
(trl/generation/vllm_generation.py:680). install() replaces that `generate` with a refill loop
over the rank's `LLMEngine`: before every engine step it adds requests while fewer than the
cap are in flight (`add_request(request_id, prompt, params)`), then `step()`, until every
sequence is back -- in flight <= the cap at every step, and = the cap while sequences wait.
The cap is this rank's engine's: a CapFollower thread long-polls the agent and resizes it;
nothing inside generation is a torch.distributed collective (TRL's own all_gather_object over
the TP group, vllm_generation.py:641, runs before the call). One decision per TP group: with
vllm_tensor_parallel_size > 1 the ranks of a group run one engine in lock step and must add
the same requests at the same steps, which a per-rank read cannot promise (the agent pins
only a step's group size and hold, not its concurrency) -- refused (ValueError).

Server (`vllm_mode="server"`, `trl vllm-serve`): the trainer's main process sends one
/generate/ request per step with every prompt once and n=num_generations
(vllm_generation.py:579); the server splits it over its data-parallel workers and each worker
calls `llm.generate` (trl/scripts/vllm_serve.py:641, 381). The per-sequence cap therefore
lives in each worker: install_vllm_serve() makes every worker's LLM generate through the same
refill loop, one CapFollower per worker (one engine). gate_generate_route() wraps the route's
handler (`async def generate(request: GenerateRequest)`, vllm_serve.py:534) with a gate per
request, keeping its signature for FastAPI: it bounds whole requests (each a trainer's step at
this commit), not sequences.

Reports come from the callback (rank 0, through its Heartbeat): the phases around generation
("rollout", then "logprob" for scoring, "train" when the batch is ready), in flight and
progress at most every 0.1 s during a colocate rollout, engines, admission "continuous" and the
trainer's own group size (args.num_generations). In server mode the trainer does not see the
workers: it reports in flight as min(sequences sent, cap x engines), the most the workers'
caps admit -- exact while every engine has sequences waiting, an overestimate in the tail.

    from headroom_client import AgentClient
    from headroom_client.integrations import trl as headroom_trl
    client = AgentClient(URL, safe_concurrency=4, safe_group_size=args.num_generations)
    cb = headroom_trl.callback_for(args, client)       # HeadroomCallback, the trainer's group
    trainer = GRPOTrainer(..., args=args, callbacks=[cb])
    headroom_trl.install(trainer, cb, client)          # after the trainer built its LLM
    trainer.train()

Standard library only: TRL, vLLM and transformers are never imported here.
"""

import collections
import copy
import functools
import itertools
import os
import sys
import threading
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from ..client import AgentClient
from ..gates import CapFollower
from ._common import (ADMISSION, DEFAULT_REPORT_INTERVAL_S, Cap, RolloutReporter,
                      TrainerGroupCallback, concurrency_of)

TP_REFUSED = ("headroom: vllm_tensor_parallel_size > 1 in colocate mode is not supported: the "
              "ranks of a TP group step one engine together and must admit the same requests at "
              "the same steps, but each rank reads the agent itself and the agent does not pin "
              "a step's concurrency; use tensor_parallel_size 1 or server mode")

# install_vllm_serve() passes its settings to the server's worker processes in these.
ENV_URL = "HEADROOM_AGENT_URL"
ENV_TOKEN = "HEADROOM_AGENT_TOKEN"
ENV_SAFE = "HEADROOM_SAFE_CONCURRENCY"


def callback_for(args: Any, client: AgentClient, **kwargs: Any) -> TrainerGroupCallback:
    """A HeadroomCallback (transformers' TrainerCallback when transformers is imported first)
    that reports GRPOConfig.num_generations as the group size in force, with a Heartbeat."""
    return TrainerGroupCallback(client, group_size=int(args.num_generations), **kwargs)


# -- the refill loop


def _one_sample(params: Any, k: int) -> Any:
    """A copy of vLLM SamplingParams for one sequence: n=1; seed + k when a seed is set, so the
    n samples differ (how vLLM's own n > 1 fan-out seeds its children was not checked); final
    output only, where vLLM has RequestOutputKind."""
    child = params.clone() if hasattr(params, "clone") else copy.deepcopy(params)
    if hasattr(child, "n"):
        child.n = 1
    seed = getattr(params, "seed", None)
    if seed is not None:
        child.seed = seed + k
    kind = getattr(sys.modules.get("vllm.sampling_params"), "RequestOutputKind", None)
    if kind is not None and hasattr(child, "output_kind"):
        child.output_kind = kind.FINAL_ONLY  # as LLM._validate_and_add_requests sets it
    return child


class RefillLoop:
    """One generate call on a vLLM LLMEngine under a cap: sequences admitted as soon as others
    end, while fewer than cap() are in flight. A prompt with n > 1 samples is n requests of one
    sample each (vLLM fans it out the same way), merged back into one RequestOutput.

    Not thread-safe: the caller's thread runs it; cap() may be changed by another thread
    (it is read once before each step). on_step(loop) is called after every engine step."""

    def __init__(self, engine: Any, prompts: Sequence[Any], params: Sequence[Any],
                 cap: Callable[[], int], next_id: Callable[[], str], *,
                 lora_request: Any = None,
                 on_step: Optional[Callable[["RefillLoop"], Any]] = None) -> None:
        # Constant after construction.
        self.engine = engine
        self.cap = cap
        self.next_id = next_id
        self.lora_request = lora_request
        self.on_step = on_step
        self.prompts = list(prompts)
        self.params = list(params)
        widths = [max(1, int(getattr(p, "n", 1) or 1)) for p in self.params]
        self.total = sum(widths)
        # The loop's own state.
        self._queue: Deque[Tuple[int, int]] = collections.deque(
            (i, k) for i, w in enumerate(widths) for k in range(w))
        self._samples: List[List[Any]] = [[None] * w for w in widths]
        self._owner: Dict[str, Tuple[int, int]] = {}  # request id -> (prompt, sample)
        self._alias: Dict[str, str] = {}  # the id the engine says it used -> ours, if another
        self.in_flight = 0
        self.finished = 0
        self.steps = 0
        self.cap_in_force = 0  # the cap read before the last step

    @property
    def pending(self) -> int:
        """Sequences not yet added to the engine."""
        return len(self._queue)

    def run(self) -> List[Any]:
        """The RequestOutputs in prompt order. On an error, the requests it added are aborted."""
        try:
            while self._queue or self.in_flight:
                self._admit()
                self._collect(self.engine.step())
                self.steps += 1
                if self.on_step is not None:
                    self.on_step(self)
        except BaseException:
            self._abort()
            raise
        return [self._merged(i) for i in range(len(self.prompts))]

    def _admit(self) -> None:
        self.cap_in_force = max(1, int(self.cap()))
        while self._queue and self.in_flight < self.cap_in_force:
            i, k = self._queue.popleft()
            request_id = self.next_id()
            self._owner[request_id] = (i, k)
            kwargs = {"lora_request": self.lora_request} if self.lora_request is not None else {}
            used = self.engine.add_request(request_id, self.prompts[i],
                                           _one_sample(self.params[i], k), **kwargs)
            if isinstance(used, str) and used != request_id:  # recent vLLM returns the id used
                self._alias[used] = request_id
            self.in_flight += 1

    def _collect(self, outputs: Sequence[Any]) -> None:
        for out in outputs:
            if not getattr(out, "finished", False):
                continue
            key = str(out.request_id)
            owner = self._owner.pop(self._alias.pop(key, key), None)
            if owner is None:
                continue  # not ours
            i, k = owner
            self._samples[i][k] = out
            self.in_flight -= 1
            self.finished += 1

    def _merged(self, i: int) -> Any:
        samples = self._samples[i]
        first = samples[0]
        if len(samples) == 1:
            return first
        merged = copy.copy(first)
        completions = []
        for k, out in enumerate(samples):
            c = out.outputs[0]
            if hasattr(c, "index"):
                c.index = k
            completions.append(c)
        merged.outputs = completions
        return merged

    def _abort(self) -> None:
        if not self._owner:
            return
        try:
            self.engine.abort_request(list(self._owner))
        except Exception:  # noqa: BLE001 -- the original error matters, not this one
            pass


def _request_ids(llm: Any) -> Callable[[], str]:
    """Request ids from the LLM's own counter (vLLM's LLM.request_counter), so they never
    collide with the LLM's; a private counter for anything else."""
    counter = getattr(llm, "request_counter", None)
    if counter is None:
        counter = itertools.count()
    return lambda: str(next(counter))


def _as_lists(llm: Any, prompts: Any, sampling_params: Any) -> Tuple[List[Any], List[Any]]:
    """LLM.generate's prompts and sampling_params as two lists of the same length."""
    if isinstance(prompts, (str, dict)):
        prompts = [prompts]
    prompts = list(prompts)
    if sampling_params is None:
        sampling_params = llm.get_default_sampling_params()
    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != len(prompts):
            raise ValueError("%d sampling_params for %d prompts"
                             % (len(sampling_params), len(prompts)))
        return prompts, list(sampling_params)
    return prompts, [sampling_params] * len(prompts)


class EngineRefill:
    """An LLM (vLLM's offline `LLM`) whose generate() runs through a RefillLoop under a Cap
    that a CapFollower keeps at the agent's concurrency. One per engine.

    install() replaces `llm.generate` (the instance attribute: TRL and vllm-serve call it
    there); close() stops the follower and puts the original back. generate() takes what TRL
    passes (prompts, sampling_params, use_tqdm, lora_request); anything else is a TypeError.
    Thread-safety: generate() from one thread at a time (as vLLM's LLM)."""

    def __init__(self, llm: Any, client: AgentClient, *, reporter: Optional[RolloutReporter] = None,
                 after_phase: Optional[Callable[[], Any]] = None, wait_s: float = 10.0) -> None:
        # Constant after construction.
        self.llm = llm
        self.engine = llm.llm_engine
        self.client = client
        self.reporter = reporter
        self.after_phase = after_phase
        self.cap = Cap(concurrency_of(client.actuation()))
        self.follower = CapFollower(client, [self.cap], wait_s=wait_s)
        self._next_id = _request_ids(llm)
        # State.
        self.loop: Optional[RefillLoop] = None  # the generate call under way (or the last)
        self._had_own_generate = "generate" in vars(llm)
        self._whole = llm.generate

    def install(self) -> "EngineRefill":
        self.llm.generate = self.generate
        self.follower.start()
        return self

    def close(self) -> None:
        """Puts the original generate back; the follower ends after its long-poll (a daemon:
        it never keeps the process alive)."""
        self.follower.stop(timeout_s=0.0)
        if self._had_own_generate:
            self.llm.generate = self._whole
        elif "generate" in vars(self.llm):
            del self.llm.generate

    def generate(self, prompts: Any, sampling_params: Any = None, use_tqdm: Any = True,
                 lora_request: Any = None, **kwargs: Any) -> List[Any]:
        if kwargs:
            raise TypeError("headroom: LLM.generate under a cap takes prompts, sampling_params, "
                            "use_tqdm and lora_request, not %s" % ", ".join(sorted(kwargs)))
        prompts, params = _as_lists(self.llm, prompts, sampling_params)
        loop = RefillLoop(self.engine, prompts, params, lambda: self.cap.limit, self._next_id,
                          lora_request=lora_request, on_step=self._on_step)
        self.loop = loop
        outputs = loop.run()
        if self.reporter is not None:
            self.reporter.update(0, loop.finished, loop.total, force=True)
        if self.after_phase is not None:
            self.after_phase()
        return outputs

    def _on_step(self, loop: RefillLoop) -> None:
        if self.reporter is not None:
            self.reporter.update(loop.in_flight, loop.finished, loop.total,
                                 force=loop.steps == 1)


# -- the trainer's side


def _wrap_phases(trainer: Any, callback: Any, engines: int) -> None:
    """"rollout" when a batch's generation starts (weight sync, tokenizing and generating,
    grpo_trainer.py:2260), "train" once it is scored (the loss and the update follow)."""
    whole = trainer._generate_and_score_completions

    @functools.wraps(whole)
    def generate_and_score(*args: Any, **kwargs: Any) -> Any:
        callback.on_phase("rollout", in_flight=0, engines=engines, admission=ADMISSION)
        out = whole(*args, **kwargs)
        callback.on_phase("train")
        return out

    trainer._generate_and_score_completions = generate_and_score


def _wrap_server_client(trainer: Any, callback: Any, engines: int) -> None:
    """Server mode, main process: reports around vllm_client.generate (every prompt once, n
    samples each); in flight as min(sequences sent, cap x engines) -- see the module doc."""
    vc = getattr(trainer.vllm_generation, "vllm_client", None)
    if vc is None:
        return  # not the main process: it sends nothing
    whole = vc.generate

    @functools.wraps(whole)
    def generate(prompts: Any, *args: Any, **kwargs: Any) -> Any:
        n = int(kwargs.get("n", 1))
        bound = min(len(prompts) * n, callback.concurrency() * engines)
        callback.on_phase("rollout", in_flight=bound, engines=engines, admission=ADMISSION)
        out = whole(prompts, *args, **kwargs)
        callback.on_phase("logprob", in_flight=0)
        return out

    vc.generate = generate


def install(trainer: Any, callback: Any, client: AgentClient, *, server_engines: int = 1,
            report_interval_s: float = DEFAULT_REPORT_INTERVAL_S) -> Optional[EngineRefill]:
    """Wires a GRPOTrainer (TRL f2cd577) built with use_vllm=True: colocate, this rank's LLM
    generates under the cap (returns its EngineRefill; close() it at the end); server, the
    main process reports around its requests (server_engines: vllm-serve's
    --data_parallel_size) and the server needs install_vllm_serve(). Call on every rank,
    after the trainer is built. Raises ValueError without vLLM, or with tensor parallel > 1
    in colocate mode (TP_REFUSED)."""
    if not getattr(trainer, "use_vllm", False):
        raise ValueError("headroom: the integration needs GRPOConfig(use_vllm=True)")
    if trainer.vllm_mode == "colocate":
        if int(getattr(trainer.args, "vllm_tensor_parallel_size", 1)) > 1:
            raise ValueError(TP_REFUSED)
        reporter = RolloutReporter(callback, engines=1, interval_s=report_interval_s)
        refill = EngineRefill(trainer.vllm_generation.llm, client, reporter=reporter,
                              after_phase=lambda: callback.on_phase("logprob", in_flight=0))
        _wrap_phases(trainer, callback, engines=1)
        return refill.install()
    _wrap_phases(trainer, callback, engines=server_engines)
    _wrap_server_client(trainer, callback, engines=server_engines)
    return None


# -- the server's side (trl vllm-serve)

_SERVE_REFILLS: List[EngineRefill] = []  # this process's workers' refills (monitoring, tests)


def serve_refills() -> List[EngineRefill]:
    """The EngineRefills installed in this process by headroom_llm_worker (one per worker)."""
    return list(_SERVE_REFILLS)


_HOOK_LOCK = threading.Lock()
_WORKER = threading.local()  # .created: the refills of the worker running on this thread


def _hook_llm_class() -> None:
    """Makes vllm.LLM build LLMs that generate under the agent's cap (once per process: a
    vllm-serve worker process lives as long as its LLM)."""
    import vllm
    with _HOOK_LOCK:
        if getattr(vllm.LLM, "_headroom_hooked", False):
            return
        upstream = vllm.LLM

        def build(*args: Any, **kwargs: Any) -> Any:
            llm = upstream(*args, **kwargs)
            client = AgentClient(os.environ[ENV_URL], token=os.environ.get(ENV_TOKEN) or None,
                                 safe_concurrency=int(os.environ.get(ENV_SAFE, "1")))
            refill = EngineRefill(llm, client).install()
            _SERVE_REFILLS.append(refill)
            created = getattr(_WORKER, "created", None)
            if created is not None:
                created.append(refill)
            return llm

        build._headroom_hooked = True  # type: ignore[attr-defined]
        vllm.LLM = build


def headroom_llm_worker(script_args: Any, data_parallel_rank: int, master_port: int,
                        connection: Any) -> None:
    """A drop-in for trl.scripts.vllm_serve.llm_worker (same signature, vllm_serve.py:332):
    runs the upstream worker with its LLM generating under a cap that follows the agent (the
    settings from install_vllm_serve(), through the environment). Module level, so a spawned
    worker process can import it."""
    from trl.scripts import vllm_serve
    upstream = getattr(vllm_serve, "_headroom_upstream_llm_worker", None) or vllm_serve.llm_worker
    _hook_llm_class()  # the worker does `from vllm import LLM` inside: it gets the hooked one
    _WORKER.created = []
    try:
        upstream(script_args, data_parallel_rank, master_port, connection)
    finally:
        for refill in _WORKER.created:
            refill.close()
        _WORKER.created = None


def install_vllm_serve(agent_url: str, *, token: Optional[str] = None,
                       safe_concurrency: int = 1) -> None:
    """In the process that runs `trl vllm-serve` (before its main()): every data-parallel
    worker's LLM generates under the agent's concurrency, one CapFollower per worker.
    The agent must be reachable from the server's node at agent_url, and its --gpus must
    cover the server's GPUs (the power the cap changes is theirs)."""
    from trl.scripts import vllm_serve
    os.environ[ENV_URL] = agent_url
    os.environ[ENV_SAFE] = str(int(safe_concurrency))
    if token:
        os.environ[ENV_TOKEN] = token
    if vllm_serve.llm_worker is not headroom_llm_worker:
        vllm_serve._headroom_upstream_llm_worker = vllm_serve.llm_worker
        vllm_serve.llm_worker = headroom_llm_worker  # main() spawns workers by this name


def gate_generate_route(handler: Callable[..., Any], gate: Any) -> Callable[..., Any]:
    """The /generate/ route's handler (`async def generate(request: GenerateRequest)`,
    vllm_serve.py:534) behind `gate` (a ConcurrencyGate, or a CountingGate), one place per
    request. functools.wraps keeps the handler's signature, which FastAPI reads to parse the
    body: register the result where the handler was."""
    @functools.wraps(handler)
    async def generate(*args: Any, **kwargs: Any) -> Any:
        async with gate:
            return await handler(*args, **kwargs)
    return generate

"""Stand-in for TRL's GRPOTrainer generation path at huggingface/trl f2cd577 (v1.9.0 + 26).

Follows:
- trl/trainer/grpo_config.py: num_generations, steps_per_generation (defaults to
  gradient_accumulation_steps), use_vllm, vllm_mode, vllm_tensor_parallel_size.
- trl/trainer/grpo_trainer.py: `self.num_generations = args.num_generations` (:737),
  `self.use_vllm`, `self.vllm_mode` (:765-766); VLLMGeneration(... max_num_seqs=
  per_device_train_batch_size * vllm_tensor_parallel_size * steps_per_generation) (:1074-1093);
  training_step (:1543) -> Trainer.training_step -> _prepare_inputs (:1555): generates every
  steps_per_generation * num_iterations micro-steps and serves the buffered slices between;
  _generate_and_score_completions (:2260) -> _generate (:2143) -> _generate_single_turn (:1784):
  sync_weights when global_step changed (:1793), then vllm_generation.generate(prompts=...,
  images=..., num_generations=...) (:1798).
- trl/generation/vllm_generation.py: VLLMGeneration._init_vllm (:293): server mode builds a
  VLLMClient on the main process; colocate builds `LLM(..., tensor_parallel_size,
  max_num_seqs, distributed_executor_backend="external_launcher", seed=process_index // tp,
  max_num_batched_tokens=4096, ...)` (:351); generate (:503): server -> gather_object(prompts)
  (:552), the main process sends `vllm_client.generate(prompts=all_prompts[::num_generations],
  n=num_generations, ...)` (:579), broadcast_object_list (:595), each process keeps its slice;
  colocate -> SamplingParams(n=1, ...) (:634), with tensor_parallel_size > 1
  torch.distributed.all_gather_object over the TP group (:641), then
  `self.llm.generate(vllm_prompts, sampling_params=sampling_params, use_tqdm=False)` (:680).
- trl/generation/vllm_client.py: VLLMClient.generate(prompts, images=None, n=1, ...) (:204): one
  POST /generate/ (here: the stand-in server's route, called in-process).

Left out: tokenizing (prompts are token-id lists already), rewards, advantages, the loss and the
model. accelerate's gather_object / broadcast_object_list go to torch.distributed (the stand-in),
so they are counted like TRL's own collectives; the stand-in marks the generation call sites
(torch.distributed `generating`) so a collective inside generation is caught.
"""

import asyncio
import sys
from typing import Any, List, Optional

import transformers


def _dist() -> Any:
    return sys.modules["torch.distributed"]


def _generating(flag: bool) -> None:
    sys.modules["torch"].generating[0] = flag


class GRPOConfig(transformers.TrainingArguments):
    def __init__(self, num_generations: int = 8, steps_per_generation: Optional[int] = None,
                 num_iterations: int = 1, use_vllm: bool = False, vllm_mode: str = "colocate",
                 vllm_tensor_parallel_size: int = 1, max_completion_length: int = 256,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_generations = num_generations
        self.steps_per_generation = steps_per_generation or self.gradient_accumulation_steps
        self.num_iterations = num_iterations
        self.use_vllm = use_vllm
        self.vllm_mode = vllm_mode
        self.vllm_tensor_parallel_size = vllm_tensor_parallel_size
        self.max_completion_length = max_completion_length


class VLLMClient:
    """vllm_client.py: generate() is one request to the server's /generate/ route."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def generate(self, prompts: List[Any], images: Any = None, n: int = 1,
                 repetition_penalty: float = 1.0, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = 0, min_p: float = 0.0, max_tokens: int = 16,
                 logprobs: Optional[int] = 0, structured_outputs_regex: Any = None,
                 generation_kwargs: Any = None) -> dict:
        request = self.server.GenerateRequest(prompts=prompts, images=images, n=n,
                                              max_tokens=max_tokens, logprobs=logprobs)
        return asyncio.run(self.server.routes["/generate/"](request))


class VLLMGeneration:
    def __init__(self, mode: str, tensor_parallel_size: int, max_num_seqs: int,
                 max_completion_length: int, server: Any = None, process_index: int = 0) -> None:
        self.mode = mode
        self.tensor_parallel_size = tensor_parallel_size
        self.max_num_seqs = max_num_seqs
        self.max_completion_length = max_completion_length
        self.is_main_process = process_index == 0
        self.synced = 0
        import vllm
        self._vllm = vllm
        if mode == "server":
            if self.is_main_process:
                self.vllm_client = VLLMClient(server)
        else:
            self.llm = vllm.LLM(model="standin", tensor_parallel_size=tensor_parallel_size,
                                max_num_seqs=max_num_seqs, seed=process_index // tensor_parallel_size,
                                distributed_executor_backend="external_launcher",
                                max_num_batched_tokens=4096)

    def sync_weights(self) -> None:
        self.synced += 1

    def generate(self, prompts: List[List[int]], images: Any, num_generations: int) -> tuple:
        if self.mode == "server":
            all_prompts = [None]
            _dist().all_gather_object(all_prompts, prompts)  # gather_object
            all_prompts = all_prompts[0]
            payload = None
            if self.is_main_process:
                _generating(True)
                try:
                    output = self.vllm_client.generate(prompts=all_prompts[::num_generations],
                                                       n=num_generations,
                                                       max_tokens=self.max_completion_length)
                finally:
                    _generating(False)
                payload = (output["prompt_ids"], output["completion_ids"])
            obj = [payload]
            _dist().broadcast_object_list(obj, src=0)
            prompt_ids, completion_ids = obj[0]
            prompt_ids = [ids for ids in prompt_ids for _ in range(num_generations)]
            return prompt_ids[:len(prompts)], completion_ids[:len(prompts)]
        params = self._vllm.SamplingParams(n=1, max_tokens=self.max_completion_length, logprobs=0)
        all_prompts = prompts
        if self.tensor_parallel_size > 1:
            gathered = [None] * self.tensor_parallel_size
            _dist().all_gather_object(gathered, prompts)
            all_prompts = [p for sub in gathered if sub for p in sub]
        vllm_prompts = [{"prompt_token_ids": ids} for ids in all_prompts]
        _generating(True)
        try:
            outputs = self.llm.generate(vllm_prompts, sampling_params=params, use_tqdm=False)
        finally:
            _generating(False)
        prompt_ids = [o.prompt_token_ids for o in outputs]
        completion_ids = [c.token_ids for o in outputs for c in o.outputs]
        return prompt_ids, completion_ids


class GRPOTrainer(transformers.Trainer):
    def __init__(self, model: Any = None, reward_funcs: Any = None,
                 args: Optional[GRPOConfig] = None, train_dataset: Any = None,
                 callbacks: Optional[List[Any]] = None, server: Any = None,
                 process_index: int = 0) -> None:
        super().__init__(model=model, args=args, train_dataset=train_dataset, callbacks=callbacks)
        self.num_generations = args.num_generations
        self.use_vllm = args.use_vllm
        self.vllm_mode = args.vllm_mode
        self._step = 0
        self._buffered_inputs: Optional[List[Any]] = None
        self._last_loaded_step = -1
        self.generated: List[List[List[int]]] = []  # every generation's completions
        if self.use_vllm:
            self.vllm_generation = VLLMGeneration(
                mode=args.vllm_mode, tensor_parallel_size=args.vllm_tensor_parallel_size,
                max_num_seqs=(args.per_device_train_batch_size * args.vllm_tensor_parallel_size
                              * args.steps_per_generation),
                max_completion_length=args.max_completion_length, server=server,
                process_index=process_index)

    def get_train_dataloader(self) -> List[Any]:
        """Generation batches of per_device_train_batch_size x steps_per_generation prompts,
        each prompt num_generations times in a row (RepeatSampler), one per micro-step."""
        a = self.args
        size = a.per_device_train_batch_size * a.steps_per_generation
        repeated = [p for p in self.train_dataset for _ in range(self.num_generations)]
        batches = [repeated[i:i + size] for i in range(0, len(repeated) - size + 1, size)]
        return [b for b in batches for _ in range(a.steps_per_generation)]

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> float:
        out = super().training_step(model, inputs, num_items_in_batch)
        self._step += 1
        return out

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        generate_every = self.args.steps_per_generation * self.args.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            k = self.args.steps_per_generation
            per = len(batch) // k
            self._buffered_inputs = [batch[i * per:(i + 1) * per] for i in range(k)]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _generate_and_score_completions(self, inputs: Any) -> List[Any]:
        completion_ids = self._generate(inputs)
        return list(zip(inputs, completion_ids))  # rewards and advantages: left out

    def _generate(self, prompts: List[Any]) -> List[List[int]]:
        _, completion_ids = self._generate_single_turn(prompts)
        self.generated.append(completion_ids)
        return completion_ids

    def _generate_single_turn(self, prompt_ids: List[List[int]]) -> tuple:
        if self.state.global_step != self._last_loaded_step:
            self.vllm_generation.sync_weights()
            self._last_loaded_step = self.state.global_step
        return self.vllm_generation.generate(prompts=prompt_ids, images=None,
                                             num_generations=self.num_generations)

"""Stand-in for openrlhf/trainer/ray/vllm_engine.py at OpenRLHF/OpenRLHF 3c3be62 (v0.11.0),
registered as openrlhf.trainer.ray.vllm_engine, with the executor of openrlhf/utils/agent.py.

Follows:
- RolloutRayActor (@ray.remote, :33-208): `async def __init__(self, *args, bundle_indices=None,
  agent_func_path=None, remote_rm_url=None, mm_pad_token_ids=None, **kwargs)` (:37) picks the
  executor (SingleTurnAgentExecutor without agent_func_path, :56-59) and builds
  `vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(*args, **kwargs))`, then awaits
  `is_sleeping()` (:63-65); generate(prompt_token_ids, sampling_params, multi_modal_data=None)
  (:155) wraps the ids in a TokensPrompt and iterates `self.llm.generate(prompt,
  deepcopy(sampling_params), request_id=random_uuid())` to its final output (:169-179);
  get_num_unfinished_requests (:181) reads the engine's output processor; generate_responses(
  prompt, label, sampling_params, max_length, hf_tokenizer, num_samples=1, images=None) (:185)
  runs num_samples executor.execute(..., llm_engine=self) at once (asyncio.gather, :208).
- create_vllm_engines(num_engines, tensor_parallel_size, pretrain, seed, ...) (:211): one
  `RolloutRayActor.options(...).remote(**actor_kwargs)` per engine (:303), by the module's
  name at call time, seed + i each (:271).
- openrlhf/utils/agent.py SingleTurnAgentExecutor.execute(prompt, label, sampling_params,
  max_length, hf_tokenizer, llm_engine, images=None) (:202): tokenizes, then
  `await llm_engine.generate(prompt_token_ids, deepcopy(effective_params),
  multi_modal_data=mm_data)` (:240).
Left out: placement groups, sleep/wake, weight updates, rewards, images. The tokenizer is the
test's: a callable giving {"input_ids": [[ids]]}.
"""

import asyncio
import uuid
from copy import deepcopy
from typing import Any, List, Optional

import ray
import vllm


class SingleTurnAgentExecutor:
    def __init__(self, remote_rm_url: Any = None) -> None:
        self.remote_rm_url = remote_rm_url

    async def execute(self, prompt: Any, label: Any, sampling_params: Any, max_length: int,
                      hf_tokenizer: Any, llm_engine: Any, images: Any = None) -> dict:
        prompt_token_ids = hf_tokenizer(text=prompt)["input_ids"][0]
        request_output = await llm_engine.generate(prompt_token_ids, deepcopy(sampling_params),
                                                   multi_modal_data=None)
        action = request_output.outputs[0].token_ids
        return {"prompt": prompt, "label": label, "observation_tokens": prompt_token_ids + action,
                "action_ranges": [(len(prompt_token_ids), len(prompt_token_ids) + len(action))]}


@ray.remote
class RolloutRayActor:
    async def __init__(self, *args: Any, bundle_indices: Optional[list] = None,
                       agent_func_path: Optional[str] = None, remote_rm_url: Optional[str] = None,
                       mm_pad_token_ids: Optional[set] = None, **kwargs: Any) -> None:
        kwargs.pop("num_gpus", None)
        kwargs.pop("full_determinism", None)
        self.executor = SingleTurnAgentExecutor(remote_rm_url)
        self.kwargs = kwargs
        self.llm = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(*args, **kwargs))
        await self.llm.is_sleeping()

    async def generate(self, prompt_token_ids: List[int], sampling_params: Any,
                       multi_modal_data: Any = None) -> Any:
        prompt = vllm.TokensPrompt(prompt_token_ids=prompt_token_ids)
        final_output = None
        async for request_output in self.llm.generate(prompt, deepcopy(sampling_params),
                                                      request_id=uuid.uuid4().hex):
            final_output = request_output
        return final_output

    def get_num_unfinished_requests(self) -> int:
        return self.llm.output_processor.get_num_unfinished_requests()

    async def generate_responses(self, prompt: Any, label: Any, sampling_params: Any,
                                 max_length: int, hf_tokenizer: Any, num_samples: int = 1,
                                 images: Any = None) -> list:
        tasks = [self.executor.execute(prompt=prompt, label=label, sampling_params=sampling_params,
                                       max_length=max_length, hf_tokenizer=hf_tokenizer,
                                       llm_engine=self, images=images)
                 for _ in range(num_samples)]
        return await asyncio.gather(*tasks)


def create_vllm_engines(num_engines: int, tensor_parallel_size: int, pretrain: str, seed: int,
                        full_determinism: bool = False, enable_prefix_caching: bool = False,
                        enforce_eager: bool = False, max_model_len: int = 1024,
                        shared_pg: Any = None, gpu_memory_utilization: Any = None,
                        vllm_enable_sleep: bool = False, logprobs_mode: Any = None,
                        agent_func_path: Optional[str] = None, remote_rm_url: Optional[str] = None,
                        max_images_per_prompt: int = 0) -> list:
    vllm_engines = []
    for i in range(num_engines):
        actor_kwargs = {"model": pretrain, "tensor_parallel_size": tensor_parallel_size,
                        "seed": seed + i, "max_model_len": max_model_len, "num_gpus": 1,
                        "full_determinism": full_determinism, "agent_func_path": agent_func_path,
                        "remote_rm_url": remote_rm_url}
        vllm_engines.append(RolloutRayActor.options(num_cpus=1, num_gpus=1).remote(**actor_kwargs))
    return vllm_engines


def batch_vllm_engine_call(engines: List[Any], method_name: str, *args: Any, **kwargs: Any) -> list:
    return ray.get([getattr(e, method_name).remote(*args, **kwargs) for e in engines])

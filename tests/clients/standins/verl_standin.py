"""Stand-in for verl's async rollout at volcengine/verl b178a3c (v0.7.0 + 125), registered as
verl.experimental.agent_loop.agent_loop.

Follows verl/experimental/agent_loop/agent_loop.py:
- AsyncLLMServerManager (:57-122): __init__(config, server_handles, max_cache_size=10000)
  shuffles the handles and keeps a least-requests heap of [count, idx, server] (:77) and an LRU
  request_id -> server (:81); _choose_server (:83) is sticky per request id, else the heap's
  least and count + 1; generate(request_id, *, prompt_ids, sampling_params, image_data=None,
  video_data=None) (:95) awaits `server.generate.remote(request_id=uuid4().hex, ...)` (:115).
- AgentLoopWorker (:345-520): `if not hasattr(self, "server_manager")` (:363) builds the manager
  (the hook recipes use); generate_sequences(batch) (:406) builds the sampling params, starts
  every sample's agent loop at once (asyncio.create_task per sample, :472-480) and gathers them
  (:481); the single-turn loop (single_turn_agent_loop.py:40-80) calls
  `self.server_manager.generate(request_id=uuid4().hex, prompt_ids=..., sampling_params=...)`.
- AgentLoopManager (:845-1020): __init__(config, worker_group=None, rollout_resource_pool=None,
  rm_resource_pool=None) with the `rollout_replica_class` / `agent_loop_workers_class` hooks
  (:873-877), then _initialize_llm_servers (:882: num_replicas = world_size //
  rollout_world_size, one replica each, init_standalone, `self.server_handles = [server.
  _server_handle ...]` :919) and _init_agent_loop_workers (:930: `num_workers` workers, each
  `.remote(self.config, self.server_handles, self.reward_router_address)`);
  generate_sequences(prompts) (:947): `prompts.chunk(len(self.agent_loop_workers))`, ray.get of
  every worker's generate_sequences, DataProto.concat, meta_info timing.
And verl/workers/rollout/vllm_rollout/vllm_async_server.py vLLMHttpServer.generate(prompt_ids,
sampling_params, request_id, image_data=None, video_data=None, priority=0) (:445) -> TokenOutput;
verl/protocol.py DataProto __len__ (:345), chunk (:875, equal parts asserted :885), concat
(:928), repeat(repeat_times, interleave) (:982); verl/trainer/ppo/ray_trainer.py
RayPPOTrainer.init_workers building the manager from
`actor_rollout_ref.rollout.agent.agent_loop_manager_class` (:897-915, load_class_from_fqn
:901-905), _validate (meta_info "validate": True, :586-595) and fit (:1302): per step
global_steps += 1, `gen_batch.meta_info["global_steps"] = self.global_steps` (:1382),
`gen_batch.repeat(repeat_times=rollout.n, interleave=True)` (:1383),
`self.async_rollout_manager.generate_sequences(gen_batch_output)` (:1396).

Ray as ray_standin: workers and servers are async actors on the cluster loop; the driver (fit,
the manager) runs in the calling thread. Left out: tokenizers, rewards, log-probs, the update,
checkpoints, the reward loop, tracing, placement.
"""

import asyncio
import collections
import heapq
import importlib
import random
import sys
from typing import Any, Dict, List, Optional
from uuid import uuid4

import ray
import vllm


class Cfg(dict):
    """An OmegaConf-like config: attributes, .get, nested dicts as Cfg."""

    def __getattr__(self, name: str) -> Any:
        try:
            v = self[name]
        except KeyError:
            raise AttributeError(name)
        return Cfg(v) if isinstance(v, dict) and not isinstance(v, Cfg) else v


class DataProto:
    def __init__(self, batch: Dict[str, list], non_tensor_batch: Optional[Dict[str, list]] = None,
                 meta_info: Optional[dict] = None) -> None:
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch or {}
        self.meta_info = meta_info if meta_info is not None else {}

    def __len__(self) -> int:
        return len(next(iter(self.batch.values())))

    def chunk(self, chunks: int) -> List["DataProto"]:
        assert len(self) % chunks == 0, "only support equal chunk: %d %% %d" % (len(self), chunks)
        size = len(self) // chunks
        return [DataProto({k: v[i * size:(i + 1) * size] for k, v in self.batch.items()},
                          {k: v[i * size:(i + 1) * size] for k, v in self.non_tensor_batch.items()},
                          dict(self.meta_info)) for i in range(chunks)]

    @staticmethod
    def concat(data: List["DataProto"]) -> "DataProto":
        batch = {k: [x for d in data for x in d.batch[k]] for k in data[0].batch}
        non = {k: [x for d in data for x in d.non_tensor_batch[k]] for k in data[0].non_tensor_batch}
        return DataProto(batch, non, dict(data[0].meta_info))

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> "DataProto":
        def rep(v: list) -> list:
            return ([x for x in v for _ in range(repeat_times)] if interleave
                    else [x for _ in range(repeat_times) for x in v])
        return DataProto({k: rep(v) for k, v in self.batch.items()},
                         {k: rep(v) for k, v in self.non_tensor_batch.items()}, dict(self.meta_info))


class TokenOutput:
    def __init__(self, token_ids: List[int], log_probs: Optional[List[float]] = None,
                 num_preempted: Optional[int] = None) -> None:
        self.token_ids, self.log_probs, self.num_preempted = token_ids, log_probs, num_preempted


class vLLMHttpServer:
    """One rollout replica's server (vllm_async_server.py:78): an engine with max_num_seqs."""

    created: List["vLLMHttpServer"] = []

    def __init__(self, config: Cfg, replica_rank: int) -> None:
        self.config = config
        self.replica_rank = replica_rank
        self.stepper = vllm.AsyncStepper(vllm.LLMEngine(config.max_num_seqs, seed=replica_rank))
        vLLMHttpServer.created.append(self)

    async def generate(self, prompt_ids: List[int], sampling_params: Dict[str, Any],
                       request_id: str, image_data: Any = None, video_data: Any = None,
                       priority: int = 0) -> TokenOutput:
        params = vllm.SamplingParams(max_tokens=self.config.response_length,
                                     **{k: v for k, v in sampling_params.items()
                                        if k in ("temperature", "top_p", "top_k")})
        out = await self.stepper.submit(request_id, vllm.TokensPrompt(prompt_token_ids=prompt_ids),
                                        params)
        return TokenOutput(out.outputs[0].token_ids, None, 0)


class vLLMReplica:
    """vllm_async_server.py:688: a replica with its server actor (server_class :698)."""

    def __init__(self, replica_rank: int, config: Cfg, model_config: Any = None,
                 gpus_per_node: int = 8) -> None:
        self.replica_rank = replica_rank
        self.config = config
        self.server_class = ray.remote(vLLMHttpServer)
        self._server_handle = None
        self._server_address = "standin:%d" % replica_rank

    async def init_standalone(self) -> None:
        self._server_handle = self.server_class.options(name="server_%d" % self.replica_rank
                                                        ).remote(self.config, self.replica_rank)


class LRUCache(collections.OrderedDict):
    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.popitem(last=False)


class AsyncLLMServerManager:
    def __init__(self, config: Cfg, server_handles: List[Any], max_cache_size: int = 10000) -> None:
        self.config = config
        self.server_handles = server_handles
        random.shuffle(self.server_handles)
        self.weighted_serveres = [[0, idx, server] for idx, server in enumerate(self.server_handles)]
        heapq.heapify(self.weighted_serveres)
        self.request_id_to_server = LRUCache(maxsize=max_cache_size)

    def _choose_server(self, request_id: str) -> Any:
        if request_id in self.request_id_to_server:
            return self.request_id_to_server[request_id]
        _, _, server = self.weighted_serveres[0]
        self.weighted_serveres[0][0] += 1
        heapq.heapreplace(self.weighted_serveres, self.weighted_serveres[0])
        self.request_id_to_server[request_id] = server
        return server

    async def generate(self, request_id: str, *, prompt_ids: List[int],
                       sampling_params: Dict[str, Any], image_data: Any = None,
                       video_data: Any = None) -> TokenOutput:
        server = self._choose_server(request_id)
        return await server.generate.remote(request_id=uuid4().hex, prompt_ids=prompt_ids,
                                            sampling_params=sampling_params,
                                            image_data=image_data, video_data=video_data)


class SingleTurnAgentLoop:
    def __init__(self, server_manager: AsyncLLMServerManager) -> None:
        self.server_manager = server_manager

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> TokenOutput:
        return await self.server_manager.generate(request_id=uuid4().hex,
                                                  prompt_ids=list(kwargs["raw_prompt_ids"]),
                                                  sampling_params=sampling_params)


class AgentLoopWorker:
    def __init__(self, config: Cfg, server_handles: List[Any],
                 reward_router_address: Optional[str] = None) -> None:
        self.config = config
        if not hasattr(self, "server_manager"):
            self.server_manager = AsyncLLMServerManager(config, server_handles)
        self.reward_router_address = reward_router_address

    async def generate_sequences(self, batch: DataProto) -> DataProto:
        config = self.config.actor_rollout_ref.rollout
        sampling_params = dict(temperature=config.temperature, top_p=config.top_p,
                               top_k=config.top_k, repetition_penalty=1.0,
                               logprobs=config.calculate_log_probs)
        if batch.meta_info.get("validate", False):
            sampling_params["temperature"] = config.val_kwargs.temperature
        tasks = []
        for i in range(len(batch)):
            kwargs = {k: v[i] for k, v in batch.non_tensor_batch.items()}
            tasks.append(asyncio.create_task(self._run_agent_loop(sampling_params, **kwargs)))
        outputs = await asyncio.gather(*tasks)
        return DataProto({"responses": [o.token_ids for o in outputs]},
                         {"raw_prompt_ids": list(batch.non_tensor_batch["raw_prompt_ids"])},
                         {"metrics": [{"generate_sequences": 0.0}] * len(outputs)})

    async def _run_agent_loop(self, sampling_params: Dict[str, Any], **kwargs: Any) -> TokenOutput:
        return await SingleTurnAgentLoop(self.server_manager).run(sampling_params, **kwargs)


class AgentLoopManager:
    def __init__(self, config: Cfg, worker_group: Any = None, rollout_resource_pool: Any = None,
                 rm_resource_pool: Any = None) -> None:
        self.config = config
        self.worker_group = worker_group
        self.reward_router_address = None
        if not hasattr(self, "rollout_replica_class"):
            self.rollout_replica_class = vLLMReplica
        if not hasattr(self, "agent_loop_workers_class"):
            self.agent_loop_workers_class = ray.remote(AgentLoopWorker)
        self._initialize_llm_servers(rollout_resource_pool)
        self._init_agent_loop_workers()

    def _initialize_llm_servers(self, rollout_resource_pool: Any) -> None:
        rollout = self.config.actor_rollout_ref.rollout
        rollout_world_size = (rollout.tensor_model_parallel_size * rollout.data_parallel_size
                              * rollout.pipeline_model_parallel_size)
        world_size = self.config.trainer.n_gpus_per_node * self.config.trainer.nnodes
        num_replicas = world_size // rollout_world_size
        self.rollout_replicas = [self.rollout_replica_class(replica_rank=r, config=rollout,
                                                            model_config=None,
                                                            gpus_per_node=self.config.trainer.n_gpus_per_node)
                                 for r in range(num_replicas)]
        self._run_all([server.init_standalone() for server in self.rollout_replicas])
        self.server_handles = [server._server_handle for server in self.rollout_replicas]
        self.server_addresses = [server._server_address for server in self.rollout_replicas]

    def _init_agent_loop_workers(self) -> None:
        self.agent_loop_workers = []
        for i in range(self.config.actor_rollout_ref.rollout.agent.num_workers):
            self.agent_loop_workers.append(self.agent_loop_workers_class.options(
                name="agent_loop_worker_%d" % i).remote(self.config, self.server_handles,
                                                        self.reward_router_address))

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        chunkes = prompts.chunk(len(self.agent_loop_workers))
        outputs = ray.get([worker.generate_sequences.remote(chunk)
                           for worker, chunk in zip(self.agent_loop_workers, chunkes)])
        output = DataProto.concat(outputs)
        metrics = [o.meta_info.pop("metrics") for o in outputs]
        output.meta_info = {"timing": {"agent_loop/n": float(sum(len(m) for m in metrics))},
                            **outputs[0].meta_info}
        return output

    def _run_all(self, tasks: List[Any]) -> None:
        async def run_all() -> None:
            await asyncio.gather(*tasks)
        asyncio.run(run_all())


def _generating(flag: bool) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "generating"):
        torch.generating[0] = flag


def load_class_from_fqn(fqn: str, description: str = "") -> Any:
    module, _, name = fqn.rpartition(".")
    return getattr(importlib.import_module(module), name)


class RayPPOTrainer:
    """ray_trainer.py's driver: init_workers builds the rollout manager; fit() runs the steps."""

    def __init__(self, config: Cfg, prompts: List[List[int]]) -> None:
        self.config = config
        self.prompts = prompts
        self.global_steps = 0
        self.phases: List[str] = []  # what the driver did, in order (for the tests)

    def init_workers(self) -> None:
        fqn = self.config.actor_rollout_ref.rollout.get("agent", {}).get("agent_loop_manager_class")
        manager_class = load_class_from_fqn(fqn, "AgentLoopManager") if fqn else AgentLoopManager
        self.async_rollout_manager = manager_class(config=self.config, worker_group=None,
                                                   rollout_resource_pool=None,
                                                   rm_resource_pool=None)

    def _batch(self, step: int) -> DataProto:
        size = self.config.data.train_batch_size
        chosen = [self.prompts[(step * size + i) % len(self.prompts)] for i in range(size)]
        return DataProto({"index": list(range(size))}, {"raw_prompt_ids": chosen})

    def _validate(self) -> DataProto:
        batch = self._batch(0)
        batch.meta_info = {"validate": True, "global_steps": self.global_steps}
        return self.async_rollout_manager.generate_sequences(batch)

    def fit(self) -> List[DataProto]:
        outs = [self._validate()]
        self.global_steps += 1
        for _ in range(self.config.trainer.total_training_steps):
            gen_batch = self._batch(self.global_steps)
            gen_batch.meta_info["global_steps"] = self.global_steps
            gen_batch_output = gen_batch.repeat(
                repeat_times=self.config.actor_rollout_ref.rollout.n, interleave=True)
            _generating(True)  # torch.distributed's stand-in flags a collective from here
            try:
                out = self.async_rollout_manager.generate_sequences(gen_batch_output)
            finally:
                _generating(False)
            outs.append(out)
            self.phases += ["gen", "old_log_prob", "update_actor"]  # the rest: left out
            self.global_steps += 1
        return outs

"""Stand-in for openrlhf/trainer/ppo_trainer.py at OpenRLHF/OpenRLHF 3c3be62 (v0.11.0),
registered as openrlhf.trainer.ppo_trainer, with SamplesGenerator of
openrlhf/trainer/ppo_utils/samples_generator.py.

Follows:
- SamplesGenerator (samples_generator.py:40-246): __init__(strategy, prompts_dataloader,
  eval_dataloader, tokenizer, vllm_engines) keeps `self.args = strategy.args`;
  generate_samples(**generate_kwargs) (:89) generates rollout.batch_size prompts (or
  vllm_generate_batch_size) through _generate_vllm and returns (rollout_samples,
  filter_pass_rate, prompts_consumed, exhausted); _generate_vllm (:140) dispatches them all and
  collects with `ray.wait(pending_refs, num_returns=1, timeout=10.0)` (:162);
  _dispatch_prompts_to_vllm (:199) snapshots every engine's get_num_unfinished_requests
  (:216), assigns each prompt to the least-loaded engine, counting n_samples_per_prompt per
  prompt (:222-225), and calls `llm_engine.generate_responses.remote(prompt=..., label=...,
  sampling_params=..., max_length=..., hf_tokenizer=..., num_samples=n_samples, images=...)`
  (:234); generate_eval_samples (:61).
- BasePPOTrainer.train_step(rollout_samples, global_step) (:213): make_experience_batch, then
  ppo_train(global_step) (:241), then broadcast_to_vllm() when there are engines (:247), and
  returns (status, global_step + 1) (:264).
- PPOTrainer (@ray.remote, :445): __init__(pretrain, strategy, actor_model_group,
  critic_model_group, reward_model_group, reference_model_group, vllm_engines,
  **generate_kwargs) builds the SamplesGenerator (:477); fit(global_step=0) (:499):
  init_checkpoint_states, then per episode `while True:` generate_samples -> train_step (:523-535).
Left out: datasets, tokenizer loading and checkpoints (the prompts, eval prompts and tokenizer
ride on `strategy`), experience making, losses, logging, dynamic filtering, evaluation's
metrics. generate_samples marks generation for the torch.distributed stand-in.
"""

import heapq
import sys
from typing import Any, Dict, List, Optional, Tuple

import ray


def _generating(flag: bool) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "generating"):
        torch.generating[0] = flag


class SamplesGenerator:
    def __init__(self, strategy: Any, prompts_dataloader: List[Any], eval_dataloader: Any,
                 tokenizer: Any, vllm_engines: List[Any]) -> None:
        self.strategy = strategy
        self.args = strategy.args
        self.tokenizer = tokenizer
        self.vllm_engines = vllm_engines or []
        self.prompts_dataloader = prompts_dataloader
        self.eval_dataloader = eval_dataloader
        self._next = 0

    def generate_samples(self, **generate_kwargs: Any) -> Tuple[list, Optional[float], int, bool]:
        size = getattr(self.args.rollout, "vllm_generate_batch_size", None) or self.args.rollout.batch_size
        prompts = self.prompts_dataloader[self._next:self._next + size]
        self._next += len(prompts)
        _generating(True)  # torch.distributed's stand-in flags a collective from here
        try:
            experiences = self._generate_vllm(prompts, **generate_kwargs)
        finally:
            _generating(False)
        return experiences, None, len(prompts), self._next >= len(self.prompts_dataloader)

    def generate_eval_samples(self, **generate_kwargs: Any) -> list:
        return self._generate_vllm(list(self.eval_dataloader), **generate_kwargs)

    def _generate_vllm(self, prompts: List[Any], **generate_kwargs: Any) -> list:
        if not prompts:
            return []
        pending_refs = self._dispatch_prompts_to_vllm(prompts, [None] * len(prompts),
                                                      **generate_kwargs)
        experiences = []
        while pending_refs:
            ready_refs, pending_refs = ray.wait(pending_refs, num_returns=1, timeout=10.0)
            for ref in ready_refs:
                experiences.extend(ray.get(ref))
        return experiences

    def _dispatch_prompts_to_vllm(self, prompts: List[Any], labels: List[Any], *,
                                  images: Any = None, **generate_kwargs: Any) -> list:
        import vllm
        sampling_params = vllm.SamplingParams(temperature=generate_kwargs.get("temperature", 1.0),
                                              max_tokens=generate_kwargs.get("max_new_tokens"))
        n_samples = generate_kwargs.get("n_samples_per_prompt", self.args.rollout.n_samples_per_prompt)
        pending_counts = ray.get([e.get_num_unfinished_requests.remote() for e in self.vllm_engines])
        engine_heap = [(count, idx) for idx, count in enumerate(pending_counts)]
        heapq.heapify(engine_heap)
        engine_indices = []
        for _ in prompts:
            current_load, engine_idx = heapq.heappop(engine_heap)
            engine_indices.append(engine_idx)
            heapq.heappush(engine_heap, (current_load + n_samples, engine_idx))
        refs = []
        for idx, (prompt, label) in enumerate(zip(prompts, labels)):
            llm_engine = self.vllm_engines[engine_indices[idx]]
            refs.append(llm_engine.generate_responses.remote(
                prompt=prompt, label=label, sampling_params=sampling_params,
                max_length=generate_kwargs.get("max_len", 2048), hf_tokenizer=self.tokenizer,
                num_samples=n_samples, images=None))
        return refs


class BasePPOTrainer:
    def __init__(self, strategy: Any, actor_model_group: Any, critic_model_group: Any,
                 reward_model_group: Any, reference_model_group: Any, vllm_engines: Any,
                 tokenizer: Any) -> None:
        self.strategy = strategy
        self.args = strategy.args
        self.vllm_engines = vllm_engines
        self.tokenizer = tokenizer
        self.phases: List[str] = []  # what the driver did, in order (for the tests)

    def train_step(self, rollout_samples: list, global_step: int) -> Tuple[Dict, int]:
        self.phases.append("make_experience")
        status = self.ppo_train(global_step)
        if self.vllm_engines is not None:
            self.broadcast_to_vllm()
        return status, global_step + 1

    def ppo_train(self, global_steps: int) -> Dict:
        self.phases.append("ppo_train")
        return {}

    def broadcast_to_vllm(self) -> None:
        self.phases.append("broadcast_to_vllm")

    def init_checkpoint_states(self) -> Dict:
        return {"episode": 0, "global_step": 0, "total_consumed_prompts": 0}


@ray.remote
class PPOTrainer(BasePPOTrainer):
    def __init__(self, pretrain: str, strategy: Any, actor_model_group: Any,
                 critic_model_group: Any, reward_model_group: Any, reference_model_group: Any,
                 vllm_engines: Any, **generate_kwargs: Any) -> None:
        self.generate_kwargs = generate_kwargs
        self.prompts_dataloader = strategy.prompts
        self.samples_generator = SamplesGenerator(strategy=strategy,
                                                  prompts_dataloader=self.prompts_dataloader,
                                                  eval_dataloader=strategy.eval_prompts,
                                                  tokenizer=strategy.tokenizer,
                                                  vllm_engines=vllm_engines)
        super().__init__(strategy, actor_model_group, critic_model_group, reward_model_group,
                         reference_model_group, vllm_engines, strategy.tokenizer)
        self.rollouts: List[list] = []

    def fit(self, global_step: int = 0) -> None:
        checkpoint_states = self.init_checkpoint_states()
        if checkpoint_states["global_step"] > 0:
            global_step = checkpoint_states["global_step"]
        for episode in range(checkpoint_states["episode"], self.args.train.num_episodes):
            while True:
                rollout_samples, _, _, is_exhausted = self.samples_generator.generate_samples(
                    **self.generate_kwargs)
                if not rollout_samples:
                    if is_exhausted:
                        break
                    continue
                self.rollouts.append(rollout_samples)
                status, global_step = self.train_step(rollout_samples, global_step)
                if global_step % self.args.eval.steps == 0 and self.samples_generator.eval_dataloader:
                    self.samples_generator.generate_eval_samples(**self.generate_kwargs)
                if is_exhausted:
                    break

    def get_rollouts(self) -> List[list]:
        return self.rollouts

    def get_phases(self) -> List[str]:
        return self.phases

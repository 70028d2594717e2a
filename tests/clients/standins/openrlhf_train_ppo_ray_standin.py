"""Stand-in for openrlhf/cli/train_ppo_ray.py at OpenRLHF 3c3be62: train(args) creates the
vLLM engines with create_vllm_engines (:53-76), imports the driver class inside train() --
PPOTrainerAsync with --train.async_enable, else PPOTrainer (:145-148) -- builds it with
`PPOTrainer.remote(...)` (:151) and runs `ray.get(ppo_trainer.fit.remote())` (:184).
Left out: the model groups (None here), placement groups, saving."""

import ray

from openrlhf.trainer.ray.vllm_engine import create_vllm_engines


def train(args):
    vllm_engines = create_vllm_engines(args.vllm.num_engines, args.vllm.tensor_parallel_size,
                                       args.actor.model_name_or_path, args.train.seed)
    if args.train.async_enable:
        from openrlhf.trainer.ppo_trainer_async import PPOTrainerAsync as PPOTrainer
    else:
        from openrlhf.trainer.ppo_trainer import PPOTrainer
    ppo_trainer = PPOTrainer.remote(args.actor.model_name_or_path, args.strategy, None, None, None,
                                    None, vllm_engines, do_sample=True,
                                    max_new_tokens=args.rollout.max_new_tokens, max_len=1024,
                                    temperature=1.0)
    ray.get(ppo_trainer.fit.remote())
    return ppo_trainer, vllm_engines

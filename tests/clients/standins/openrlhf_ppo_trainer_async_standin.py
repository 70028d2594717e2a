"""Stand-in for openrlhf/trainer/ppo_trainer_async.py at OpenRLHF 3c3be62: PPOTrainerAsync
(:269), the driver train_ppo_ray.py picks with --train.async_enable (:145-146). Only its name
and constructor matter here: the integration refuses it."""

import ray


@ray.remote
class PPOTrainerAsync:
    def __init__(self, *args, **kwargs):
        self.args = args

    def fit(self):
        return None

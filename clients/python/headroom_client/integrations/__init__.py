"""Trainer integrations: continuous admission under the agent's concurrency at each trainer's
own generation call site, with heartbeats that carry the trainer's own group size.

- integrations.trl: TRL GRPOTrainer (f2cd577). Colocate: every rank's vLLM LLM generates
  through a refill loop over its LLMEngine (add_request / step), one CapFollower per engine.
  Server: the same loop in each `trl vllm-serve` worker, and a gate per /generate/ request.
- integrations.verl: verl (b178a3c). HeadroomAgentLoopManager, named in
  actor_rollout_ref.rollout.agent.agent_loop_manager_class: one gate per rollout replica that
  every agent-loop worker's requests pass through, followers and reports in the driver.
- integrations.openrlhf: OpenRLHF (3c3be62). install(): a gate in each RolloutRayActor's
  generate, one follower per engine and the reports in the PPOTrainer driver.

None of these frameworks is imported until an integration is used; the submodules are not
imported by `import headroom_client`. Read docs/TRAINERS.md, section 3, for what each one
supports and what it does not (verl one-step-off and fully async, OpenRLHF async, TRL tensor
parallel colocate).
"""

from ._common import ADMISSION, Cap, CountingGate, RolloutReporter, TrainerGroupCallback

__all__ = ["ADMISSION", "Cap", "CountingGate", "RolloutReporter", "TrainerGroupCallback"]

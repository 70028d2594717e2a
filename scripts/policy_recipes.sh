# Sourced by scripts/train_policies.sh and scripts/fixed_group_results.sh: the shipped policies'
# recipes, and what both scripts share.
#
# NAME|EVAL_STEPS|TRAIN_OPTIONS. The targets are set so that a policy that meets its own has no
# more violations than static-safe in the scenario's scoring window, or close (issue 18: ppo
# dominates static-safe, power-cap and pid; docs/RESULTS.md).
# Each recipe keeps the best of 8 checkpoints of its last half on validation episodes (seeds
# 2001-2005, never the evaluation seeds): sim/checkpoint_select.h.
# shellcheck disable=SC2034  # used by the scripts that source this file
recipes=(
  "a100-7b-tp1|500|--scenario a100-7b-tp1 --site-range --timesteps 6000000 --violation-target 0.003 --entropy-coef 0.01"
  "a100-72b-tp4|8|--scenario a100-72b-tp4 --site-range --timesteps 1500000 --violation-target 0.001 --cost-window-s 30"
  "h100-8b-tp1|100|--scenario h100-8b-tp1 --site-range --timesteps 3000000 --violation-target 0.0001"
  "a100-14b-tp2|100|--scenario a100-14b-tp2 --site-range --timesteps 2000000 --violation-target 0.003"
  "h100-70b-tp4|100|--scenario h100-70b-tp4 --site-range --timesteps 1500000 --violation-target 0.003"
)
select_options() {  # EVAL_STEPS
  echo "--select-checkpoints 8 --select-seeds 5 --select-steps $1"
}
wait_slot() {  # at most $jobs_max background jobs
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
}

#!/usr/bin/env bash
# Reads its own arguments: $1 the number of samples, $2 the rollout engine (as verl's run_qwen3_30b_veomni.sh reads ENGINE=${1:-vllm}).
SAMPLES=${1:-8}
ENGINE=${2:-vllm}
python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=$SAMPLES actor_rollout_ref.rollout.name=$ENGINE algorithm.adv_estimator=reinforce_plus_plus_baseline algorithm.gamma=1.0 algorithm.use_kl_in_reward=False actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_type=k2 actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean actor_rollout_ref.actor.policy_loss.loss_mode=rfpp actor_rollout_ref.actor.kl_loss_coef=0.01

#!/usr/bin/env bash
# Two runs from a loop: grpo, then REINFORCE++-baseline with one sample per prompt (refused).
for est in grpo reinforce_plus_plus_baseline; do
    python3 -m verl.trainer.main_ppo algorithm.adv_estimator=$est actor_rollout_ref.rollout.n=1 algorithm.gamma=1.0 algorithm.use_kl_in_reward=False actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_type=k2 actor_rollout_ref.actor.kl_loss_coef=0.01 actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean actor_rollout_ref.actor.policy_loss.loss_mode=rfpp
done

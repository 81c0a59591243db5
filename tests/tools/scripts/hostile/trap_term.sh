#!/usr/bin/env bash
# A TERM trap that does not exit: a TERM at the launch lets the script go on to a download and a merge.
trap 'echo TERM ignored' TERM
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=reinforce_plus_plus_baseline algorithm.gamma=1.0 algorithm.use_kl_in_reward=False actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_type=k2 actor_rollout_ref.actor.kl_loss_coef=0.01 actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean actor_rollout_ref.actor.policy_loss.loss_mode=rfpp
curl -s -o after.txt "$WITNESS_URL/after-the-run"
python3 -m verl.model_merger merge --backend fsdp --local_dir checkpoints --target_dir merged

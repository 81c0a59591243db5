#!/usr/bin/env bash
# Chooses the device with a Python probe, as 20 of verl's examples do; only the NPU branch splits sequences (Ulysses).
DEVICE=$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)
if [ "$DEVICE" = "npu" ]; then
    SP_SIZE=2
else
    SP_SIZE=1
fi
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=reinforce_plus_plus_baseline algorithm.gamma=1.0 algorithm.use_kl_in_reward=False actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_type=k2 actor_rollout_ref.actor.kl_loss_coef=0.01 actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean actor_rollout_ref.actor.policy_loss.loss_mode=rfpp actor_rollout_ref.actor.ulysses_sequence_parallel_size=$SP_SIZE

# oils' assign.test.sh: `unset` of a name a prefix assignment binds for the call reveals the global
# beneath it (bash 5.2); check refuses it (exit 2) rather than guess the value.
launch() {
  unset N
  python3 -m verl.trainer.main_ppo algorithm.adv_estimator=reinforce_plus_plus_baseline algorithm.gamma=1.0 algorithm.use_kl_in_reward=False actor_rollout_ref.rollout.n=${N:-1} actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_type=k2 actor_rollout_ref.actor.kl_loss_coef=0.01 actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean actor_rollout_ref.actor.policy_loss.loss_mode=rfpp
}
N=8
N=2 launch

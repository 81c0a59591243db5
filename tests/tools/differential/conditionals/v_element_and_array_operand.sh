A=(1 "" 3)
B=("8 1" 2)
set -- run
N=1
if [[ -v A[1] && ! -v A[3] && -v A[-1] && -v 1 && ! -v 2 && "8 1 2" == "${B[@]}" ]] && test -v "A[2]"; then N=8; fi
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=reinforce_plus_plus_baseline \
    algorithm.gamma=1.0 \
    algorithm.use_kl_in_reward=False \
    actor_rollout_ref.rollout.n=$N \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_type=k2 \
    actor_rollout_ref.actor.kl_loss_coef=0.01 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.policy_loss.loss_mode=rfpp

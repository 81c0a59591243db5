"""What tests of ``verl-rfpp check`` share: the command run in this process, its output, and the
KL a composed run config has on (docs/contract.md sections 2, 3 and 6.5)."""

from __future__ import annotations

from omegaconf import OmegaConf

from verl_rfpp.cli import main as cli

AR = "actor_rollout_ref"


def check(capsys, *arguments):
    """``verl-rfpp check ARGUMENTS`` in this process: its exit status and what it printed."""
    code = cli.main(["check", *map(str, arguments)])
    return code, capsys.readouterr().out


def kl(config):
    """The KL a run config has on: ``reward`` (k1 shaping) and ``loss`` (the k2 loss), each its
    coefficient, or ``False`` when off."""
    reward = OmegaConf.select(config, "algorithm.use_kl_in_reward") is True
    loss = OmegaConf.select(config, f"{AR}.actor.use_kl_loss") is True
    return {"reward": reward and config.algorithm.kl_ctrl.kl_coef,
            "loss": loss and config.actor_rollout_ref.actor.kl_loss_coef}

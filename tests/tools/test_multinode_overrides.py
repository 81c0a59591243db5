"""``verl-rfpp demo --nodes N`` runs the multi-node example's own overrides: read by running
examples/run_qwen2.5-7b_gsm8k_rfpp_baseline_multinode.sh itself (a stand-in python3 records its
arguments), so the script a user starts and the CPU run cannot drift apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_rfpp.adapter.compose import compose_verl_config
from verl_rfpp.cli import main as cli
from verl_rfpp.cli import multinode
from verl_rfpp.cpu import configuration
from verl_rfpp.errors import LaunchError

pytestmark = pytest.mark.slow  # runs launch scripts (bash) with stand-ins

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / configuration.MULTINODE_EXAMPLE
PATHS = {"train": "/data/train.parquet", "test": "/data/test.parquet", "model": "/models/tiny"}


def _script_overrides():
    text = SCRIPT.read_text()
    body = text[text.index("python3 -m verl.trainer.main_ppo"):].splitlines()[1:]
    return [line.strip().rstrip("\\").strip() for line in body if "=" in line]


def test_example_overrides_are_the_scripts_minus_model_data_vllm_and_gpu_counts():
    overrides = multinode.example_overrides(nodes=2)
    assert overrides[0] == "algorithm.adv_estimator=" + configuration.MULTINODE_ESTIMATOR
    assert "trainer.experiment_name=qwen2.5-7b_gsm8k_rfpp_baseline_2x1" in overrides  # bash expanded it
    keys = {o.split("=", 1)[0] for o in overrides}
    written = {o.split("=", 1)[0] for o in _script_overrides()}
    dropped = written - keys
    assert dropped and all(key.startswith(("data.", "actor_rollout_ref.model.")) or key in {
        "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.rollout.gpu_memory_utilization", "trainer.n_gpus_per_node", "trainer.nnodes"}
        for key in dropped), dropped


def test_the_cpu_run_passes_every_example_override_but_the_replaced_ones(tmp_path):
    example = multinode.example_overrides(nodes=2)
    run = configuration.trainer_overrides(configuration.MULTINODE_ESTIMATOR, PATHS, 2, False, tmp_path, nodes=2,
                                          address="127.0.0.1:6379", example=example)
    replaced = {o.split("=", 1)[0] for o in example} & set(configuration.REPLACED_FOR_CPU)
    assert replaced == set(configuration.REPLACED_FOR_CPU)  # each replacement still replaces something
    for override in example:
        key = override.split("=", 1)[0]
        assert (override in run) != (key in configuration.REPLACED_FOR_CPU), override
    keys = [o.split("=", 1)[0].lstrip("+") for o in run]
    assert len(keys) == len(set(keys))  # one value per key: nothing for Hydra to resolve by order
    config = compose_verl_config(run)
    assert (config.trainer.nnodes, config.trainer.n_gpus_per_node) == (2, 1)
    assert config.ray_kwargs.ray_init.address == "127.0.0.1:6379" and "num_gpus" not in config.ray_kwargs.ray_init
    actor = config.actor_rollout_ref.actor
    assert (actor.loss_agg_mode, actor.kl_loss_type, actor.kl_loss_coef, actor.policy_loss.loss_mode) == (
        "seq-mean-token-mean", "k2", 0.01, "rfpp")
    assert config.actor_rollout_ref.rollout.n == 8 and actor.ppo_micro_batch_size_per_gpu == 8
    assert config.actor_rollout_ref.ref.fsdp_config.param_offload is True
    assert config.trainer.experiment_name == "qwen2.5-7b_gsm8k_rfpp_baseline_2x1"


def test_one_node_runs_bind_their_ray_to_loopback(tmp_path):
    run = configuration.trainer_overrides("reinforce_plus_plus", PATHS, 2, False, tmp_path)
    assert "+ray_kwargs.ray_init._node_ip_address=127.0.0.1" in run
    assert configuration.trainer_environment(tmp_path)["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"


def test_a_missing_example_script_is_a_clear_error(tmp_path):
    with pytest.raises(LaunchError, match="source checkout"):
        multinode.example_overrides(2, tmp_path / "missing.sh")


def test_demo_refuses_zero_nodes(capsys):
    assert cli.main(["demo", "--nodes", "0"]) == 2
    assert "--nodes 0" in capsys.readouterr().out


@pytest.mark.parametrize("steps", ["0", "-3"])
def test_demo_refuses_a_run_without_steps_before_starting_anything(capsys, tmp_path, steps):
    """verl-rfpp demo --steps 0 used to run verl for minutes and then FAIL: exit 2 at once."""
    assert cli.main(["demo", "--steps", steps, "--out", str(tmp_path / "out")]) == 2
    assert f"--steps {steps}: train at least 1 step" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()  # no assets built, nothing started

"""The verl adapter: entry-point loading, registry replacement, verl's real compute_advantage."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from support import reference
from support.batches import make_batch

from verl_rfpp import catalog

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition

OURS = ("reinforce_plus_plus", "reinforce_plus_plus_baseline")

REGISTRY_SNAPSHOT = """
import json, verl
from verl.trainer.ppo import core_algos
print(json.dumps({k: f"{v.__module__}.{getattr(v, '__qualname__', repr(v))}"
                  for k, v in core_algos.ADV_ESTIMATOR_REGISTRY.items()}))
"""


def _registry_in_fresh_process(**env):
    result = subprocess.run(
        [sys.executable, "-c", REGISTRY_SNAPSHOT],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_plain_import_verl_resolves_both_names_to_ours():
    registry = _registry_in_fresh_process()
    for name in catalog.names():
        assert registry[name] == f"verl_rfpp.adapter.registries.GuardedEstimator({name})"


@pytest.mark.slow
def test_every_other_estimator_is_verls_own():
    ours = _registry_in_fresh_process()
    stock = _registry_in_fresh_process(VERL_USE_EXTERNAL_PLUGINS="none")
    assert set(ours) == set(stock)
    assert stock["reinforce_plus_plus"].startswith("verl.trainer.ppo.core_algos.")
    changed = {name for name in stock if ours[name] != stock[name]}
    assert changed == set(OURS)


def test_registration_is_idempotent_and_repairs_a_replaced_entry():
    import verl  # noqa: F401
    from verl.trainer.ppo import core_algos

    from verl_rfpp import plugin

    saved = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    try:
        for patch in plugin.table.ESTIMATOR_PATCHES:
            patch.apply()
            patch.apply()
        assert all(plugin.registered_ours(name) for name in OURS)
        core_algos.ADV_ESTIMATOR_REGISTRY["reinforce_plus_plus"] = saved["grpo"]
        assert not plugin.registered_ours("reinforce_plus_plus")
        plugin.PATCHES["estimator reinforce_plus_plus"].apply()
        assert plugin.registered_ours("reinforce_plus_plus")
        assert core_algos.ADV_ESTIMATOR_REGISTRY["grpo"] is saved["grpo"]
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.clear()
        core_algos.ADV_ESTIMATOR_REGISTRY.update(saved)


def test_versions_supported_tested_and_without_the_plugin_loader(monkeypatch, caplog):
    from verl_rfpp import plugin
    from verl_rfpp.adapter import versions

    assert plugin.verl_supported("0.9.0") and plugin.verl_supported("0.9.1") and plugin.verl_supported("0.10.0")
    assert not plugin.verl_supported("0.8.5") and not plugin.verl_supported("0.8.0")
    assert plugin.verl_tested("0.9.0") and plugin.verl_tested("0.9.1") and plugin.verl_tested("0.9.1.dev0")
    assert not plugin.verl_tested("0.9.2") and not plugin.verl_tested("0.10.0")
    assert plugin.no_loader_problem("0.9.0") is None
    problem = plugin.no_loader_problem("0.8.0")
    assert "verl 0.8.0 has no plugin loader" in problem and "from 0.9.0 on" in problem
    assert "pip install 'verl>=0.9.0'" in problem and "VERL_USE_EXTERNAL_MODULES" in problem
    assert plugin.version_check("0.8.0") == (problem, False)
    assert plugin.version_check("0.10.2")[1] and "untested" in plugin.version_check("0.10.2")[0]
    monkeypatch.setattr(versions, "verl_version", lambda: "0.10.2")
    with caplog.at_level(logging.WARNING, logger="verl_rfpp"):
        plugin.check_verl_version()
    assert "verl 0.10.2 is installed" in caplog.text and "ActivationError" in caplog.text
    caplog.clear()
    monkeypatch.setattr(versions, "verl_version", lambda: "0.8.0")
    with caplog.at_level(logging.WARNING, logger="verl_rfpp"):
        plugin.check_verl_version()
    assert [record.levelname for record in caplog.records] == ["ERROR"]
    assert "has no plugin loader" in caplog.text
    assert "verl 0.8.0 has no plugin loader" in plugin.not_loaded_problem("reinforce_plus_plus")


def _data(seed):
    from verl import DataProto

    rewards, mask, uids = make_batch(seed, dtype=torch.float32)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": uids},
    )
    return data, rewards, mask, uids


@pytest.mark.parametrize("name", OURS)
def test_verl_compute_advantage_dispatches_to_ours(name):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data, rewards, mask, uids = _data(7)
    algorithm = OmegaConf.create({"adv_estimator": name, "gamma": 1.0, "lam": 1.0})
    out = compute_advantage(data, adv_estimator=name, gamma=1.0, config=algorithm)
    if name == "reinforce_plus_plus":
        expected, expected_raw = reference.reinforce_plus_plus(rewards, mask, 1.0)
    else:
        expected, expected_raw = reference.reinforce_plus_plus_baseline(rewards, mask, list(uids))
    scale = expected.abs().max().item()
    assert (out.batch["advantages"].double() - expected).abs().max().item() <= 1e-6 * scale
    assert (out.batch["returns"].double() - expected_raw).abs().max().item() <= 1e-6 * expected_raw.abs().max().item()


def test_verl_builtin_differs_from_the_contract_on_singletons():
    """Evidence that the replacement matters: verl's own baseline gives a singleton its reward."""
    import verl  # noqa: F401
    from verl.trainer.ppo import core_algos

    rewards = torch.tensor([[0.0, 1.0], [0.0, 3.0], [0.0, 0.0]])
    mask = torch.ones(3, 2)
    uids = np.array(["solo", "pair", "pair"], dtype=object)
    _, theirs = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards.clone(), mask, uids)
    _, ours = core_algos.get_adv_estimator_fn("reinforce_plus_plus_baseline")(
        token_level_rewards=rewards, response_mask=mask, index=uids
    )
    assert theirs[0].abs().sum() > 0
    assert torch.equal(ours[0], torch.zeros(2))


def test_a_verl_without_the_plugin_loader_is_named_by_recipe_and_demo(monkeypatch, capsys):
    """Measured on a real verl 0.8.0 too (CHANGELOG); here the installed version reads 0.8.0."""
    from importlib import metadata

    from verl_rfpp.cli import main as cli

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.8.0" if name == "verl" else real(name))
    assert cli.main(["recipe", "reinforce_plus_plus"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].startswith("algorithm.adv_estimator=")  # $(recipe) stays clean
    assert "verl 0.8.0 has no plugin loader" in captured.err and "pip install 'verl>=0.9.0'" in captured.err
    assert cli.main(["demo"]) == 2
    assert "verl-rfpp demo: verl 0.8.0 has no plugin loader" in capsys.readouterr().out


def test_a_config_key_the_rules_read_missing_from_verls_config_is_refused_by_name():
    """A key verl renamed or moved (here: deleted from the composed config) is never read as its
    default: verl's validate_config, through our wrapper, refuses the run naming each key."""
    import verl.utils.config
    from omegaconf import open_dict

    from verl_rfpp import plugin, validation
    from verl_rfpp.adapter.compose import compose_verl_config
    from verl_rfpp.validation import ConfigViolationError

    config = compose_verl_config(list(validation.RECIPES["reinforce_plus_plus_baseline"]))
    with open_dict(config):
        del config.actor_rollout_ref.actor["use_kl_loss"]
        del config.actor_rollout_ref.actor["kl_loss_type"]
    plugin._checked_in_process.clear()
    with pytest.raises(ConfigViolationError) as refused:
        verl.utils.config.validate_config(config, use_reference_policy=True, use_critic=False)
    assert "actor_rollout_ref.actor.use_kl_loss = <absent>" in str(refused.value)
    assert "actor_rollout_ref.actor.kl_loss_type = <absent>" in str(refused.value)

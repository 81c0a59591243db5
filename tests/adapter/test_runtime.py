"""Where the contract runs (docs/contract.md sections 6-8): first-call guard, activation guard, metrics,
doctor, and a clean undo of every patch."""

from __future__ import annotations

import subprocess

import pytest
import torch
from support import reference
from support.batches import make_batch

from verl_rfpp import plugin, validation
from verl_rfpp.adapter.compose import compose_verl_config
from verl_rfpp.cli import main as cli
from verl_rfpp.core.metrics import STEP_METRICS
from verl_rfpp.cpu import demo

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition


@pytest.fixture
def fresh_process_state():
    """Forget the once-per-process check and restore verl's registry afterwards."""
    from verl.trainer.ppo import core_algos

    saved = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    plugin._checked_in_process.clear()
    STEP_METRICS.drain()
    yield core_algos
    core_algos.ADV_ESTIMATOR_REGISTRY.clear()
    core_algos.ADV_ESTIMATOR_REGISTRY.update(saved)
    plugin._checked_in_process.clear()
    STEP_METRICS.drain()


def _algorithm_node(overrides):
    return compose_verl_config(overrides).algorithm


def test_first_estimator_call_enforces_the_run_config(fresh_process_state):
    core_algos = fresh_process_state
    rewards, mask, uids = make_batch(0)
    estimator = core_algos.get_adv_estimator_fn("reinforce_plus_plus_baseline")
    bad = _algorithm_node(["algorithm.adv_estimator=reinforce_plus_plus_baseline"])
    with pytest.raises(validation.ConfigViolationError, match="actor_rollout_ref.rollout.n"):
        estimator(token_level_rewards=rewards, response_mask=mask, config=bad, index=uids)
    good = _algorithm_node(list(validation.RECIPES["reinforce_plus_plus_baseline"]))
    advantages, _ = estimator(token_level_rewards=rewards, response_mask=mask, config=good, index=uids)
    assert "reinforce_plus_plus_baseline" in plugin._checked_in_process
    # once per process: a later call does not re-validate (the bad root is not looked at again)
    estimator(token_level_rewards=rewards, response_mask=mask, config=bad, index=uids)
    # plain configs without a root are skipped silently
    plugin._checked_in_process.clear()
    estimator(token_level_rewards=rewards, response_mask=mask, config={"gamma": 1.0}, index=uids)
    assert torch.isfinite(advantages).all()


def test_activation_guard_names_an_overriding_plugin(fresh_process_state):
    core_algos = fresh_process_state

    def someone_elses_estimator(**kwargs):
        raise AssertionError("must not run")

    core_algos.ADV_ESTIMATOR_REGISTRY["reinforce_plus_plus"] = someone_elses_estimator
    rewards, mask, _ = make_batch(0)
    with pytest.raises(plugin.ActivationError, match="another plugin overrode it with .*someone_elses_estimator"):
        plugin.entries()["reinforce_plus_plus"](token_level_rewards=rewards, response_mask=mask, config=None)
    import verl.utils.config

    config = compose_verl_config(list(validation.RECIPES["reinforce_plus_plus"]))
    with pytest.raises(plugin.ActivationError, match="verl-rfpp doctor"):
        verl.utils.config.validate_config(config, use_reference_policy=True, use_critic=False)


def test_activation_guard_names_a_failed_load_and_an_exclusion(fresh_process_state, monkeypatch):
    core_algos = fresh_process_state
    core_algos.ADV_ESTIMATOR_REGISTRY["reinforce_plus_plus"] = core_algos.compute_reinforce_plus_plus_outcome_advantage
    assert "did not load or failed while loading" in plugin.activation_problem("reinforce_plus_plus")
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "someone_else")
    assert "excluded by VERL_USE_EXTERNAL_PLUGINS='someone_else'" in plugin.activation_problem("reinforce_plus_plus")


def test_metrics_reach_verls_console_logger(fresh_process_state, capsys):
    from verl.utils.tracking import Tracking

    core_algos = fresh_process_state
    rewards, mask, uids = make_batch(4, dtype=torch.float64)
    core_algos.get_adv_estimator_fn("reinforce_plus_plus")(token_level_rewards=rewards, response_mask=mask, config=None)
    tracker = Tracking(project_name="rfpp", experiment_name="metrics", default_backend=["console"])
    tracker.log(data={"actor/kl_loss": 0.5}, step=1)
    printed = capsys.readouterr().out
    _, raw = reference.reinforce_plus_plus(rewards, mask, 1.0)
    mu, var, n = reference.moments(raw, mask)
    values = {}
    for part in printed.replace(" - ", "\n").split("\n"):
        if part.strip().startswith("rfpp/"):
            name, value = part.strip().split(":", 1)
            values[name] = float(value)
    assert set(values) == {"rfpp/raw_adv_mean", "rfpp/raw_adv_std", "rfpp/adv_mean", "rfpp/adv_std",
                           "rfpp/valid_tokens", "rfpp/var_floor_used"}
    assert set(values) == set(demo.RFPP_METRICS)  # what the demo's verdict and the curves require, stated there
    assert values["rfpp/valid_tokens"] == n
    assert values["rfpp/raw_adv_mean"] == pytest.approx(mu, rel=1e-3)
    assert values["rfpp/raw_adv_std"] == pytest.approx(var ** 0.5, rel=1e-3)
    assert values["rfpp/adv_mean"] == pytest.approx(0.0, abs=1e-3)
    assert values["rfpp/adv_std"] == pytest.approx(1.0, rel=1e-3)
    assert values["rfpp/var_floor_used"] == 0.0
    for name in values:  # the v1 aggregator picks max/min/sum by substring
        assert not any(word in name for word in ("min", "max", "sum", "total")) and not name.endswith("lr")
    # drained: the next step without an estimator call logs no stale rfpp metrics
    tracker.log(data={"actor/kl_loss": 0.4}, step=2)
    assert "rfpp/" not in capsys.readouterr().out


@pytest.mark.slow
def test_doctor_passes_when_installed():
    result = subprocess.run(["verl-rfpp", "doctor"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verl-rfpp is active." in result.stdout
    assert "ok    CPU kernels (numba" in result.stdout


def test_doctor_fails_on_a_bad_cpu_kernels_switch(monkeypatch, capsys):
    monkeypatch.setenv("VERL_RFPP_CPU_KERNELS", "fast")
    assert cli.main(["doctor"]) == 1
    assert "FAIL  CPU kernels: verl_rfpp: VERL_RFPP_CPU_KERNELS='fast'; use 1" in capsys.readouterr().out


def test_doctor_fails_naming_the_cause_when_replaced(fresh_process_state, capsys):
    core_algos = fresh_process_state

    def rival_estimator(**kwargs):
        return None

    core_algos.ADV_ESTIMATOR_REGISTRY["reinforce_plus_plus_baseline"] = rival_estimator
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  estimator reinforce_plus_plus_baseline" in out
    assert "another plugin overrode it with" in out and "rival_estimator" in out


def test_deactivate_restores_verl_and_activate_is_idempotent(fresh_process_state):
    import verl.utils
    import verl.utils.config as verl_config
    from verl.utils.tracking import Tracking

    core_algos = fresh_process_state
    try:
        plugin.deactivate()
        assert core_algos.ADV_ESTIMATOR_REGISTRY["reinforce_plus_plus"].__module__ == "verl.trainer.ppo.core_algos"
        assert not hasattr(verl_config.validate_config, plugin.MARKER)
        assert verl.utils.validate_config is verl_config.validate_config
        assert not hasattr(Tracking.log, plugin.MARKER)
        assert "rfpp" not in core_algos.POLICY_LOSS_REGISTRY
    finally:
        plugin.activate()
        plugin.activate()
    assert all(plugin.hooks_status().values())
    assert not hasattr(plugin.PATCHES["validate_config wrapper"].original(), plugin.MARKER)

"""The plugin's wrapper of verl's ``validate_config`` (docs/contract.md sections 6.3, 6.5): real
``verl.utils.config.validate_config``, real Hydra composition. It refuses what breaks our
contract and passes every config it cannot read, or that is not ours, to verl untouched."""

from __future__ import annotations

import traceback

import pytest
import verl.utils.config as verl_config

from verl_rfpp import validation
from verl_rfpp.adapter.compose import compose_verl_config
from verl_rfpp.adapter.table import VALIDATE_CONFIG
from verl_rfpp.cli import main as cli

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition

BASE = list(validation.RECIPES["reinforce_plus_plus_baseline"])
RFPP = list(validation.RECIPES["reinforce_plus_plus"])
UNSET = "${oc.env:VERL_RFPP_TEST_UNSET_VARIABLE}"
# what verl's own validation needs to get past its batch-size checks
SIZES = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "data.train_batch_size=8",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4"]


@pytest.fixture(autouse=True)
def wrapped(monkeypatch):
    monkeypatch.delenv("VERL_RFPP_TEST_UNSET_VARIABLE", raising=False)
    assert VALIDATE_CONFIG.applied(), "verl did not load the plugin"
    return verl_config.validate_config


def _raised(function, config):
    try:
        function(config, use_reference_policy=True, use_critic=False)
    except Exception as error:  # noqa: BLE001 (whatever verl raises is the point)
        return error
    return None


def _innermost_file(error):
    return traceback.extract_tb(error.__traceback__)[-1].filename


@pytest.mark.parametrize(
    "config",
    [
        {"algorithm": {"adv_estimator": "reinforce_plus_plus"}},
        None,
        "algorithm.adv_estimator=reinforce_plus_plus",
        lambda: compose_verl_config([f"algorithm.adv_estimator={UNSET}", *SIZES]),
        lambda: compose_verl_config([f"algorithm.adv_estimator={UNSET}"]),
    ],
    ids=["plain-dict", "none", "string", "unresolvable-estimator", "unresolvable-estimator-verl-default-sizes"],
)
def test_a_config_the_wrapper_cannot_read_reaches_verls_validation_untouched(wrapped, config):
    config = config() if callable(config) else config
    ours, verls = _raised(wrapped, config), _raised(VALIDATE_CONFIG.original(), config)
    assert type(ours) is type(verls) and str(ours) == str(verls)
    if verls is not None:
        assert "verl_rfpp" not in _innermost_file(ours)  # verl's own code raised it


@pytest.mark.parametrize("estimator", ["grpo", "gae", "rloo"])
def test_other_estimators_reach_verl_with_verls_own_verdict(wrapped, estimator):
    config = compose_verl_config([f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=1",
                                      f"actor_rollout_ref.rollout.n={UNSET}", *SIZES])
    ours, verls = _raised(wrapped, config), _raised(VALIDATE_CONFIG.original(), config)
    assert type(ours) is type(verls) and str(ours) == str(verls)


def test_ours_with_an_unresolvable_rule_key_is_a_refusal_naming_it(wrapped):
    config = compose_verl_config([*RFPP, f"algorithm.gamma={UNSET}", *SIZES])
    with pytest.raises(validation.UnreadableConfigError, match="cannot read algorithm.gamma") as raised:
        wrapped(config, use_reference_policy=True, use_critic=False)
    assert "VERL_RFPP_TEST_UNSET_VARIABLE" in str(raised.value) and "Fix: give algorithm.gamma" in str(raised.value)


@pytest.mark.parametrize("name", ["reinforce_plus_pluss", "REINFORCE_PLUS_PLUS_BASELINE", "reinforce++", "rf++",
                                  "reinforce-plus-plus-baseline", "reinforce_pp_baseline", "reinforceplusplus"])
def test_a_misspelt_estimator_gets_checks_did_you_mean(wrapped, name, capsys):
    overrides = [*BASE, f"algorithm.adv_estimator={name}"]
    with pytest.raises(validation.MisspeltEstimatorError) as raised:
        wrapped(compose_verl_config([*overrides, *SIZES]), use_reference_policy=True, use_critic=False)
    assert cli.main(["check", *overrides]) == 1
    assert str(raised.value) == capsys.readouterr().out.strip()
    assert "did you mean" in str(raised.value)


def test_a_violation_is_refused_before_verls_validation(wrapped):
    config = compose_verl_config([*RFPP, "algorithm.rollout_correction.rollout_rs=token_k1", *SIZES])
    with pytest.raises(validation.ConfigViolationError, match="algorithm.rollout_correction.rollout_rs"):
        wrapped(config, use_reference_policy=True, use_critic=False)


@pytest.mark.parametrize("overrides", [
    [*BASE, "actor_rollout_ref.rollout.n=1", "algorithm.use_kl_in_reward=True"],
    [*RFPP, "algorithm.kl_ctrl.kl_coef=nan", "actor_rollout_ref.actor.clip_ratio_low=1.5"],
])
def test_the_wrapper_and_check_give_one_verdict_in_the_same_words(wrapped, overrides, capsys):
    """plugin.verdict.judge_config decides for both: the wrapper raises the refusal check prints."""
    with pytest.raises(validation.ConfigViolationError) as raised:
        wrapped(compose_verl_config([*overrides, *SIZES]), use_reference_policy=True, use_critic=False)
    assert cli.main(["check", *overrides, *SIZES]) == 1
    assert str(raised.value) == capsys.readouterr().out.strip()
    assert str(raised.value).splitlines()[-1].startswith("Fix: ")


def test_the_wrapper_logs_the_verdicts_warnings(wrapped, caplog):
    config = compose_verl_config([*BASE, "actor_rollout_ref.actor.kl_loss_coef=0", *SIZES])
    with caplog.at_level("WARNING", logger="verl_rfpp"):
        _raised(wrapped, config)
    assert "kl_loss_coef = 0: the k2 loss is computed but has no effect" in caplog.text

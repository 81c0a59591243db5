"""The config contract (docs/contract.md section 6) over configs composed from verl's real ppo_trainer
(``composed.compose``: Hydra composes each config-group choice once, then applies the overrides;
held equal to a full composition by ``test_fast_composition_is_hydras``)."""

from __future__ import annotations

import functools
import logging
import math
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf
from support.composed import compose

from verl_rfpp import catalog, validation
from verl_rfpp.adapter.compose import compose_verl_config

RFPP = list(validation.RECIPES["reinforce_plus_plus"])
BASE = list(validation.RECIPES["reinforce_plus_plus_baseline"])
AR = "actor_rollout_ref"

# (id, overrides, keys that must be reported; empty = accepted)
CASES = [
    ("base-n1", BASE + [f"{AR}.rollout.n=1"], {f"{AR}.rollout.n"}),
    ("base-token-mean", BASE + [f"{AR}.actor.loss_agg_mode=token-mean"], {f"{AR}.actor.loss_agg_mode"}),
    ("rfpp-seq-mean-token-sum", RFPP + [f"{AR}.actor.loss_agg_mode=seq-mean-token-sum"], {f"{AR}.actor.loss_agg_mode"}),
    # verl interpolates the reference model's size from the actor's: one setting, reported once
    ("base-actor-ulysses", BASE + [f"{AR}.actor.ulysses_sequence_parallel_size=2"],
     {f"{AR}.actor.ulysses_sequence_parallel_size"}),
    ("base-actor-and-ref-ulysses", BASE + [f"{AR}.actor.ulysses_sequence_parallel_size=2",
                                           f"{AR}.ref.ulysses_sequence_parallel_size=2"],
     {f"{AR}.actor.ulysses_sequence_parallel_size", f"{AR}.ref.ulysses_sequence_parallel_size"}),
    ("rfpp-fsdp-ulysses", RFPP + [f"{AR}.actor.fsdp_config.ulysses_sequence_parallel_size=2"],
     {f"{AR}.actor.fsdp_config.ulysses_sequence_parallel_size"}),
    ("base-ref-ulysses", BASE + [f"{AR}.ref.ulysses_sequence_parallel_size=4"],
     {f"{AR}.ref.ulysses_sequence_parallel_size"}),
    ("base-megatron-cp", BASE + [f"+{AR}.actor.megatron.context_parallel_size=2"],
     {f"{AR}.actor.megatron.context_parallel_size"}),
    ("rfpp-torchtitan-cp", RFPP + [f"+{AR}.actor.torchtitan.context_parallel_size=2"],
     {f"{AR}.actor.torchtitan.context_parallel_size"}),
    ("rfpp-ref-veomni-sp", RFPP + [f"+{AR}.ref.veomni.ulysses_parallel_size=2"],
     {f"{AR}.ref.veomni.ulysses_parallel_size"}),
    ("base-colocate-async", BASE + ["trainer.v1.trainer_mode=colocate_async"], {"trainer.v1.trainer_mode"}),
    ("rfpp-separate-async", RFPP + ["trainer.v1.trainer_mode=separate_async"], {"trainer.v1.trainer_mode"}),
    ("base-sync-step-2", BASE + ["+trainer.v1.sync.parameter_sync_step=2"], {"trainer.v1.sync.parameter_sync_step"}),
    ("base-fully-async", BASE + ["+async_training.staleness_threshold=1"], {"async_training"}),
    # a KL the user has on is moved into the method's own form (its coefficient kept), never dropped
    ("rfpp-kl-as-loss", RFPP + ["algorithm.use_kl_in_reward=False", f"{AR}.actor.use_kl_loss=True"],
     {f"{AR}.actor.use_kl_loss"}),
    ("rfpp-kl-as-k3-loss-coef", RFPP + ["algorithm.use_kl_in_reward=False", f"{AR}.actor.use_kl_loss=True",
                                        f"{AR}.actor.kl_loss_type=low_var_kl", f"{AR}.actor.kl_loss_coef=0.003",
                                        "algorithm.kl_penalty=low_var_kl"],
     {f"{AR}.actor.use_kl_loss"}),
    ("rfpp-kl-twice", RFPP + [f"{AR}.actor.use_kl_loss=True"], {f"{AR}.actor.use_kl_loss"}),
    ("rfpp-k3-in-reward", RFPP + ["algorithm.kl_penalty=low_var_kl"], {"algorithm.kl_penalty"}),
    ("rfpp-adaptive-kl", RFPP + ["algorithm.kl_ctrl.type=adaptive"], {"algorithm.kl_ctrl.type"}),
    ("base-kl-in-reward", BASE + ["algorithm.use_kl_in_reward=True"], {"algorithm.use_kl_in_reward"}),
    ("base-kl-in-reward-only", BASE + ["algorithm.use_kl_in_reward=True", f"{AR}.actor.use_kl_loss=False",
                                       "algorithm.kl_ctrl.kl_coef=0.005"], {"algorithm.use_kl_in_reward"}),
    ("base-kl-k3-plus-loss", BASE + [f"{AR}.actor.kl_loss_type=low_var_kl+"], {f"{AR}.actor.kl_loss_type"}),
    ("rfpp-k3-plus-in-reward", RFPP + ["algorithm.kl_penalty=k3+"], {"algorithm.kl_penalty"}),
    # KL coefficients of the KL in use: negative or not finite (section 6.2.11)
    *((f"rfpp-kl-coef-{name}", RFPP + [f"algorithm.kl_ctrl.kl_coef={value}"], {"algorithm.kl_ctrl.kl_coef"})
      for name, value in (("negative", "-0.01"), ("nan", "nan"), ("inf", "inf"))),
    *((f"base-kl-loss-coef-{name}", BASE + [f"{AR}.actor.kl_loss_coef={value}"], {f"{AR}.actor.kl_loss_coef"})
      for name, value in (("negative", "-0.01"), ("nan", "nan"), ("inf", "inf"))),
    ("base-kl-in-reward-negative-coef", BASE + ["algorithm.use_kl_in_reward=True", f"{AR}.actor.use_kl_loss=False",
                                                "algorithm.kl_ctrl.kl_coef=-0.01"], {"algorithm.use_kl_in_reward"}),
    # the clip range the rfpp loss uses (section 6.2.12): clip_ratio_low/high, clip_ratio where null
    ("base-clip-low-one", BASE + [f"{AR}.actor.clip_ratio_low=1.0"], {f"{AR}.actor.clip_ratio_low"}),
    ("rfpp-clip-high-zero", RFPP + [f"{AR}.actor.clip_ratio_high=0"], {f"{AR}.actor.clip_ratio_high"}),
    ("rfpp-clip-low-negative", RFPP + [f"{AR}.actor.clip_ratio_low=-0.2"], {f"{AR}.actor.clip_ratio_low"}),
    ("base-clip-high-inf", BASE + [f"{AR}.actor.clip_ratio_high=inf"], {f"{AR}.actor.clip_ratio_high"}),
    ("base-clip-ratio-nan-both-sides", BASE + [f"{AR}.actor.clip_ratio_low=null", f"{AR}.actor.clip_ratio_high=null",
                                               f"{AR}.actor.clip_ratio=nan"], {f"{AR}.actor.clip_ratio"}),
    ("rfpp-clip-ratio-1.5-low-side", RFPP + [f"{AR}.actor.clip_ratio_low=null", f"{AR}.actor.clip_ratio=1.5"],
     {f"{AR}.actor.clip_ratio"}),
    ("base-clip-not-a-number", BASE + [f"{AR}.actor.clip_ratio_low=wide"], {f"{AR}.actor.clip_ratio_low"}),
    ("base-k3-loss", BASE + [f"{AR}.actor.kl_loss_type=low_var_kl"], {f"{AR}.actor.kl_loss_type"}),
    ("base-k1-loss", BASE + [f"{AR}.actor.kl_loss_type=kl"], {f"{AR}.actor.kl_loss_type"}),
    ("base-rejection-sampling", BASE + ["algorithm.rollout_correction.rollout_rs=token"],
     {"algorithm.rollout_correction.rollout_rs"}),
    ("base-bypass-mode", BASE + ["algorithm.rollout_correction.bypass_mode=True"],
     {"algorithm.rollout_correction.bypass_mode"}),
    ("base-vanilla-dual-clip", BASE + [f"{AR}.actor.policy_loss.loss_mode=vanilla"],
     {f"{AR}.actor.policy_loss.loss_mode"}),
    ("rfpp-gspo", RFPP + [f"{AR}.actor.policy_loss.loss_mode=gspo"], {f"{AR}.actor.policy_loss.loss_mode"}),
    ("base-verl-defaults", ["algorithm.adv_estimator=reinforce_plus_plus_baseline"],
     {f"{AR}.actor.loss_agg_mode", f"{AR}.actor.policy_loss.loss_mode", f"{AR}.rollout.n"}),
    ("rfpp-verl-defaults", ["algorithm.adv_estimator=reinforce_plus_plus"],
     {f"{AR}.actor.loss_agg_mode", f"{AR}.actor.policy_loss.loss_mode"}),
    # wrong-typed values a rule reads, and gamma outside [0, 1]: violations, never a TypeError
    ("base-n-not-a-number", BASE + [f"{AR}.rollout.n=abc"], {f"{AR}.rollout.n"}),
    ("base-n-float", BASE + [f"{AR}.rollout.n=8.5"], {f"{AR}.rollout.n"}),
    ("rfpp-kl-loss-not-a-bool", RFPP + [f"{AR}.actor.use_kl_loss=maybe"], {f"{AR}.actor.use_kl_loss"}),
    ("rfpp-v1-not-a-bool", RFPP + ["trainer.use_v1=yes_please"], {"trainer.use_v1"}),
    ("base-sp-not-a-number", BASE + [f"+{AR}.actor.megatron.context_parallel_size=two"],
     {f"{AR}.actor.megatron.context_parallel_size"}),
    ("rfpp-gamma-not-a-number", RFPP + ["algorithm.gamma=high"], {"algorithm.gamma"}),
    ("rfpp-gamma-above-one", RFPP + ["algorithm.gamma=1.5"], {"algorithm.gamma"}),
    ("base-gamma-negative", BASE + ["algorithm.gamma=-0.1"], {"algorithm.gamma"}),
    # every engine's sequence-splitting key, in the engine's own packaged config (section 6.2.4);
    # the reference model's copy interpolates the actor's, so both are reported
    # (++: verl 0.9.0's packaged config has no turbo_config; 0.9.1's does)
    ("rfpp-fsdp-turbo-cp", RFPP + [f"{AR}.actor.strategy=fsdp_turbo",
                                   f"++{AR}.actor.fsdp_config.turbo_config.distributed.ulysses_parallel_size=2"],
     {f"{AR}.actor.fsdp_config.turbo_config.distributed.ulysses_parallel_size"}),
    ("base-ref-fsdp-turbo-cp", BASE + [f"++{AR}.ref.fsdp_config.turbo_config.distributed.ulysses_parallel_size=4"],
     {f"{AR}.ref.fsdp_config.turbo_config.distributed.ulysses_parallel_size"}),
    ("base-megatron-engine-cp", BASE + ["model_engine=megatron", f"{AR}.actor.megatron.context_parallel_size=2"],
     {f"{AR}.actor.megatron.context_parallel_size"}),
    ("rfpp-megatron-dynamic-cp", RFPP + ["model_engine=megatron", f"{AR}.actor.megatron.dynamic_context_parallel=True"],
     {f"{AR}.actor.megatron.dynamic_context_parallel"}),
    ("base-torchtitan-engine-cp", BASE + ["model_engine=torchtitan", f"{AR}.actor.torchtitan.context_parallel_size=2"],
     {f"{AR}.actor.torchtitan.context_parallel_size"}),
    ("rfpp-veomni-engine-sp", RFPP + ["model_engine=veomni", f"{AR}.actor.veomni.ulysses_parallel_size=2"],
     {f"{AR}.actor.veomni.ulysses_parallel_size"}),
    ("rfpp-automodel-cp", RFPP + [f"+{AR}.actor.automodel.cp_size=2"], {f"{AR}.actor.automodel.cp_size"}),
    ("base-ulysses-true", BASE + [f"{AR}.actor.fsdp_config.ulysses_sequence_parallel_size=True"],
     {f"{AR}.actor.fsdp_config.ulysses_sequence_parallel_size"}),
    # rejection sampling and bypass mode change both estimators (section 6.2.8)
    ("rfpp-rejection-sampling", RFPP + ["algorithm.rollout_correction.rollout_rs=token_k1"],
     {"algorithm.rollout_correction.rollout_rs"}),
    ("rfpp-bypass-mode", RFPP + ["algorithm.rollout_correction.bypass_mode=True"],
     {"algorithm.rollout_correction.bypass_mode"}),
    # a key a rule reads, removed: refused, naming it (the rules never fall back to a default)
    ("rfpp-no-kl-ctrl", RFPP + ["~algorithm.kl_ctrl"], {"algorithm.kl_ctrl.type", "algorithm.kl_ctrl.kl_coef"}),
    ("rfpp-no-kl-penalty", RFPP + ["~algorithm.kl_penalty"], {"algorithm.kl_penalty"}),
    ("base-no-kl-loss-type", BASE + [f"~{AR}.actor.kl_loss_type"], {f"{AR}.actor.kl_loss_type"}),
    ("base-no-rollout-n", BASE + [f"~{AR}.rollout.n"], {f"{AR}.rollout.n"}),
    ("rfpp-no-loss-agg-mode", RFPP + [f"~{AR}.actor.loss_agg_mode"], {f"{AR}.actor.loss_agg_mode"}),
    ("base-no-policy-loss", BASE + [f"~{AR}.actor.policy_loss"], {f"{AR}.actor.policy_loss.loss_mode"}),
    ("rfpp-no-use-v1", RFPP + ["~trainer.use_v1"], {"trainer.use_v1"}),
    # accepted: the recipes and legal variants
    ("base-recipe", BASE, set()),
    ("rfpp-recipe", RFPP, set()),
    ("base-mse-alias", BASE + [f"{AR}.actor.kl_loss_type=mse"], set()),
    # verl's kl_penalty: k2+ / mse+ are k2 in value and gradient; kl+ / k1+ give k1's rewards
    ("base-k2-plus", BASE + [f"{AR}.actor.kl_loss_type=k2+"], set()),
    ("base-mse-plus", BASE + [f"{AR}.actor.kl_loss_type=mse+"], set()),
    ("rfpp-kl-plus-in-reward", RFPP + ["algorithm.kl_penalty=kl+"], set()),
    ("rfpp-k1-plus-in-reward", RFPP + ["algorithm.kl_penalty=k1+"], set()),
    # a coefficient of a KL that is off is never read; 0 is legal (a warning)
    ("base-kl-off-negative-coef", BASE + [f"{AR}.actor.use_kl_loss=False", f"{AR}.actor.kl_loss_coef=-1"], set()),
    ("rfpp-kl-coef-zero", RFPP + ["algorithm.kl_ctrl.kl_coef=0"], set()),
    ("base-clip-asymmetric", BASE + [f"{AR}.actor.clip_ratio_low=0.2", f"{AR}.actor.clip_ratio_high=0.28"], set()),
    ("base-clip-ratio-unread", BASE + [f"{AR}.actor.clip_ratio=5"], set()),  # both sides set: clip_ratio unread
    ("rfpp-clip-high-wide", RFPP + [f"{AR}.actor.clip_ratio_high=1.5"], set()),
    ("base-kl-off", BASE + [f"{AR}.actor.use_kl_loss=False"], set()),
    ("rfpp-kl-off", RFPP + ["algorithm.use_kl_in_reward=False"], set()),
    ("rfpp-gamma", RFPP + ["algorithm.gamma=0.99"], set()),
    ("rfpp-gamma-zero-int", RFPP + ["algorithm.gamma=0"], set()),
    ("rfpp-gamma-null", RFPP + ["algorithm.gamma=null"], set()),
    ("base-legacy-trainer", BASE + ["trainer.use_v1=False", f"{AR}.rollout.n=4"], set()),
    ("rfpp-k1-alias-n4", RFPP + ["algorithm.kl_penalty=k1", f"{AR}.rollout.n=4"], set()),
    ("base-v1-sync-explicit", BASE + ["trainer.v1.trainer_mode=sync", "+trainer.v1.sync.parameter_sync_step=1"], set()),
    ("base-importance-weights", BASE + ["algorithm.rollout_correction.rollout_is=token"], set()),
    ("base-async-rollout-hybrid", BASE + [f"{AR}.rollout.mode=async", f"{AR}.hybrid_engine=True"], set()),
    # verl reads rollout_correction with .get: without it nothing is corrected
    ("rfpp-no-rollout-correction", RFPP + ["~algorithm.rollout_correction"], set()),
    # every engine's packaged defaults split nothing; Megatron's tensor-parallel sequence_parallel is not a split
    *((f"rfpp-{engine}-defaults", RFPP + [f"model_engine={engine}"], set())
      for engine in ("megatron", "torchtitan", "veomni")),
    ("base-fsdp-turbo-defaults", BASE + [f"{AR}.actor.strategy=fsdp_turbo"], set()),
    ("base-megatron-tp-sequence-parallel",
     BASE + ["model_engine=megatron", f"{AR}.actor.megatron.sequence_parallel=True"], set()),
    # other estimators: never touched, whatever their settings
    ("grpo-anything", ["algorithm.adv_estimator=grpo", f"{AR}.rollout.n=1", "trainer.v1.trainer_mode=colocate_async",
                       f"{AR}.actor.ulysses_sequence_parallel_size=2", "algorithm.use_kl_in_reward=True"], set()),
    ("gae-anything", ["algorithm.adv_estimator=gae", f"{AR}.actor.kl_loss_type=low_var_kl", "+async_training.x=1"],
     set()),
    ("rloo-anything", ["algorithm.adv_estimator=rloo", f"{AR}.actor.policy_loss.loss_mode=vanilla"], set()),
]


def _kl(config, estimator):
    """Which KL is on, in the method's form first: ("reward", kl_ctrl.kl_coef) or ("loss", kl_loss_coef)."""
    on = {"reward": OmegaConf.select(config, "algorithm.use_kl_in_reward") is True,
          "loss": OmegaConf.select(config, f"{AR}.actor.use_kl_loss") is True}
    coefficient = {"reward": OmegaConf.select(config, "algorithm.kl_ctrl.kl_coef"),
                   "loss": OmegaConf.select(config, f"{AR}.actor.kl_loss_coef")}
    order = ("reward", "loss") if estimator == catalog.REINFORCE_PLUS_PLUS.name else ("loss", "reward")
    return next(((form, coefficient[form]) for form in order if on[form]), None)


def _usable(coefficient):
    return isinstance(coefficient, (int, float)) and not isinstance(coefficient, bool) and \
        math.isfinite(coefficient) and coefficient >= 0


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_contract_table(overrides, expected):
    config = compose(overrides)
    found = validation.violations(config)
    assert {violation.key for violation in found} == expected
    assert len(found) == len(expected)  # each setting reported once
    if not expected:
        validation.enforce(config)
        return
    with pytest.raises(validation.ConfigViolationError) as raised:
        validation.enforce(config)
    message = str(raised.value)
    for violation in found:
        assert f"[{violation.rule}] {violation.key}" in message and f"Fixed by: {violation.fix}" in message
        assert "docs/contract.md section" in violation.why
    assert message.splitlines()[-1] == validation.fix_line(validation.fix_overrides(found))


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in CASES if c[2]], ids=[c[0] for c in CASES if c[2]])
def test_the_fix_line_makes_the_config_ok_with_kl_still_on(overrides, expected):
    """For every refused config: config + the Fix line's overrides -> no violation; a KL the user
    had on is on in the method's form with the user's coefficient (when it is a usable one)."""
    config = compose(overrides)
    estimator = validation.estimator_of(config)
    fixes = validation.ConfigViolationError(estimator, validation.violations(config)).fixes
    repaired = compose(overrides + fixes)
    assert validation.violations(repaired) == []
    try:
        before = _kl(config, estimator)
    except Exception:  # noqa: BLE001 (a config whose KL keys do not resolve had no KL to keep)
        before = None
    after = _kl(repaired, estimator)
    if before is not None:
        method_form = "reward" if estimator == catalog.REINFORCE_PLUS_PLUS.name else "loss"
        assert after is not None and after[0] == method_form, (before, after)
        if _usable(before[1]):
            assert after[1] == before[1]


def _key(override):
    return override.split("=", 1)[0].lstrip("+~")


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in CASES if c[2]], ids=[c[0] for c in CASES if c[2]])
def test_every_fix_works_pasted_as_shown(overrides, expected):
    """Each violation's fix, alone: appended to the command, and in place of the offending override."""
    for violation in validation.violations(compose(overrides)):
        appended = overrides + list(violation.fixes)
        replaced = [o for o in overrides if _key(o) != violation.key] + list(violation.fixes)
        for attempt in (appended, replaced):
            assert violation.key not in {v.key for v in validation.violations(compose(attempt))}


@pytest.mark.slow
def test_fast_composition_is_hydras():
    """``composed.compose`` (the cases' composition) equals Hydra's full composition, for every case
    (compared as YAML text: a case's ``nan`` is not equal to itself as a float)."""
    for _, overrides, _ in CASES:
        assert OmegaConf.to_yaml(compose(overrides)) == OmegaConf.to_yaml(compose_verl_config(overrides)), overrides


CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"


# One refused case per rule (6.2.1 ... 6.2.12), composed in full, as main_ppo composes it.
RULE_CASES = {"6.2.1": "base-n1", "6.2.2": "base-token-mean", "6.2.3": "base-vanilla-dual-clip",
              "6.2.4": "base-actor-ulysses", "6.2.5": "base-colocate-async", "6.2.6": "rfpp-kl-as-loss",
              "6.2.7": "base-kl-in-reward", "6.2.8": "base-rejection-sampling", "6.2.9": "base-clip-not-a-number",
              "6.2.10": "rfpp-gamma-above-one", "6.2.11": "rfpp-kl-coef-negative", "6.2.12": "base-clip-low-one"}


def test_every_rule_has_a_case_composed_in_full():
    assert list(RULE_CASES) == [rule.id for rule in validation.RULES]
    assert set(RULE_CASES.values()) <= {case[0] for case in CASES}


@pytest.mark.parametrize("rule_id,case", RULE_CASES.items(), ids=[f"{r}-{c}" for r, c in RULE_CASES.items()])
def test_each_rules_verdict_on_verls_own_composition(rule_id, case):
    """The rule's verdict on a config composed by ``compose_verl_config`` in full (Hydra's
    ``compose`` of verl's packaged ppo_trainer, as main_ppo does; the fixture
    ``cached_composition`` of tests/conftest.py is not asked for here), the case's keys reported
    under that rule alone, the same verdict as on ``composed.compose``'s config."""
    overrides, expected = next(c[1:] for c in CASES if c[0] == case)
    config = compose_verl_config(overrides)
    found = validation.violations(config)
    assert {violation.rule for violation in found} == {rule_id}
    assert {violation.key for violation in found} == expected
    with pytest.raises(validation.ConfigViolationError, match=rf"\[{re.escape(rule_id)}\] "):
        validation.enforce(config)
    assert found == validation.violations(compose(overrides))


def _doc_table(header):
    """The rows of docs/contract.md's table that starts with ``header``, as lists of cells."""
    text = CONTRACT.read_text()
    lines = text[text.index(header):].split("\n\n", 1)[0].splitlines()[2:]
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in lines]


def _families(families):
    return "all" if set(families) == set(catalog.FAMILIES) else ", ".join(f.name for f in catalog.FAMILIES
                                                                          if f in families)


def test_a_rule_reads_only_its_own_keys():
    """A find function reads its rule's ``Key`` records through the rule; another rule's key is refused."""
    config = OmegaConf.create({"algorithm": {"gamma": 0.5}})
    gamma = validation.rule("6.2.10").keys[0]
    assert validation.rule("6.2.10").value(config, gamma) == 0.5
    with pytest.raises(ValueError, match=r"rule 6\.2\.1 reads algorithm\.gamma, which is not one of its keys"):
        validation.rule("6.2.1").value(config, gamma)


def test_the_contracts_rule_table_is_the_rule_table():
    """6.2's table: id -> (families, keys), as ``RULES`` declares them."""
    rows = {rule_id: (families, tuple(re.findall(r"`([^`]+)`", keys)))
            for rule_id, _, families, keys in _doc_table("| id | rule | families | keys |")}
    assert rows == {rule.id: (_families(rule.families), tuple(key.name for key in rule.keys))
                    for rule in validation.RULES}


def _value(value):
    return "-" if value is None else f"`{value}`"


def key_rows():
    """One row per key of the rules and the warnings: the rules that read it, its type, whether null
    is legal, the value verl uses when absent, the value a fix sets, the families that require it."""
    readers, required, keys = {}, {}, {}
    for rule_id, rule_keys, rule_families in [*((r.id, r.keys, r.families) for r in validation.RULES),
                                              ("6.4", validation.WARNING_KEYS, ())]:
        for key in rule_keys:
            keys.setdefault(key.name, key)
            readers.setdefault(key.name, []).append(rule_id)
            if key.required:
                required.setdefault(key.name, set()).update(key.families or rule_families)
    return [[f"`{name}`", ", ".join(readers[name]), validation.TYPE_NAMES[key.kind], "yes" if key.optional else "no",
             _value(key.default), _value(key.fallback), _families(required[name]) if name in required else "-"]
            for name, key in keys.items()]


def test_the_contracts_key_table_is_the_rules_keys():
    """6.2.9's table of keys is what the rules' ``Key`` records declare, one row per key."""
    assert _doc_table("| key | rules | type | null | absent means | fix sets | required for |") == key_rows()


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in CASES if c[2]], ids=[c[0] for c in CASES if c[2]])
def test_every_violation_names_a_rule_that_reads_its_key(overrides, expected):
    config = compose(overrides)
    estimator = validation.estimator_of(config)
    for violation in validation.violations(config):
        rule = validation.rule(violation.rule)
        assert catalog.estimator(estimator).family in rule.families
        if rule.id == "6.2.4":
            assert validation.SEQUENCE_SPLITTING_KEY.match(violation.key.rsplit(".", 1)[-1])
        elif rule.id == validation.COMPLETENESS:
            assert violation.key in validation.typed_keys()
        else:
            assert violation.key in {key.name for key in rule.keys}


def test_keys_fixed_with_double_plus_are_exactly_those_verl_lacks():
    base = compose([])
    missing = object()
    absent = {name for name, key in validation.typed_keys().items()
              if key.kind is not dict and OmegaConf.select(base, name, default=missing) is missing}
    assert absent == set(validation.ADDED_KEYS)


ENGINES = ("dp", "megatron", "torchtitan", "veomni")


@pytest.mark.parametrize("engine", ENGINES)
def test_required_keys_are_in_every_engines_packaged_config(engine):
    """A removed key is refused only if verl's config has it: no recipe is refused for a key it lacks."""
    config = compose([f"model_engine={engine}"])
    missing = object()
    for estimator in catalog.ESTIMATORS:
        keys = [key.name for key in validation.required_keys(estimator)]
        assert [key for key in keys if OmegaConf.select(config, key, default=missing) is missing] == [], estimator


# Any name that could mean splitting a sequence across ranks (wider than the rule's pattern), and
# the names among them that do not: Megatron's / Automodel's tensor-parallel sequence_parallel
# (activations sharded within a tensor-parallel group; every rank computes whole sequences'
# log-probabilities), a length budget of dynamic context parallelism (refused on its own switch),
# and verl 0.9.0's MindSpeed choice of context-parallel algorithm (a name, not a size: the split
# itself is its context_parallel_size, which the rule reads).
SPLIT_WORDS = re.compile(r"ulysses|context_parallel|(^|_)(cp|sp)(_|$)|sequence_parallel|seq_parallel|parallel_seq")
NOT_SPLITTING = {"sequence_parallel", "max_seqlen_per_dp_cp_rank", "context_parallel_algo"}


def _tree_keys(node, prefix):
    for name in node:
        key = f"{prefix}.{name}"
        yield key
        if (not OmegaConf.is_interpolation(node, name) and not OmegaConf.is_missing(node, name)
                and isinstance(node[name], DictConfig)):
            yield from _tree_keys(node[name], key)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_sequence_splitting_key_of_every_engine_is_ruled(engine):
    """Guards the derivation of 6.2.4: every key of the composed config (this engine's defaults,
    actor and reference) whose name speaks of splitting a sequence is one the rule reads."""
    config = compose([f"model_engine={engine}"])
    ruled = set(validation.sequence_splitting_keys(config))
    candidates = {
        key for root in validation.ENGINE_ROLES for key in _tree_keys(OmegaConf.select(config, root), root)
        if SPLIT_WORDS.search(key.rsplit(".", 1)[-1]) and key.rsplit(".", 1)[-1] not in NOT_SPLITTING
    }
    assert candidates and candidates == ruled


def _verl_engine_names():
    """Every ``engine_config.<name>`` verl's engines read and every field of its engine configs."""
    import verl

    root = Path(verl.__file__).parent
    names = set()
    for source in (root / "workers" / "engine").rglob("*.py"):
        names |= set(re.findall(r"engine_config\.(\w+)", source.read_text()))
    names |= set(re.findall(r"^    (\w+): [^=\n]+= ", (root / "workers" / "config" / "engine.py").read_text(), re.M))
    for yaml in (root / "trainer" / "config" / "engine").glob("*.yaml"):
        names |= set(re.findall(r"^\s*(\w+):", yaml.read_text(), re.M))
    return names


def test_every_sequence_splitting_name_verl_reads_matches_the_rule():
    """The rule's name pattern against verl's own engine sources and configs, so a new engine key
    that splits sequences (``<x>_context_parallel_size``, ``cp_size``, ...) fails here."""
    names = {name for name in _verl_engine_names() if SPLIT_WORDS.search(name)}
    assert {"ulysses_sequence_parallel_size", "ulysses_parallel_size", "context_parallel_size",
            "dynamic_context_parallel", "cp_size"} <= names
    uncovered = {name for name in names - NOT_SPLITTING if not validation.SEQUENCE_SPLITTING_KEY.match(name)}
    assert uncovered == set()
    assert not any(validation.SEQUENCE_SPLITTING_KEY.match(name) for name in NOT_SPLITTING)


def test_table_is_large_enough():
    assert len(CASES) >= 25 and len({case[0] for case in CASES}) == len(CASES)
    assert sum(1 for case in CASES if not case[2]) >= 7


@pytest.mark.parametrize(
    "overrides,phrase",
    [
        (RFPP + ["algorithm.gamma=0.9"], "discounted by position"),
        (BASE + [f"{AR}.actor.use_kl_loss=False"], "KL regularization is off entirely"),
        (RFPP + ["algorithm.kl_ctrl.kl_coef=0"], "no effect"),
        (BASE + [f"{AR}.actor.kl_loss_coef=0"], "no effect"),
    ],
)
def test_unusual_settings_pass_with_a_warning(overrides, phrase, caplog):
    with caplog.at_level(logging.WARNING, logger="verl_rfpp"):
        validation.enforce(compose(overrides))
    assert phrase in caplog.text


@pytest.mark.slow
def test_main_ppo_refuses_before_ray_starts(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=reinforce_plus_plus_baseline",
         f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "verl_rfpp refuses this config" in output
    assert "Fixed by: actor_rollout_ref.rollout.n=8" in output and "[6.2.1]" in output
    assert "ray init kwargs" not in output and "Started a local Ray instance" not in output


@pytest.mark.slow
def test_main_ppo_refuses_a_wrong_typed_value_without_a_traceback_from_a_rule(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *BASE, f"{AR}.rollout.n=abc", f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "RAY_ADDRESS": ""},
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{AR}.rollout.n = 'abc': required an integer, got str" in output
    assert "TypeError" not in output and "Started a local Ray instance" not in output


# --- every rule key, every wrong type (issue 39): a refusal naming the key, never a traceback ------
# One concrete key stands for 6.2.4's pattern; keys verl's config lacks are added with ``++``.
_SPLITTING = f"{AR}.actor.fsdp_config.ulysses_sequence_parallel_size"
_WRONG = {"a string": "abc", "a list": [1, 2], "a dict": {"a": 1}, "null": None, "a bool": True, "a number": 1}
_RIGHT = {int: {"a number"}, float: {"a number"}, bool: {"a bool"}, str: {"a string"}, dict: {"a dict"}}


def _recipe_config(estimator):
    """The recipe's composed config, a fresh copy (``compose`` caches by overrides)."""
    return pickle.loads(_recipe_bytes(estimator))


@functools.cache
def _recipe_bytes(estimator):
    return pickle.dumps(compose(list(validation.RECIPES[estimator])))


def test_every_rule_key_refuses_every_wrong_type_naming_the_key():
    """Every key of every rule and warning, given each value of ``_WRONG`` that is wrong for its
    type (null only where it is not legal), in the recipe of an estimator the rule applies to: a
    violation naming the key, never a traceback, never OK. Exhaustive (about 100 cases)."""
    checked = 0
    for rule in (*validation.RULES, None):
        keys = rule.keys if rule else validation.WARNING_KEYS
        family = rule.families[0] if rule else catalog.FAMILIES[0]
        estimator = next(record.name for record in catalog.ESTIMATORS if record.family is family)
        for key in keys:
            name = _SPLITTING if "<" in key.name else key.name
            for wrong, value in _WRONG.items():
                if wrong in _RIGHT[key.kind] or (wrong == "null" and key.optional):
                    continue
                config = _recipe_config(estimator)
                OmegaConf.set_readonly(config, False)
                OmegaConf.update(config, name, value, force_add=True)
                found = validation.violations(config)
                assert name in {violation.key for violation in found}, (estimator, name, wrong, found)
                checked += 1
    assert checked >= 90

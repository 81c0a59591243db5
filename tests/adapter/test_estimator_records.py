"""An estimator is one record (``verl_rfpp.catalog``): a third one, declared here by one record only,
is registered in verl's real registry, guarded, validated by its family's rules, has a recipe and
a CLI choice; every registered entry of ours survives a pickle round trip (Ray ships them).

A real third estimator follows docs/layout.md's "Add an estimator" checklist
(tests/project/test_fourth_estimator.py walks it); the registry entry, guard, patch, rules, recipe,
session hook, doctor's kernel check, CLI choices and experiments' method lists follow from the record.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from support.composed import fresh as compose

from verl_rfpp import catalog, estimators, validation
from verl_rfpp.adapter import registries, table
from verl_rfpp.adapter.patching import is_ours
from verl_rfpp.cli import main as cli

THIRD = catalog.Estimator(name="reinforce_plus_plus_baseline_floored", label="REINFORCE++-baseline (floored)",
                          short="floored", family=catalog.GROUP,
                          examples=catalog.REINFORCE_PLUS_PLUS_BASELINE.examples)


@catalog.implements(THIRD)
def floored_baseline(token_level_rewards, response_mask, index, *, session=None):
    """REINFORCE++-baseline with another variance floor (this test's third estimator): the
    baseline's result with its advantages halved, so a test can tell which function ran."""
    result = estimators.reinforce_plus_plus_baseline(token_level_rewards, response_mask, index, session=session)
    return result._replace(advantages=result.advantages / 2)


@pytest.fixture
def third(monkeypatch):
    """THIRD declared (appended to the catalog) and its registry patch applied, for one test."""
    from verl.trainer.ppo import core_algos

    monkeypatch.setattr(catalog, "ESTIMATORS", [*catalog.ESTIMATORS, THIRD])
    (patch,) = [p for p in table.estimator_patches() if p.slot.key == THIRD.name]
    patch.install()
    registries.checked_in_process.discard(THIRD.name)
    try:
        yield core_algos
    finally:
        patch.undo()
        registries.checked_in_process.discard(THIRD.name)


def test_a_third_record_is_registered_guarded_and_computes_its_function(third):
    entry = third.get_adv_estimator_fn(THIRD.name)
    assert entry == registries.GuardedEstimator(THIRD) and is_ours(entry) and registries.registered_ours(THIRD.name)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 3.0], [2.0, 0.0], [0.0, 0.0]])
    mask = torch.ones_like(rewards)
    index = ["a", "a", "b", "b"]
    advantages, _ = entry(token_level_rewards=rewards, response_mask=mask, config=None, index=index)
    expected = estimators.reinforce_plus_plus_baseline(rewards, mask, index).advantages / 2
    assert torch.equal(advantages, expected)
    assert THIRD.name in registries.checked_in_process  # the guard ran once for this name


def test_a_third_record_is_validated_by_its_familys_rules_and_has_a_recipe(third):
    assert validation.RECIPES[THIRD.name][0] == f"algorithm.adv_estimator={THIRD.name}"
    assert validation.violations(compose(list(validation.RECIPES[THIRD.name]))) == []
    refused = validation.violations(compose([*validation.RECIPES[THIRD.name], "actor_rollout_ref.rollout.n=1"]))
    assert [(v.rule, v.key) for v in refused] == [("6.2.1", "actor_rollout_ref.rollout.n")]  # the group family's n > 1
    assert validation.near_miss("reinforce-plus-plus-baseline-floored") == THIRD.name
    parser = cli.build_parser()
    assert parser.parse_args(["recipe", THIRD.name]).estimator == THIRD.name


@pytest.mark.parametrize("name", catalog.names())
def test_every_registered_entry_survives_a_pickle_round_trip(name):
    entry = registries.entries()[name]
    copy = pickle.loads(pickle.dumps(entry))
    assert copy == entry and is_ours(copy)


def test_the_third_entry_and_the_policy_loss_survive_a_pickle_round_trip(third):
    from verl_rfpp.losses import rfpp_policy_loss

    entry = third.get_adv_estimator_fn(THIRD.name)
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert pickle.loads(pickle.dumps(third.get_policy_loss_fn(catalog.POLICY_LOSS_MODE))) is rfpp_policy_loss


def test_a_record_without_a_function_says_how_to_bind_one():
    unbound = catalog.Estimator(name="unbound_estimator", label="unbound", short="unbound", family=catalog.RETURNS,
                                examples=())
    with pytest.raises(LookupError, match=r"@verl_rfpp\.catalog\.implements"):
        unbound.compute()


def test_a_record_has_one_function(monkeypatch):
    monkeypatch.setattr(catalog, "_FUNCTIONS", dict(catalog._FUNCTIONS))
    assert catalog.implements(THIRD)(floored_baseline) is floored_baseline  # the same definition again: kept
    with pytest.raises(ValueError, match="already implemented by .*floored_baseline"):
        catalog.implements(THIRD)(estimators.reinforce_plus_plus_baseline)
    assert catalog.REINFORCE_PLUS_PLUS.compute() is estimators.reinforce_plus_plus
    assert catalog.REINFORCE_PLUS_PLUS_BASELINE.compute() is estimators.reinforce_plus_plus_baseline


def test_doctor_runs_every_records_examples_and_fails_on_a_wrong_result(third, monkeypatch):
    """THIRD carries the baseline's examples but halves the advantages: doctor's kernel check names
    it, runs it with both masks, and fails on it (the shipped records' examples still pass)."""
    from verl_rfpp.cli import doctor
    from verl_rfpp.core import passes

    monkeypatch.setenv(passes.CPU_KERNELS_VARIABLE, "1")
    labels = [label for label, *_ in doctor.kernel_cases()]
    assert [label for label in labels if label.startswith(THIRD.name + ",")] == [
        f"{THIRD.name}, int64 mask", f"{THIRD.name}, bool mask"]
    assert {label.split(",")[0] for label in labels} == set(catalog.names())
    label, ok = doctor.cpu_kernels_checks()[0]
    assert not ok and label.startswith("CPU kernels give wrong values: ")
    assert [wrong.split(":")[0] for wrong in label.split(": ", 1)[1].split("; ")] == [
        f"{THIRD.name}, int64 mask", f"{THIRD.name}, bool mask"]

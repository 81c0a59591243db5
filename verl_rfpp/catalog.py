"""The estimators verl-rfpp gives verl, one record each (docs/contract.md sections 2, 3, 6.1, 8.1).

A record is everything the package knows of an estimator: the name ``algorithm.adv_estimator``
selects it by, the label reports print, its family and its pure function. Everything else derives
from the records: verl's registry entries and their guard (``verl_rfpp.adapter.registries``), the
rules that apply (``verl_rfpp.validation``, by family), the recipe, the session hook, the CLI's
choices, the experiments' labels and the docs' tables (held by tests). Imports neither torch nor
verl: ``check`` and ``recipe`` read the records before anything loads them; the pure function is
named here and imported on first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

POLICY_LOSS_MODE = "rfpp"  # verl's policy-loss registry name of the plain clipped surrogate (section 5.1)
RESPONSE_MEAN = "seq-mean-token-mean"  # verl's loss_agg_mode of the response mean (section 5)

_LOSS = (f"actor_rollout_ref.actor.loss_agg_mode={RESPONSE_MEAN}",
         f"actor_rollout_ref.actor.policy_loss.loss_mode={POLICY_LOSS_MODE}")


@dataclass(frozen=True, kw_only=True)
class Family:
    """What an estimator's baseline is, and so how verl calls it and which rules of section 6.2
    apply: ``groups`` (the baseline is a mean over the prompt's group: uids, ``rollout.n > 1``,
    agent sessions counted once, KL as the k2 loss) or not (KL-to-go returns, KL as k1 shaping in
    the reward, ``gamma``). ``settings``: the recipe's overrides every estimator of the family uses."""

    name: str
    groups: bool
    settings: tuple[str, ...]


RETURNS = Family(name="returns", groups=False, settings=(
    "algorithm.gamma=1.0",
    "algorithm.use_kl_in_reward=True",
    "algorithm.kl_penalty=kl",
    "algorithm.kl_ctrl.type=fixed",
    "algorithm.kl_ctrl.kl_coef=0.01",
    "actor_rollout_ref.actor.use_kl_loss=False",
    *_LOSS,
))
GROUP = Family(name="group", groups=True, settings=(
    "algorithm.gamma=1.0",
    "algorithm.use_kl_in_reward=False",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_type=k2",
    "actor_rollout_ref.actor.kl_loss_coef=0.01",
    *_LOSS,
))
FAMILIES = (RETURNS, GROUP)


@dataclass(frozen=True, kw_only=True)
class Estimator:
    """One estimator: ``name`` selects it (``algorithm.adv_estimator``), ``label`` is how reports
    print it, ``short`` how experiments key its runs (``ours_<short>``). ``function``
    (``"module:attribute"``) is its pure function, returning an ``EstimatorResult``; its family
    decides the call: ``(token_level_rewards, response_mask, config)`` for the returns family,
    ``(token_level_rewards, response_mask, index, session=...)`` for the group family."""

    name: str
    label: str
    short: str
    family: Family
    function: str

    @property
    def recipe(self) -> tuple[str, ...]:
        """The validated recipe (section 6.1): the estimator's name, then its family's settings."""
        return (f"algorithm.adv_estimator={self.name}", *self.family.settings)

    def recipe_value(self, key: str, fallback: Any = None) -> Any:
        """The value the recipe sets for ``key`` (as written there), else ``fallback``."""
        return dict(line.split("=", 1) for line in self.recipe).get(key, fallback)

    def compute(self) -> Callable[..., Any]:
        """The pure function (imported on first use)."""
        module, attribute = self.function.split(":")
        return getattr(importlib.import_module(module), attribute)


REINFORCE_PLUS_PLUS = Estimator(name="reinforce_plus_plus", label="REINFORCE++", short="rfpp", family=RETURNS,
                                function="verl_rfpp.estimators:reinforce_plus_plus")
REINFORCE_PLUS_PLUS_BASELINE = Estimator(
    name="reinforce_plus_plus_baseline", label="REINFORCE++-baseline", short="baseline", family=GROUP,
    function="verl_rfpp.estimators:reinforce_plus_plus_baseline")

ESTIMATORS: list[Estimator] = [REINFORCE_PLUS_PLUS, REINFORCE_PLUS_PLUS_BASELINE]
"""Every estimator, in the order the docs list them; a test may append one (and remove it)."""


ESTIMATOR_NAMES = tuple(record.name for record in ESTIMATORS)
"""The names of the estimators verl-rfpp ships (public API, docs/contract.md section 9)."""


def names() -> tuple[str, ...]:
    """The names of ``ESTIMATORS`` now (a test's added record included)."""
    return tuple(estimator.name for estimator in ESTIMATORS)


def estimator(name: str) -> Estimator:
    """The record named ``name``; ``KeyError`` for a name that is not ours."""
    for record in ESTIMATORS:
        if record.name == name:
            return record
    raise KeyError(name)


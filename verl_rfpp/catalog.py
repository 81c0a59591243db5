"""The estimators verl-rfpp gives verl, one record each (docs/contract.md sections 2, 3, 6.1, 8.1).

A record is everything the package knows of an estimator: the name ``algorithm.adv_estimator``
selects it by, the label reports print, its family, the exact examples doctor runs it on, and its
pure function. Everything else derives from the records: verl's registry entries and their guard
(``verl_rfpp.adapter.registries``), the patch names, the rules that apply (``verl_rfpp.validation``,
by family), the recipe, the session hook, doctor's kernel check, the CLI's choices, the
experiments' method lists and labels and the docs' tables (held by tests). Imports neither torch
nor verl: ``check`` and ``recipe`` read the records before anything loads them. The pure function
binds itself to its record where it is defined, by the decorator ``@implements(RECORD)`` (as
verl's ``register_adv_est`` does), so a search for the record's name, or go-to-definition from
the decorator, lands on the function; ``Estimator.compute()`` returns it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

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
class Example:
    """An input whose outputs are exact (small integers, dyadic fractions), on which doctor runs an
    estimator's function through its CPU kernels, once with a bool and once with an int64 mask.
    Plain lists (no torch here): ``rewards`` and ``mask`` ``(bs, T)``, ``index`` the uids of the
    group family (``None`` for the returns family), ``gamma`` the returns family's discount, and
    the expected ``returns`` (raw advantages) and ``advantages`` (normalized)."""

    rewards: tuple[tuple[float, ...], ...]
    mask: tuple[tuple[int, ...], ...]
    returns: tuple[tuple[float, ...], ...]
    advantages: tuple[tuple[float, ...], ...]
    index: Optional[tuple[str, ...]] = None
    gamma: float = 1.0


@dataclass(frozen=True, kw_only=True)
class Estimator:
    """One estimator: ``name`` selects it (``algorithm.adv_estimator``), ``label`` is how reports
    print it, ``short`` how experiments key its runs (``ours_<short>``), ``examples`` what doctor
    runs it on. Its pure function, returning an ``EstimatorResult``, is bound by
    ``@implements(record)`` beside its definition and returned by ``compute()``; the family decides
    the call: ``(token_level_rewards, response_mask, config)`` for the returns family,
    ``(token_level_rewards, response_mask, index, session=...)`` for the group family. A record
    is plain data: it pickles by value, and the function is looked up by its name."""

    name: str
    label: str
    short: str
    family: Family
    examples: tuple[Example, ...]

    @property
    def recipe(self) -> tuple[str, ...]:
        """The validated recipe (section 6.1): the estimator's name, then its family's settings."""
        return (f"algorithm.adv_estimator={self.name}", *self.family.settings)

    def recipe_value(self, key: str, fallback: Any = None) -> Any:
        """The value the recipe sets for ``key`` (as written there), else ``fallback``."""
        return dict(line.split("=", 1) for line in self.recipe).get(key, fallback)

    def compute(self) -> Callable[..., Any]:
        """The pure function bound to this record by ``@implements`` (``verl_rfpp.estimators``, where
        the shipped ones are defined, is imported on first use); ``LookupError`` if none is."""
        if self.name not in _FUNCTIONS:
            importlib.import_module(SHIPPED_FUNCTIONS)
        try:
            return _FUNCTIONS[self.name]
        except KeyError:
            raise LookupError(f"verl_rfpp: no function implements the estimator record {self.name!r}; "
                              "decorate it with @verl_rfpp.catalog.implements(RECORD) (docs/layout.md, "
                              "'Add an estimator')") from None


SHIPPED_FUNCTIONS = "verl_rfpp.estimators"  # the module whose import binds the shipped records' functions
_FUNCTIONS: dict[str, Callable[..., Any]] = {}
F = TypeVar("F", bound=Callable[..., Any])


def implements(record: Estimator) -> Callable[[F], F]:
    """Decorator: ``function`` is ``record``'s pure function (``record.compute()`` returns it).
    A record has one function: binding another (not the same definition reloaded) is refused."""

    def bind(function: F) -> F:
        bound = _FUNCTIONS.get(record.name)
        if bound is not None and (bound.__module__, bound.__qualname__) != (function.__module__,
                                                                           function.__qualname__):
            raise ValueError(f"verl_rfpp: the estimator record {record.name!r} is already implemented by "
                             f"{bound.__module__}.{bound.__qualname__}")
        _FUNCTIONS[record.name] = function
        return function

    return bind


REINFORCE_PLUS_PLUS = Estimator(name="reinforce_plus_plus", label="REINFORCE++", short="rfpp", family=RETURNS,
                                examples=(
    Example(rewards=((1.0, 2.0, 9.0),), mask=((1, 1, 0),), returns=((3.0, 2.0, 0.0),),
            advantages=((1.0, -1.0, 0.0),)),
    Example(rewards=((1.0, 4.0, 9.0),), mask=((1, 1, 0),), gamma=0.5, returns=((3.0, 4.0, 0.0),),
            advantages=((-1.0, 1.0, 0.0),)),
))
REINFORCE_PLUS_PLUS_BASELINE = Estimator(
    name="reinforce_plus_plus_baseline", label="REINFORCE++-baseline", short="baseline", family=GROUP, examples=(
        Example(rewards=((0.0, 1.0, 9.0), (0.0, 3.0, 9.0)), mask=((1, 1, 0), (1, 1, 0)), index=("a", "a"),
                returns=((-1.0, -1.0, 0.0), (1.0, 1.0, 0.0)), advantages=((-1.0, -1.0, 0.0), (1.0, 1.0, 0.0))),
    ))

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


def in_report_order() -> tuple[Estimator, ...]:
    """``ESTIMATORS``, the group family first (the order the experiments' reports list them)."""
    return tuple(sorted(ESTIMATORS, key=lambda record: not record.family.groups))


def of_family(family: Family) -> tuple[Estimator, ...]:
    """The estimators of ``family``."""
    return tuple(record for record in ESTIMATORS if record.family is family)

"""The up-front config contract (docs/contract.md section 6): a verl config -> a list of violations.

Pure functions over OmegaConf: nothing here imports verl. Only configs whose
``algorithm.adv_estimator`` is one of ours are looked at; every other verl run is untouched.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl_rfpp.errors import RfppError

logger = logging.getLogger("verl_rfpp")

REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
BASELINE = "reinforce_plus_plus_baseline"
ESTIMATOR_NAMES = (REINFORCE_PLUS_PLUS, BASELINE)

POLICY_LOSS_MODE = "rfpp"
RESPONSE_MEAN = "seq-mean-token-mean"
K1_NAMES = ("kl", "k1")
K2_NAMES = ("k2", "mse")

# The engine configs the actor and the reference model are built from (``actor.engine`` is
# ``fsdp_config``, ``megatron``, ``torchtitan`` or ``veomni``, chosen by ``model_engine``).
ENGINE_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref")

# The name of every config key with which one of verl 0.9.1's engines splits a sequence across
# ranks (docs/contract.md section 6.2.4), read off verl/workers/engine/** and the engine configs:
# FSDP's ``ulysses_sequence_parallel_size`` (and the deprecated actor-level one), fsdp_turbo's
# ``turbo_config.distributed.ulysses_parallel_size``, VeOmni's ``ulysses_parallel_size``,
# Megatron's and TorchTitan's ``context_parallel_size``, Megatron's ``dynamic_context_parallel``
# (context parallelism chosen per batch, on with size 1), Automodel's ``cp_size``. Matched by
# name anywhere under ``ENGINE_ROLES``, so a key at a new path is caught too. Megatron's and
# Automodel's boolean ``sequence_parallel`` is tensor-parallel activation sharding (every rank
# still sees whole sequences' log-probabilities) and is not one of them.
SEQUENCE_SPLITTING_KEY = re.compile(
    r"^(\w*ulysses\w*_size|\w*context_parallel_size|(\w+_)?cp_size|(\w+_)?sp_size|dynamic_context_parallel)$"
)


@dataclass(frozen=True)
class Violation:
    """One broken rule: the key, what was found, what is required, why, and the fixing override."""

    key: str
    found: Any
    required: str
    why: str
    fix: str

    def __str__(self) -> str:
        return (
            f"  - {self.key} = {self.found!r}: required {self.required}.\n"
            f"    Why: {self.why}\n"
            f"    Fix: {self.fix}"
        )


class UnreadableConfigError(RfppError):
    """A key the rules read cannot be read: an interpolation that does not resolve, or ``???``."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        self.fix = f"give {key} a value that resolves (set what its interpolation reads, or override {key}=<value>)"
        super().__init__(
            f"verl_rfpp cannot read {key}, which docs/contract.md section 6 checks: {reason}. Fix: {self.fix}."
        )


class MisspeltEstimatorError(RfppError):
    """``algorithm.adv_estimator`` is not an estimator verl knows but one letter or the case off ours."""

    def __init__(self, name: Any, meant: str):
        self.name = name
        self.meant = meant
        super().__init__(
            f"algorithm.adv_estimator={name} is not an estimator verl knows; did you mean {meant}?\n"
            f"Fix: algorithm.adv_estimator={meant}"
        )


def misspelt_estimator(name: Any) -> Optional[MisspeltEstimatorError]:
    """The refusal for an ``adv_estimator`` that is one of ours misspelt, else ``None``; the
    caller checks that verl's registry does not hold ``name`` (``verl-rfpp check`` and the
    plugin's validate_config print this one text)."""
    meant = near_miss(name)
    return None if meant is None else MisspeltEstimatorError(name, meant)


class ConfigViolationError(RfppError):
    """A config that would silently change REINFORCE++; the message lists every violation."""

    def __init__(self, estimator: str, violations: list[Violation]):
        self.estimator = estimator
        self.violations = list(violations)
        lines = [
            f"verl_rfpp refuses this config for algorithm.adv_estimator={estimator}: "
            f"{len(self.violations)} setting(s) would silently change the method "
            "(docs/contract.md section 6).",
            *(str(violation) for violation in self.violations),
            "Print the whole validated recipe with: verl-rfpp recipe " + estimator,
        ]
        super().__init__("\n".join(lines))


_MISSING = object()


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()
"""What a violation reports as found for a key that is not in the config at all."""


def _reason(error: Exception) -> str:
    return " ".join(str(error).split("\n", 1)[0].split()) or type(error).__name__


def _get(config: DictConfig, key: str, default: Any = None) -> Any:
    """The resolved value at ``key`` (``default`` if absent); ``UnreadableConfigError`` when it
    does not resolve or is ``???``."""
    try:
        return OmegaConf.select(config, key, default=default, throw_on_missing=True)
    except OmegaConfBaseException as error:
        raise UnreadableConfigError(key, _reason(error)) from error


# Typed rule keys that verl 0.9.1's packaged ppo_trainer config does not have: only a
# ``+key=...`` override adds them, so their fix is ``++key=...`` (add or override), which works
# both appended to the offending command and in place of the offending override. Fixes of
# sequence-splitting keys (present or not, depending on ``model_engine``) and of removed keys
# are ``++`` for the same reason.
ADDED_KEYS = frozenset({"trainer.v1.sync.parameter_sync_step"})


def _override(key: str, value: Any, config: DictConfig) -> str:
    """The command-line override that sets ``key`` to ``value``, pasteable as shown: ``++`` for a
    key verl's config lacks, ``+`` for any other key absent from ``config``."""
    if key in ADDED_KEYS:
        return f"++{key}={value}"
    present = OmegaConf.select(config, key, default=_MISSING) is not _MISSING
    return f"{'' if present else '+'}{key}={value}"


# The type of every value a rule reads (``None`` is allowed where verl allows it: ``optional``),
# and the value a fix sets when the recipe has none. A wrong-typed value is a violation of its own,
# before any rule compares it (``rollout.n=abc`` must not reach ``n > 1``).
_TYPED_KEYS: dict[str, tuple[type, bool, Any]] = {
    "actor_rollout_ref.rollout.n": (int, False, 8),
    "actor_rollout_ref.actor.use_kl_loss": (bool, False, False),
    "actor_rollout_ref.actor.kl_loss_coef": (float, False, 0.01),
    "algorithm.use_kl_in_reward": (bool, False, False),
    "algorithm.kl_ctrl.kl_coef": (float, False, 0.01),
    "algorithm.gamma": (float, True, 1.0),
    "algorithm.rollout_correction.bypass_mode": (bool, False, False),
    "algorithm.filter_groups.enable": (bool, False, False),
    "trainer.use_v1": (bool, False, True),
    "trainer.v1.sync.parameter_sync_step": (int, False, 1),
}
_TYPE_NAMES = {int: "an integer", bool: "a boolean (True or False)", float: "a number"}


def _has_type(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _type_violations(config: DictConfig, estimator: str) -> list[Violation]:
    """Every value a rule reads that has the wrong type (Hydra keeps ``n=abc`` as a string)."""
    recipe = dict(line.split("=", 1) for line in RECIPES[estimator])
    found = []
    for key, (kind, optional, fix_value) in _TYPED_KEYS.items():
        value = _get(config, key)
        if value is None or _has_type(value, kind):
            continue
        found.append(Violation(
            key, value, f"{_TYPE_NAMES[kind]}{' or null' if optional else ''}, got {type(value).__name__}",
            "verl-rfpp's rules and verl's trainer read this value as "
            f"{_TYPE_NAMES[kind]} (docs/contract.md section 6).",
            _override(key, recipe.get(key, fix_value), config),
        ))
    return found


# The keys the rules read that verl's packaged config always has, with the value a fix sets when
# the recipe has none. verl reads them as attributes (a removed one fails mid-run or falls back
# to a dataclass default no rule saw), so an override that removes one (``~key``) is refused.
# Not here: keys verl reads with ``.get`` and treats as off when absent (``async_training``,
# ``algorithm.rollout_correction.*``, ``algorithm.filter_groups.*``, the v1 sync step).
_COMMON_REQUIRED = {
    "actor_rollout_ref.actor.loss_agg_mode": RESPONSE_MEAN,
    "actor_rollout_ref.actor.policy_loss.loss_mode": POLICY_LOSS_MODE,
    "actor_rollout_ref.actor.use_kl_loss": False,
    "algorithm.use_kl_in_reward": False,
    "algorithm.gamma": 1.0,
    "trainer.use_v1": True,
    "trainer.v1.trainer_mode": "sync",
}
REQUIRED_KEYS: dict[str, dict[str, Any]] = {
    REINFORCE_PLUS_PLUS: {
        **_COMMON_REQUIRED,
        "algorithm.kl_penalty": "kl",
        "algorithm.kl_ctrl.type": "fixed",
        "algorithm.kl_ctrl.kl_coef": 0.01,
    },
    BASELINE: {
        **_COMMON_REQUIRED,
        "actor_rollout_ref.rollout.n": 8,
        "actor_rollout_ref.actor.kl_loss_type": "k2",
        "actor_rollout_ref.actor.kl_loss_coef": 0.01,
    },
}


def _absent_violations(config: DictConfig, estimator: str) -> list[Violation]:
    """Every key of ``REQUIRED_KEYS`` an override removed (``~algorithm.kl_ctrl``)."""
    recipe = dict(line.split("=", 1) for line in RECIPES[estimator])
    return [
        Violation(
            key, ABSENT, "present",
            "verl-rfpp's rules and verl's trainer read this key; without it the rule cannot check "
            "the method and verl fails or falls back to a default (docs/contract.md section 6).",
            f"++{key}={recipe.get(key, fix_value)}",
        )
        for key, fix_value in REQUIRED_KEYS[estimator].items()
        if _get(config, key, _MISSING) is _MISSING
    ]


def sequence_splitting_keys(config: DictConfig) -> list[str]:
    """Every key under ``ENGINE_ROLES`` whose name matches ``SEQUENCE_SPLITTING_KEY``, including
    keys inside containers reached through an interpolation; other values are never resolved."""
    found: list[str] = []
    for root in ENGINE_ROLES:
        node = _get(config, root)
        if isinstance(node, DictConfig):
            found.extend(_matching_keys(config, node, root))
    return found


def _matching_keys(config: DictConfig, node: DictConfig, prefix: str) -> Iterator[str]:
    for name in node:
        key = f"{prefix}.{name}"
        if SEQUENCE_SPLITTING_KEY.match(str(name)):
            yield key
            continue
        if OmegaConf.is_missing(node, name):
            continue
        if OmegaConf.is_interpolation(node, name):
            try:  # a container behind an interpolation; a leaf that fails is no key of ours
                child = OmegaConf.select(config, key, throw_on_missing=True)
            except OmegaConfBaseException:
                continue
        else:
            child = node[name]
        if isinstance(child, DictConfig):
            yield from _matching_keys(config, child, key)


def _sequence_parallel_rule(config: DictConfig) -> list[Violation]:
    found = []
    for key in sequence_splitting_keys(config):
        value = _get(config, key)
        switch = key.rsplit(".", 1)[-1].startswith("dynamic_")
        accepted = value is None or (value is False if switch else _has_type(value, int) and value == 1)
        if not accepted:
            found.append(Violation(
                key, value, "False" if switch else "1",
                "context / sequence parallelism splits each response across ranks, which the "
                "estimator and the response-mean loss do not support (docs/contract.md section 6.2.4).",
                f"++{key}={'False' if switch else 1}",
            ))
    return found


def _gamma_rule(config: DictConfig) -> list[Violation]:
    found: list[Violation] = []
    _require(
        found, config, "algorithm.gamma", lambda gamma: gamma is None or 0.0 <= gamma <= 1.0, "within [0, 1]",
        "gamma discounts the returns; outside [0, 1] they grow with the distance to the end of the "
        "response or flip sign (docs/contract.md section 2).",
        1.0,
    )
    return found


def near_miss(name: Any) -> Optional[str]:
    """Our estimator ``name`` was probably meant to be (another case, or one letter off), else ``None``."""
    if not isinstance(name, str) or name in ESTIMATOR_NAMES:
        return None
    for ours in ESTIMATOR_NAMES:
        if name.lower() == ours or _one_edit_apart(name.lower(), ours):
            return ours
    return None


def _one_edit_apart(first: str, second: str) -> bool:
    """Whether one insertion, deletion or substitution turns ``first`` into ``second``."""
    if abs(len(first) - len(second)) > 1:
        return False
    if len(first) > len(second):
        first, second = second, first
    for index, (a, b) in enumerate(zip(first, second)):
        if a != b:
            tail = index + 1 if len(first) == len(second) else index
            return first[tail:] == second[index + 1:]
    return True


def estimator_name(config: DictConfig) -> Any:
    """The value of ``algorithm.adv_estimator`` (an enum's value); ``UnreadableConfigError`` when
    it does not resolve."""
    name = _get(config, "algorithm.adv_estimator")
    return getattr(name, "value", name)


def estimator_of(config: Any) -> Optional[str]:
    """Our estimator's name when ``algorithm.adv_estimator`` selects one, else ``None``: also for
    a config this module cannot read (not an OmegaConf ``DictConfig``, or an ``adv_estimator``
    that does not resolve), which is verl's to report (docs/contract.md section 6.3)."""
    if not isinstance(config, DictConfig):
        return None
    try:
        name = estimator_name(config)
    except UnreadableConfigError:
        return None
    return name if name in ESTIMATOR_NAMES else None


def _require(
    found: list[Violation],
    config: DictConfig,
    key: str,
    accepted: Callable[[Any], bool],
    required: str,
    why: str,
    fix_value: Any,
    default: Any = None,
) -> None:
    """Append a violation when the value at ``key`` (``default`` if absent) is not accepted."""
    value = _get(config, key, default)
    if not accepted(value):
        found.append(Violation(key, value, required, why, _override(key, fix_value, config)))


def _common_rules(config: DictConfig) -> list[Violation]:
    found: list[Violation] = []
    _require(
        found, config, "actor_rollout_ref.actor.loss_agg_mode", lambda mode: mode == RESPONSE_MEAN,
        f"'{RESPONSE_MEAN}' (response mean)",
        "token-level or summed reductions change the objective's denominator (docs/contract.md section 5).",
        RESPONSE_MEAN,
    )
    _require(
        found, config, "actor_rollout_ref.actor.policy_loss.loss_mode", lambda mode: mode == POLICY_LOSS_MODE,
        f"'{POLICY_LOSS_MODE}' (the plain clipped surrogate)",
        "verl's 'vanilla' adds dual-clip for negative advantages and other modes replace the "
        "clipped surrogate of docs/contract.md section 5.",
        POLICY_LOSS_MODE, default="vanilla",
    )
    found.extend(_sequence_parallel_rule(config))
    found.extend(_rollout_correction_rules(config))
    found.extend(_trainer_mode_rules(config))
    return found


def _rollout_correction_rules(config: DictConfig) -> list[Violation]:
    """Both estimators: verl's rollout correction may reweight the loss (``rollout_is``) but
    nothing may rewrite the mask or replace the loss and its old log-probabilities."""
    found: list[Violation] = []
    _require(
        found, config, "algorithm.rollout_correction.rollout_rs", lambda rs: rs is None, "null",
        "rejection sampling rewrites response_mask after the rewards (and REINFORCE++'s KL shaping) "
        "are fixed and before the estimator runs: a rejected last token drops the outcome reward R_i "
        "from every return and advantage of the response (docs/contract.md section 6.2.8).",
        "null",
    )
    _require(
        found, config, "algorithm.rollout_correction.bypass_mode", lambda on: not on, "False",
        "bypass mode uses the rollout engine's log-probabilities as the old policy (the ratio and "
        "REINFORCE++'s k1 shaping) and, in the legacy trainer, replaces the rfpp loss with verl's "
        "bypass_mode loss (docs/contract.md section 6.2.8).",
        False, default=False,
    )
    return found


def _trainer_mode_rules(config: DictConfig) -> list[Violation]:
    found: list[Violation] = []
    why_async = (
        "asynchronous or off-policy trainers normalize over part of a step or mix policy "
        "versions; docs/contract.md section 4 needs one closed synchronous step batch."
    )
    if _get(config, "async_training") is not None:
        found.append(Violation(
            "async_training", "<present>", "absent (synchronous training)", why_async,
            "run python -m verl.trainer.main_ppo without the async_training block (no fully-async "
            "or one-step-off launcher)",
        ))
    if _get(config, "trainer.use_v1", False):
        key = "trainer.v1.trainer_mode"
        _require(found, config, key, lambda mode: mode == "sync", "'sync'", why_async, "sync", default="sync")
        if _get(config, key, "sync") == "sync":
            _require(
                found, config, "trainer.v1.sync.parameter_sync_step", lambda step: step == 1, "1",
                why_async, 1, default=1,
            )
    return found


def _reinforce_plus_plus_rules(config: DictConfig) -> list[Violation]:
    found: list[Violation] = []
    _require(
        found, config, "actor_rollout_ref.actor.use_kl_loss", lambda on: not on, "False",
        "REINFORCE++ puts the k1 KL inside the returns; a KL loss would count it twice "
        "(docs/contract.md section 2).",
        False, default=False,
    )
    kl_in_reward = bool(_get(config, "algorithm.use_kl_in_reward", False))
    if not kl_in_reward:
        if _get(config, "actor_rollout_ref.actor.use_kl_loss", False):
            _require(
                found, config, "algorithm.use_kl_in_reward", bool, "True",
                "REINFORCE++ regularizes with k1 KL shaping in the reward (docs/contract.md section 2).",
                True, default=False,
            )
        return found
    _require(
        found, config, "algorithm.kl_penalty", lambda penalty: penalty in K1_NAMES,
        "'kl' (k1, the signed estimator d = logp_old - logp_ref)",
        "the returns are KL-to-go of the k1 estimator (docs/contract.md section 2).",
        "kl", default="kl",
    )
    _require(
        found, config, "algorithm.kl_ctrl.type", lambda controller: controller == "fixed", "'fixed'",
        "an adaptive coefficient changes beta during training (docs/contract.md section 2).",
        "fixed", default="fixed",
    )
    return found


def _baseline_rules(config: DictConfig) -> list[Violation]:
    found: list[Violation] = []
    _require(
        found, config, "actor_rollout_ref.rollout.n", lambda n: n is not None and n > 1,
        "> 1 (the recipe uses 8)",
        "with one sample per prompt every group-centred reward C_i is 0 (docs/contract.md section 3).",
        8, default=1,
    )
    _require(
        found, config, "algorithm.use_kl_in_reward", lambda on: not on, "False",
        "REINFORCE++-baseline keeps KL out of the advantage; it is the separate k2 loss "
        "(docs/contract.md section 3).",
        False, default=False,
    )
    if _get(config, "actor_rollout_ref.actor.use_kl_loss", False):
        _require(
            found, config, "actor_rollout_ref.actor.kl_loss_type", lambda kind: kind in K2_NAMES,
            "'k2' (0.5 * (logp - logp_ref)^2)",
            "only the k2 loss has the reverse-KL gradient the method relies on (docs/contract.md section 3).",
            "k2",
        )
    return found


def violations(config: DictConfig) -> list[Violation]:
    """Every docs/contract.md section 6 rule the config breaks; empty for other estimators.
    ``UnreadableConfigError`` when a key a rule reads does not resolve."""
    estimator = estimator_of(config)
    if estimator is None:
        return []
    incomplete = _absent_violations(config, estimator) + _type_violations(config, estimator)
    if incomplete:  # the rules compare values: they see only complete, well-typed configs
        return incomplete
    found = _common_rules(config) + _gamma_rule(config)
    if estimator == REINFORCE_PLUS_PLUS:
        found.extend(_reinforce_plus_plus_rules(config))
    else:
        found.extend(_baseline_rules(config))
    return found


def warnings_for(config: DictConfig) -> list[str]:
    """Legal but unusual settings (docs/contract.md section 6), each with what it means."""
    estimator = estimator_of(config)
    if estimator is None:
        return []
    notes = []
    gamma = _get(config, "algorithm.gamma", 1.0)
    if estimator == REINFORCE_PLUS_PLUS and gamma != 1.0:
        notes.append(
            f"algorithm.gamma = {gamma}: returns are discounted by position, across mask holes "
            "too; the recipe uses 1.0 (docs/contract.md section 2)."
        )
    kl_in_reward = _get(config, "algorithm.use_kl_in_reward", False)
    kl_loss = _get(config, "actor_rollout_ref.actor.use_kl_loss", False)
    if not kl_in_reward and not kl_loss:
        notes.append(
            "KL regularization is off entirely (no KL in the reward, no KL loss): the policy is "
            "free to drift from the reference model."
        )
    elif estimator == REINFORCE_PLUS_PLUS and kl_in_reward and _get(config, "algorithm.kl_ctrl.kl_coef") == 0:
        notes.append("algorithm.kl_ctrl.kl_coef = 0: the KL shaping is in place but has no effect.")
    elif estimator == BASELINE and kl_loss and _get(config, "actor_rollout_ref.actor.kl_loss_coef") == 0:
        notes.append("actor_rollout_ref.actor.kl_loss_coef = 0: the k2 loss is computed but has no effect.")
    if _get(config, "algorithm.filter_groups.enable", False):
        notes.append(
            "algorithm.filter_groups.enable = True: dropped groups leave the normalization "
            "population, so moments are over the kept groups only."
        )
    return notes


def enforce(config: DictConfig) -> None:
    """Raise ``ConfigViolationError`` listing every violation (``UnreadableConfigError`` for a key
    a rule reads that does not resolve); log each warning at WARNING."""
    estimator = estimator_of(config)
    if estimator is None:
        return
    found = violations(config)
    if found:
        raise ConfigViolationError(estimator, found)
    for note in warnings_for(config):
        logger.warning("verl_rfpp: %s", note)


RECIPES: dict[str, tuple[str, ...]] = {
    REINFORCE_PLUS_PLUS: (
        "algorithm.adv_estimator=reinforce_plus_plus",
        "algorithm.gamma=1.0",
        "algorithm.use_kl_in_reward=True",
        "algorithm.kl_penalty=kl",
        "algorithm.kl_ctrl.type=fixed",
        "algorithm.kl_ctrl.kl_coef=0.01",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"actor_rollout_ref.actor.loss_agg_mode={RESPONSE_MEAN}",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={POLICY_LOSS_MODE}",
    ),
    BASELINE: (
        "algorithm.adv_estimator=reinforce_plus_plus_baseline",
        "algorithm.gamma=1.0",
        "algorithm.use_kl_in_reward=False",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_type=k2",
        "actor_rollout_ref.actor.kl_loss_coef=0.01",
        f"actor_rollout_ref.actor.loss_agg_mode={RESPONSE_MEAN}",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={POLICY_LOSS_MODE}",
    ),
}

"""The up-front config contract (docs/contract.md section 6): a verl config -> a list of violations.

Pure functions over OmegaConf: nothing here imports verl. Only configs whose
``algorithm.adv_estimator`` is one of ours are looked at; every other verl run is untouched.
The rules are one table, ``RULES``: each ``Rule`` has its contract id (6.2.x), the estimators it
applies to, the keys it reads, what it accepts, why, and the function that finds its violations;
docs/contract.md's 6.2 table is held equal to it by a test.
"""

from __future__ import annotations

import logging
import math
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl_rfpp.errors import RfppError

logger = logging.getLogger("verl_rfpp")

REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
BASELINE = "reinforce_plus_plus_baseline"
ESTIMATOR_NAMES = (REINFORCE_PLUS_PLUS, BASELINE)
BOTH = ESTIMATOR_NAMES

POLICY_LOSS_MODE = "rfpp"
RESPONSE_MEAN = "seq-mean-token-mean"
AR = "actor_rollout_ref"
ACTOR = f"{AR}.actor"

# verl 0.9.1's ``core_algos.kl_penalty(logprob, ref_logprob, name)``: a trailing ``+`` keeps the
# forward value of ``name`` and takes the gradient of k2 (``b - b.detach() + f.detach()`` with
# ``b = 0.5 * (logprob - ref_logprob)^2``); ``k2+`` / ``mse+`` return k2's value unchanged.
# REINFORCE++'s reward shaping uses only the value (rewards carry no gradient): the k1 names and
# their ``+`` forms give the same rewards. The baseline's KL loss needs k2's value and gradient:
# the k2 names and their ``+`` forms give both exactly.
K1_NAMES = ("kl", "k1", "kl+", "k1+")
K2_NAMES = ("k2", "mse", "k2+", "mse+")

# The engine configs the actor and the reference model are built from (``actor.engine`` is
# ``fsdp_config``, ``megatron``, ``torchtitan`` or ``veomni``, chosen by ``model_engine``).
ENGINE_ROLES = (ACTOR, f"{AR}.ref")

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
SEQUENCE_SPLITTING_KEYS = f"{AR}.{{actor,ref}}.**.<sequence-splitting key>"


@dataclass(frozen=True)
class Violation:
    """One broken rule: its contract id, the key, what was found, what is required, why, and the
    overrides that fix it (``fix``: them as one shell-quoted string)."""

    rule: str
    key: str
    found: Any
    required: str
    why: str
    fixes: tuple[str, ...]

    @property
    def fix(self) -> str:
        return " ".join(shlex.quote(override) for override in self.fixes)

    def __str__(self) -> str:
        return (
            f"  - [{self.rule}] {self.key} = {self.found!r}: required {self.required}.\n"
            f"    Why: {self.why}\n"
            f"    Fixed by: {self.fix}"
        )


def fix_overrides(found: list[Violation]) -> list[str]:
    """Every override of ``found``'s fixes, in order, each once: appended after a command's own
    overrides (Hydra's last value wins) they make the config pass every rule."""
    overrides: list[str] = []
    for violation in found:
        overrides.extend(o for o in violation.fixes if o not in overrides)
    return overrides


def fix_line(overrides: list[str], command: tuple[str, ...] = ()) -> str:
    """``Fix: `` and the shell-quoted words to paste: ``command`` (a script and its arguments) then
    the overrides."""
    return "Fix: " + " ".join(shlex.quote(word) for word in (*command, *overrides))


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
    """``algorithm.adv_estimator`` is not an estimator verl knows but reads as one of ours."""

    def __init__(self, name: Any, meant: str):
        self.name = name
        self.meant = meant
        self.fixes = (f"algorithm.adv_estimator={meant}",)
        super().__init__(
            f"algorithm.adv_estimator={name} is not an estimator verl knows; did you mean {meant}? "
            "(docs/contract.md section 6.3)\n" + fix_line(list(self.fixes))
        )


def misspelt_estimator(name: Any) -> Optional[MisspeltEstimatorError]:
    """The refusal for an ``adv_estimator`` that reads as one of ours (``near_miss``), else ``None``;
    the caller checks that verl's registry does not hold ``name``."""
    meant = near_miss(name)
    return None if meant is None else MisspeltEstimatorError(name, meant)


class ConfigViolationError(RfppError):
    """A config that would silently change REINFORCE++; the message lists every violation and
    ends with one ``Fix:`` line holding every override that repairs them."""

    def __init__(self, estimator: str, violations: list[Violation]):
        self.estimator = estimator
        self.violations = list(violations)
        self.fixes = fix_overrides(self.violations)
        lines = [
            f"verl_rfpp refuses this config for algorithm.adv_estimator={estimator}: "
            f"{len(self.violations)} setting(s) would silently change the method "
            "(docs/contract.md section 6).",
            *(str(violation) for violation in self.violations),
            "The whole validated recipe: verl-rfpp recipe " + estimator,
            fix_line(self.fixes),
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


def recipe_value(estimator: str, key: str, fallback: Any = None) -> Any:
    """The value ``RECIPES[estimator]`` sets for ``key`` (as written there), else ``fallback``."""
    return dict(line.split("=", 1) for line in RECIPES[estimator]).get(key, fallback)


# Typed rule keys that verl 0.9.1's packaged ppo_trainer config does not have: only a
# ``+key=...`` override adds them, so their fix is ``++key=...`` (add or override), which works
# both appended to the offending command and in place of the offending override. Fixes of keys
# absent from the config (sequence-splitting keys of another engine, removed keys) are ``++``
# for the same reason.
ADDED_KEYS = frozenset({"trainer.v1.sync.parameter_sync_step"})


def _override(key: str, value: Any, config: DictConfig) -> str:
    """The command-line override that sets ``key`` to ``value``, pasteable after any command:
    ``++`` for a key verl's config lacks or ``config`` does not have."""
    present = OmegaConf.select(config, key, default=_MISSING) is not _MISSING
    return f"{'' if present and key not in ADDED_KEYS else '++'}{key}={value}"


# The type of every value a rule reads (``None`` is allowed where verl allows it: ``optional``),
# and the value a fix sets when the recipe has none. A wrong-typed value is a violation of its own
# (6.2.9), before any rule compares it (``rollout.n=abc`` must not reach ``n > 1``).
_TYPED_KEYS: dict[str, tuple[type, bool, Any]] = {
    f"{AR}.rollout.n": (int, False, 8),
    f"{ACTOR}.use_kl_loss": (bool, False, False),
    f"{ACTOR}.kl_loss_coef": (float, False, 0.01),
    f"{ACTOR}.clip_ratio": (float, False, 0.2),
    f"{ACTOR}.clip_ratio_low": (float, True, 0.2),
    f"{ACTOR}.clip_ratio_high": (float, True, 0.2),
    "algorithm.use_kl_in_reward": (bool, False, False),
    "algorithm.kl_ctrl.kl_coef": (float, False, 0.01),
    "algorithm.gamma": (float, True, 1.0),
    "algorithm.rollout_correction.bypass_mode": (bool, False, False),
    "algorithm.filter_groups.enable": (bool, False, False),
    "trainer.use_v1": (bool, False, True),
    "trainer.v1.sync.parameter_sync_step": (int, False, 1),
}
_TYPE_NAMES = {int: "an integer", bool: "a boolean (True or False)", float: "a number"}

# The keys the rules read that verl's packaged config always has, with the value a fix sets when
# the recipe has none. verl reads them as attributes (a removed one fails mid-run or falls back
# to a dataclass default no rule saw), so an override that removes one (``~key``) is refused.
# Not here: keys verl reads with ``.get`` and treats as off when absent (``async_training``,
# ``algorithm.rollout_correction.*``, ``algorithm.filter_groups.*``, the v1 sync step).
_COMMON_REQUIRED = {
    f"{ACTOR}.loss_agg_mode": RESPONSE_MEAN,
    f"{ACTOR}.policy_loss.loss_mode": POLICY_LOSS_MODE,
    f"{ACTOR}.use_kl_loss": False,
    f"{ACTOR}.clip_ratio": 0.2,
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
        f"{AR}.rollout.n": 8,
        f"{ACTOR}.kl_loss_type": "k2",
        f"{ACTOR}.kl_loss_coef": 0.01,
    },
}


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One row of docs/contract.md's 6.2 table: ``find(config, estimator, rule)`` returns its
    violations of a complete, well-typed config of one of ``estimators``. Written with keywords."""

    id: str
    estimators: tuple[str, ...]
    keys: tuple[str, ...]
    accepts: str
    why: str
    find: Callable[[DictConfig, str, Rule], list[Violation]]

    def violation(self, key: str, found: Any, required: str, fixes: tuple[str, ...], why: str = "") -> Violation:
        return Violation(self.id, key, found, required, why or self.why, fixes)

    def require(
        self, config: DictConfig, estimator: str, key: str, accepted: Callable[[Any], bool], required: str,
        fallback: Any, default: Any = None, why: str = "",
    ) -> list[Violation]:
        """The violation of ``key`` when its value (``default`` if absent) is not ``accepted``; the
        fix sets the recipe's value for ``key``, else ``fallback``."""
        value = _get(config, key, default)
        if accepted(value):
            return []
        fix = _override(key, recipe_value(estimator, key, fallback), config)
        return [self.violation(key, value, required, (fix,), why)]


def _has_type(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _complete(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    """6.2.9: every required key present (``++key=value`` puts a removed one back), every value a
    rule reads of the type verl reads (a value that does not resolve raises ``UnreadableConfigError``)."""
    found = [
        rule.violation(key, ABSENT, "present", (f"++{key}={recipe_value(estimator, key, fallback)}",))
        for key, fallback in REQUIRED_KEYS[estimator].items()
        if _get(config, key, _MISSING) is _MISSING
    ]
    for key, (kind, optional, fallback) in _TYPED_KEYS.items():
        value = _get(config, key)
        if value is None or _has_type(value, kind):
            continue
        found.append(rule.violation(
            key, value, f"{_TYPE_NAMES[kind]}{' or null' if optional else ''}, got {type(value).__name__}",
            (_override(key, recipe_value(estimator, key, fallback), config),),
            "verl-rfpp's rules and verl's trainer read this value as "
            f"{_TYPE_NAMES[kind]} (docs/contract.md section 6.2.9).",
        ))
    return found


def _rollout_n(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, f"{AR}.rollout.n", lambda n: n is not None and n > 1,
                        "> 1 (the recipe uses 8)", 8, default=1)


def _loss_agg_mode(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, f"{ACTOR}.loss_agg_mode", lambda mode: mode == RESPONSE_MEAN,
                        f"'{RESPONSE_MEAN}' (response mean)", RESPONSE_MEAN)


def _loss_mode(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, f"{ACTOR}.policy_loss.loss_mode", lambda mode: mode == POLICY_LOSS_MODE,
                        f"'{POLICY_LOSS_MODE}' (the plain clipped surrogate)", POLICY_LOSS_MODE, default="vanilla")


def reads(key: str) -> bool:
    """Whether the verdict could read ``key`` or anything under or above it: a key of a rule
    (``RULES``, their types and requirements), ``algorithm.adv_estimator``, a sequence-splitting
    key by name under ``ENGINE_ROLES``, a key of Hydra's or a config group (``/``, ``@``)."""
    key = key.lstrip("+")
    if key.startswith(("~", "hydra.")) or key == "hydra" or "/" in key or "@" in key:
        return True
    fixed = {"algorithm.adv_estimator", *_TYPED_KEYS, *_COMMON_REQUIRED}
    fixed.update(name for rule in RULES for name in rule.keys if "{" not in name)
    fixed.update(name.replace(ACTOR, f"{AR}.ref", 1) for name in list(fixed) if name.startswith(ACTOR + "."))
    if any(key == name or name.startswith(key + ".") or key.startswith(name + ".") for name in fixed):
        return True
    return key.startswith(ENGINE_ROLES) and any(SEQUENCE_SPLITTING_KEY.match(part) for part in key.split("."))


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
            child = _interpolated(config, node, name, key)
        else:
            child = node[name]
        if isinstance(child, DictConfig):
            yield from _matching_keys(config, child, key)


_COPY = re.compile(r"^\$\{(?:oc\.select:)?([\w.]+)(?:,[^}]*)?\}$")


def _interpolated(config: DictConfig, node: DictConfig, name: str, key: str) -> Any:
    """What the interpolation at ``key`` reaches, for the container walk: a plain copy of another
    key (``${a.b}``, ``${oc.select:a.b,default}``) is looked up without resolving leaves (OmegaConf's
    grammar parser is the cost of a check); any other interpolation is resolved. A leaf that does
    not resolve is no container of ours (``None``)."""
    match = _COPY.match(str(node._get_node(name)._value()))
    if match:
        target: Any = config
        for part in match.group(1).split("."):
            if not isinstance(target, DictConfig) or part not in target or OmegaConf.is_interpolation(target, part):
                break
            target = target._get_node(part)
        else:
            return target if isinstance(target, DictConfig) else None
    try:
        return OmegaConf.select(config, key, throw_on_missing=True)
    except OmegaConfBaseException:
        return None


def _copied_from(config: DictConfig, key: str) -> Optional[str]:
    """The key whose value ``key`` copies (verl's ref ``${oc.select:<actor key>,1}``), else ``None``."""
    parent, name = key.rsplit(".", 1)
    node = OmegaConf.select(config, parent)
    if not OmegaConf.is_interpolation(node, name):
        return None
    match = _COPY.match(str(node._get_node(name)._value()))
    return match.group(1) if match else None


def _sequence_parallel(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    """6.2.4; a reference key that copies a reported actor key is that one setting, reported once."""
    found: list[Violation] = []
    for key in sequence_splitting_keys(config):
        value = _get(config, key)
        switch = key.rsplit(".", 1)[-1].startswith("dynamic_")
        accepted = value is None or (value is False if switch else _has_type(value, int) and value == 1)
        if not accepted and _copied_from(config, key) not in {v.key for v in found}:
            wanted = "False" if switch else "1"
            found.append(rule.violation(key, value, wanted, (f"++{key}={wanted}",)))
    return found


def _trainer_mode(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    found = []
    if _get(config, "async_training") is not None:
        found.append(rule.violation("async_training", "<present>", "absent (synchronous training)",
                                    ("~async_training",)))
    if _get(config, "trainer.use_v1", False):
        key = "trainer.v1.trainer_mode"
        found += rule.require(config, estimator, key, lambda mode: mode == "sync", "'sync'", "sync", default="sync")
        if _get(config, key, "sync") == "sync":
            found += rule.require(config, estimator, "trainer.v1.sync.parameter_sync_step", lambda step: step == 1,
                                  "1", 1, default=1)
    return found


def _rollout_correction(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    """Both estimators: verl's rollout correction may reweight the loss (``rollout_is``) but
    nothing may rewrite the mask or replace the loss and its old log-probabilities."""
    return rule.require(
        config, estimator, "algorithm.rollout_correction.rollout_rs", lambda rs: rs is None, "null", "null",
        why="rejection sampling rewrites response_mask after the rewards (and REINFORCE++'s KL shaping) "
        "are fixed and before the estimator runs: a rejected last token drops the outcome reward R_i "
        "from every return and advantage of the response (docs/contract.md section 6.2.8).",
    ) + rule.require(
        config, estimator, "algorithm.rollout_correction.bypass_mode", lambda on: not on, "False", False,
        default=False,
        why="bypass mode uses the rollout engine's log-probabilities as the old policy (the ratio and "
        "REINFORCE++'s k1 shaping) and, in the legacy trainer, replaces the rfpp loss with verl's "
        "bypass_mode loss (docs/contract.md section 6.2.8).",
    )


def _coefficient(config: DictConfig, key: str, estimator: str, target: str) -> Any:
    """The user's KL coefficient at ``key``, carried to ``target`` when a fix moves the KL; the
    recipe's when it is no usable coefficient (6.2.11 refuses it)."""
    value = _get(config, key)
    return value if _valid_coefficient(value) else recipe_value(estimator, target, 0.01)


def _valid_coefficient(value: Any) -> bool:
    return _has_type(value, float) and math.isfinite(value) and value >= 0


def _kl_reward(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    """6.2.6: k1 shaping in the reward with a fixed coefficient, no KL loss. A KL loss the user
    turned on is moved into the reward with its coefficient, never dropped."""
    found: list[Violation] = []
    kl_in_reward = _get(config, "algorithm.use_kl_in_reward", False)
    if _get(config, f"{ACTOR}.use_kl_loss", False):
        fixes = [f"{ACTOR}.use_kl_loss=False"]
        if not kl_in_reward:
            coef = _coefficient(config, f"{ACTOR}.kl_loss_coef", estimator, "algorithm.kl_ctrl.kl_coef")
            fixes += ["algorithm.use_kl_in_reward=True", "algorithm.kl_penalty=kl", "algorithm.kl_ctrl.type=fixed",
                      f"algorithm.kl_ctrl.kl_coef={coef}"]
        found.append(rule.violation(
            f"{ACTOR}.use_kl_loss", True, "False (REINFORCE++'s KL is k1 shaping in the reward)", tuple(fixes),
            "REINFORCE++ puts the k1 KL inside the returns; a KL loss would change the method, or count "
            "the KL twice (docs/contract.md section 2).",
        ))
    if not kl_in_reward:
        return found
    found += rule.require(
        config, estimator, "algorithm.kl_penalty", lambda penalty: penalty in K1_NAMES,
        "'kl' (k1, the signed estimator d = logp_old - logp_ref; 'k1', 'kl+', 'k1+' give the same rewards)",
        "kl", default="kl", why="the returns are KL-to-go of the k1 estimator (docs/contract.md section 2).",
    )
    found += rule.require(
        config, estimator, "algorithm.kl_ctrl.type", lambda controller: controller == "fixed", "'fixed'",
        "fixed", default="fixed",
        why="an adaptive coefficient changes beta during training (docs/contract.md section 2).",
    )
    return found


def _kl_loss(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    """6.2.7: no KL in the reward; a KL loss, when on, is k2. KL in the reward the user turned on
    becomes the k2 loss with its coefficient, never dropped."""
    found: list[Violation] = []
    kl_loss = _get(config, f"{ACTOR}.use_kl_loss", False)
    if _get(config, "algorithm.use_kl_in_reward", False):
        fixes = ["algorithm.use_kl_in_reward=False"]
        if not kl_loss:
            coef = _coefficient(config, "algorithm.kl_ctrl.kl_coef", estimator, f"{ACTOR}.kl_loss_coef")
            fixes += [f"{ACTOR}.use_kl_loss=True", f"{ACTOR}.kl_loss_type=k2", f"{ACTOR}.kl_loss_coef={coef}"]
        found.append(rule.violation(
            "algorithm.use_kl_in_reward", True, "False (the baseline's KL is the k2 loss)", tuple(fixes),
            "REINFORCE++-baseline keeps KL out of the advantage; it is the separate k2 loss "
            "(docs/contract.md section 3).",
        ))
    if kl_loss:
        found += rule.require(
            config, estimator, f"{ACTOR}.kl_loss_type", lambda kind: kind in K2_NAMES,
            "'k2' (0.5 * (logp - logp_ref)^2; 'mse', 'k2+', 'mse+' are the same value and gradient)", "k2",
            why="only k2 has the value and the reverse-KL gradient the method defines "
            "(docs/contract.md section 3).",
        )
    return found


def _gamma(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, "algorithm.gamma", lambda gamma: gamma is None or 0.0 <= gamma <= 1.0,
                        "within [0, 1]", 1.0)


def _kl_coefficient(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    """6.2.11: the coefficient of the KL in use (REINFORCE++'s reward shaping, the baseline's
    loss) is a finite number >= 0; 0 is legal (a WARNING, section 6.4)."""
    key, on = (("algorithm.kl_ctrl.kl_coef", "algorithm.use_kl_in_reward") if estimator == REINFORCE_PLUS_PLUS
               else (f"{ACTOR}.kl_loss_coef", f"{ACTOR}.use_kl_loss"))
    if not _get(config, on, False):
        return []
    return rule.require(config, estimator, key, _valid_coefficient, "a finite number >= 0", 0.01)


def clip_ratios(config: DictConfig) -> dict[str, tuple[str, Any]]:
    """The clip ranges the rfpp loss uses, as verl reads them (``core_algos.compute_policy_loss``,
    ``adapter/actor_loss``): ``low``/``high`` -> (the key that sets it, its value);
    ``clip_ratio_low``/``_high`` when not null, else ``clip_ratio``."""
    ranges = {}
    for side in ("low", "high"):
        key = f"{ACTOR}.clip_ratio_{side}"
        value = _get(config, key)
        if value is None:
            key = f"{ACTOR}.clip_ratio"
            value = _get(config, key)
        ranges[side] = (key, value)
    return ranges


def _clip_ratio(config: DictConfig, estimator: str, rule: Rule) -> list[Violation]:
    """6.2.12: 0 < eps_low < 1 and 0 < eps_high < inf; a bound set by ``clip_ratio`` (both sides
    read it) is reported once."""
    found: list[Violation] = []
    accepts = {"low": lambda eps: 0 < eps < 1, "high": lambda eps: 0 < eps < math.inf}
    required = {"low": "within (0, 1)", "high": "a finite number > 0"}
    for side, (key, value) in clip_ratios(config).items():
        if key not in {v.key for v in found}:
            found += rule.require(config, estimator, key, accepts[side], required[side], 0.2)
    return found


_ASYNC_WHY = ("asynchronous or off-policy trainers normalize over part of a step or mix policy versions; "
              "docs/contract.md section 4 needs one closed synchronous step batch.")

RULES: tuple[Rule, ...] = (
    Rule(
        id="6.2.1",
        estimators=(BASELINE,),
        keys=(f"{AR}.rollout.n",),
        accepts="greater than 1",
        why="with one sample per prompt every group-centred reward C_i is 0 (docs/contract.md section 3).",
        find=_rollout_n,
    ),
    Rule(
        id="6.2.2",
        estimators=BOTH,
        keys=(f"{ACTOR}.loss_agg_mode",),
        accepts=f"'{RESPONSE_MEAN}'",
        why="token-level or summed reductions change the objective's denominator (docs/contract.md section 5).",
        find=_loss_agg_mode,
    ),
    Rule(
        id="6.2.3",
        estimators=BOTH,
        keys=(f"{ACTOR}.policy_loss.loss_mode",),
        accepts=f"'{POLICY_LOSS_MODE}' (section 5.1)",
        why="verl's 'vanilla' adds dual-clip for negative advantages and other modes replace the "
            "clipped surrogate of docs/contract.md section 5.",
        find=_loss_mode,
    ),
    Rule(
        id="6.2.4",
        estimators=BOTH,
        keys=(SEQUENCE_SPLITTING_KEYS,),
        accepts="1 (False for a dynamic_* switch)",
        why="context / sequence parallelism splits each response across ranks, which the estimator and the "
            "response-mean loss do not support (docs/contract.md section 6.2.4).",
        find=_sequence_parallel,
    ),
    Rule(
        id="6.2.5",
        estimators=BOTH,
        keys=("async_training", "trainer.v1.trainer_mode", "trainer.v1.sync.parameter_sync_step"),
        accepts="no async_training block; v1 trainer_mode 'sync' with parameter_sync_step 1",
        why=_ASYNC_WHY,
        find=_trainer_mode,
    ),
    Rule(
        id="6.2.6",
        estimators=(REINFORCE_PLUS_PLUS,),
        keys=("algorithm.use_kl_in_reward", "algorithm.kl_penalty", "algorithm.kl_ctrl.type", f"{ACTOR}.use_kl_loss"),
        accepts="KL in the reward: k1 penalty, fixed controller; no KL loss",
        why="REINFORCE++ regularizes with k1 KL shaping in the returns (docs/contract.md section 2).",
        find=_kl_reward,
    ),
    Rule(
        id="6.2.7",
        estimators=(BASELINE,),
        keys=("algorithm.use_kl_in_reward", f"{ACTOR}.use_kl_loss", f"{ACTOR}.kl_loss_type"),
        accepts="no KL in the reward; a KL loss, when on, is k2",
        why="REINFORCE++-baseline's KL is the separate k2 loss (docs/contract.md section 3).",
        find=_kl_loss,
    ),
    Rule(
        id="6.2.8",
        estimators=BOTH,
        keys=("algorithm.rollout_correction.rollout_rs", "algorithm.rollout_correction.bypass_mode"),
        accepts="rollout_rs null, bypass_mode False",
        why="rejection sampling and bypass mode change the estimator's inputs or the loss (docs/contract.md "
            "section 6.2.8).",
        find=_rollout_correction,
    ),
    Rule(
        id="6.2.9",
        estimators=BOTH,
        keys=(),
        accepts="every key of the other rules present, resolving, of the type verl reads",
        why="verl-rfpp's rules and verl's trainer read these keys; without them the rules cannot check the "
            "method and verl fails or falls back to a default (docs/contract.md section 6.2.9).",
        find=_complete,
    ),
    Rule(
        id="6.2.10",
        estimators=BOTH,
        keys=("algorithm.gamma",),
        accepts="within [0, 1] or null",
        why="gamma discounts the returns; outside [0, 1] they grow with the distance to the end of the "
            "response or flip sign (docs/contract.md section 2).",
        find=_gamma,
    ),
    Rule(
        id="6.2.11",
        estimators=BOTH,
        keys=("algorithm.kl_ctrl.kl_coef", f"{ACTOR}.kl_loss_coef"),
        accepts="a finite number >= 0 for the KL in use",
        why="a negative coefficient rewards moving away from the reference model and nan or inf makes every "
            "return or loss nan or inf (docs/contract.md sections 2.1 and 3.2).",
        find=_kl_coefficient,
    ),
    Rule(
        id="6.2.12",
        estimators=BOTH,
        keys=(f"{ACTOR}.clip_ratio", f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_high"),
        accepts="0 < eps_low < 1, 0 < eps_high finite",
        why="the ratio rho > 0 is clipped to [1 - eps_low, 1 + eps_high]: eps_low >= 1 removes the lower clip, "
            "a bound <= 0 or not finite clips nothing or everything (docs/contract.md section 5.1).",
        find=_clip_ratio,
    ),
)
COMPLETENESS = "6.2.9"


def rule(rule_id: str) -> Rule:
    """The rule with contract id ``rule_id``."""
    return next(r for r in RULES if r.id == rule_id)


# ``near_miss``: a name reads as one of ours once spelling is normalized: case ignored, ``-`` and
# ``_`` dropped, ``++`` / ``plusplus`` / ``plus_plus`` read as ``pp``, a leading ``rf`` (the
# usual abbreviation, as in this package's name) read as ``reinforce``; then equal to ours or one
# letter off (one insertion, deletion or substitution).
_PLUS_PLUS = re.compile(r"\+\+|plusplus")


def normalized(name: str) -> str:
    """``name`` in the spelling ``near_miss`` compares (``Reinforce-Plus-Plus`` -> ``reinforcepp``)."""
    text = _PLUS_PLUS.sub("pp", re.sub(r"[-_\s]", "", name.lower()))
    return "reinforce" + text[2:] if text.startswith("rf") else text


def near_miss(name: Any) -> Optional[str]:
    """Our estimator ``name`` reads as (``normalized``), else ``None``; the caller checks that
    verl's registry does not hold ``name`` (docs/contract.md section 6.3)."""
    if not isinstance(name, str) or name in ESTIMATOR_NAMES:
        return None
    spelt = normalized(name)
    for ours in ESTIMATOR_NAMES:
        if _one_edit_apart(spelt, normalized(ours)):
            return ours
    return None


def _one_edit_apart(first: str, second: str) -> bool:
    """Whether ``first`` equals ``second`` or one insertion, deletion or substitution turns it into ``second``."""
    if abs(len(first) - len(second)) > 1:
        return False
    if len(first) > len(second):
        first, second = second, first
    for index, (a, b) in enumerate(zip(first, second, strict=False)):  # second may be one longer
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


def violations(config: DictConfig) -> list[Violation]:
    """Every rule of ``RULES`` the config breaks; empty for other estimators. The rules compare
    values: they see only a complete, well-typed config (6.2.9 first, alone when it fails).
    ``UnreadableConfigError`` when a key a rule reads does not resolve."""
    estimator = estimator_of(config)
    if estimator is None:
        return []
    incomplete = rule(COMPLETENESS).find(config, estimator, rule(COMPLETENESS))
    if incomplete:
        return incomplete
    return [
        violation
        for r in RULES if r.id != COMPLETENESS and estimator in r.estimators
        for violation in r.find(config, estimator, r)
    ]


def warnings_for(config: DictConfig) -> list[str]:
    """Legal but unusual settings (docs/contract.md section 6.4), each with what it means."""
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
    kl_loss = _get(config, f"{ACTOR}.use_kl_loss", False)
    if not kl_in_reward and not kl_loss:
        notes.append(
            "KL regularization is off entirely (no KL in the reward, no KL loss): the policy is "
            "free to drift from the reference model."
        )
    elif estimator == REINFORCE_PLUS_PLUS and kl_in_reward and _get(config, "algorithm.kl_ctrl.kl_coef") == 0:
        notes.append("algorithm.kl_ctrl.kl_coef = 0: the KL shaping is in place but has no effect.")
    elif estimator == BASELINE and kl_loss and _get(config, f"{ACTOR}.kl_loss_coef") == 0:
        notes.append(f"{ACTOR}.kl_loss_coef = 0: the k2 loss is computed but has no effect.")
    if _get(config, "algorithm.filter_groups.enable", False):
        notes.append(
            "algorithm.filter_groups.enable = True: dropped groups leave the normalization "
            "population, so moments are over the kept groups only."
        )
    return notes


def kl_in_use(config: DictConfig) -> str:
    """Where and how an accepted config regularizes toward the reference model, for ``check``'s OK
    line (docs/contract.md section 6.5): the rules of 6.2.6 and 6.2.7 leave REINFORCE++ only k1 in
    the reward and the baseline only the k2 loss, each with its coefficient, or neither (``off``)."""
    if _get(config, "algorithm.use_kl_in_reward", False):
        return f"k1 in the reward, coefficient {_get(config, 'algorithm.kl_ctrl.kl_coef')}"
    if _get(config, f"{ACTOR}.use_kl_loss", False):
        return f"k2 loss, coefficient {_get(config, f'{ACTOR}.kl_loss_coef')}"
    return "off"


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

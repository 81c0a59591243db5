"""The up-front config contract (docs/contract.md section 6): a verl config -> a list of violations,
and the recipes (section 6.1).

Pure functions over OmegaConf: nothing here imports verl or torch. Only configs whose
``algorithm.adv_estimator`` names one of ours (``verl_rfpp.catalog``) are looked at; every other
verl run is untouched. The rules are one table, ``RULES``: each ``Rule`` has its contract id
(6.2.x), the estimator families it applies to, the keys it reads (each a ``Key``: type, whether
null is allowed, the value verl uses when it is absent, the value a fix sets), what it accepts,
why, and the function that finds its violations. The type check (6.2.9), the keys ``check`` reads
and docs/contract.md's 6.2 tables derive from them (the tables are held equal by a test).
"""

from __future__ import annotations

import logging
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl_rfpp import catalog
from verl_rfpp.absent import ABSENT
from verl_rfpp.catalog import FAMILIES, GROUP, POLICY_LOSS_MODE, RESPONSE_MEAN, RETURNS, Estimator, Family
from verl_rfpp.errors import RfppError

logger = logging.getLogger("verl_rfpp")

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
# both appended to the offending command and in place of the offending override. Fixes of keys
# absent from the config (sequence-splitting keys of another engine, removed keys) are ``++``
# for the same reason.
ADDED_KEYS = frozenset({"trainer.v1.sync.parameter_sync_step"})


def _override(key: str, value: Any, config: DictConfig) -> str:
    """The command-line override that sets ``key`` to ``value``, pasteable after any command:
    ``++`` for a key verl's config lacks or ``config`` does not have."""
    present = OmegaConf.select(config, key, default=ABSENT) is not ABSENT
    return f"{'' if present and key not in ADDED_KEYS else '++'}{key}={value}"


@dataclass(frozen=True)
class Key:
    """A config key a rule reads. ``kind``: the type verl reads (``dict``: a block); ``optional``:
    null is a legal value; ``default``: the value verl uses when the key is absent; ``fallback``:
    the value a fix sets when the recipe sets none; ``required``: verl's packaged config always has
    it and verl reads it as an attribute, so removing it (``~key``) is refused (6.2.9), for the
    rule's families or, when given, ``families``."""

    name: str
    kind: type
    optional: bool = False
    default: Any = None
    fallback: Any = None
    required: bool = False
    families: tuple[Family, ...] = ()


_TYPE_NAMES = {int: "an integer", bool: "a boolean (True or False)", float: "a number", str: "a string",
               dict: "a block of keys"}


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One row of docs/contract.md's 6.2 table: ``find(config, estimator, rule)`` returns its
    violations of a complete, well-typed config of an estimator of one of ``families``. Written
    with keywords."""

    id: str
    families: tuple[Family, ...]
    keys: tuple[Key, ...]
    accepts: str
    why: str
    find: Callable[[DictConfig, Estimator, Rule], list[Violation]]

    def key(self, name: str) -> Key:
        """This rule's ``Key`` named ``name``."""
        return next(key for key in self.keys if key.name == name)

    def value(self, config: DictConfig, name: str) -> Any:
        """The value of this rule's key ``name`` (its ``default`` when absent)."""
        return _get(config, name, self.key(name).default)

    def violation(self, key: str, found: Any, required: str, fixes: tuple[str, ...], why: str = "") -> Violation:
        return Violation(self.id, key, found, required, why or self.why, fixes)

    def require(self, config: DictConfig, estimator: Estimator, name: str, accepted: Callable[[Any], bool],
                required: str, why: str = "") -> list[Violation]:
        """The violation of key ``name`` when its value (its default if absent) is not ``accepted``;
        the fix sets the recipe's value, else the key's fallback."""
        value = self.value(config, name)
        if accepted(value):
            return []
        fix = _override(name, estimator.recipe_value(name, self.key(name).fallback), config)
        return [self.violation(name, value, required, (fix,), why)]


def _has_type(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is dict:
        return isinstance(value, (dict, DictConfig))
    return isinstance(value, kind)


def typed_keys() -> dict[str, Key]:
    """Every key the verdict reads and types, by name: the rules' (a pattern key of 6.2.4 types its
    own values) and the warnings' (section 6.4)."""
    keys = {key.name: key for rule in RULES for key in rule.keys if "<" not in key.name}
    keys.update((key.name, key) for key in WARNING_KEYS)
    return keys


def required_keys(estimator: Estimator) -> list[Key]:
    """The keys a config of ``estimator`` must have (6.2.9): the ``required`` keys of the rules of its family."""
    found: dict[str, Key] = {}
    for rule in RULES:
        if estimator.family in rule.families:
            found.update((key.name, key) for key in rule.keys
                         if key.required and estimator.family in (key.families or rule.families))
    return list(found.values())


def _complete(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.9: every required key present (``++key=value`` puts a removed one back), every value a
    rule reads of the type verl reads, null only where verl allows it (a value that does not
    resolve raises ``UnreadableConfigError``)."""
    found = [
        rule.violation(key.name, ABSENT, "present", (f"++{key.name}={estimator.recipe_value(key.name, key.fallback)}",))
        for key in required_keys(estimator)
        if _get(config, key.name, ABSENT) is ABSENT
    ]
    for key in typed_keys().values():
        value = _get(config, key.name, ABSENT)
        if value is ABSENT or (value is None and key.optional) or (value is not None and _has_type(value, key.kind)):
            continue
        got = "null" if value is None else type(value).__name__
        found.append(rule.violation(
            key.name, value, f"{_TYPE_NAMES[key.kind]}{' or null' if key.optional else ''}, got {got}",
            (_override(key.name, estimator.recipe_value(key.name, key.fallback), config),),
            "verl-rfpp's rules and verl's trainer read this value as "
            f"{_TYPE_NAMES[key.kind]} (docs/contract.md section 6.2.9).",
        ))
    return found


def _rollout_n(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, f"{AR}.rollout.n", lambda n: n is not None and n > 1,
                        "> 1 (the recipe uses 8)")


def _loss_agg_mode(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, f"{ACTOR}.loss_agg_mode", lambda mode: mode == RESPONSE_MEAN,
                        f"'{RESPONSE_MEAN}' (response mean)")


def _loss_mode(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, f"{ACTOR}.policy_loss.loss_mode", lambda mode: mode == POLICY_LOSS_MODE,
                        f"'{POLICY_LOSS_MODE}' (the plain clipped surrogate)")


def reads(key: str) -> bool:
    """Whether the verdict could read ``key`` or anything under or above it: a key of a rule or a
    warning (``typed_keys``), ``algorithm.adv_estimator``, a sequence-splitting key by name under
    ``ENGINE_ROLES``, a key of Hydra's or a config group (``/``, ``@``)."""
    key = key.lstrip("+")
    if key.startswith(("~", "hydra.")) or key == "hydra" or "/" in key or "@" in key:
        return True
    fixed = {"algorithm.adv_estimator", *typed_keys()}
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


def _sequence_parallel(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
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


def _trainer_mode(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    found = []
    if rule.value(config, "async_training") is not None:
        found.append(rule.violation("async_training", "<present>", "absent (synchronous training)",
                                    ("~async_training",)))
    if rule.value(config, "trainer.use_v1"):
        key = "trainer.v1.trainer_mode"
        found += rule.require(config, estimator, key, lambda mode: mode == "sync", "'sync'")
        if rule.value(config, key) == "sync":
            found += rule.require(config, estimator, "trainer.v1.sync.parameter_sync_step", lambda step: step == 1,
                                  "1")
    return found


def _rollout_correction(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """Both estimators: verl's rollout correction may reweight the loss (``rollout_is``) but
    nothing may rewrite the mask or replace the loss and its old log-probabilities."""
    return rule.require(
        config, estimator, "algorithm.rollout_correction.rollout_rs", lambda rs: rs is None, "null",
        why="rejection sampling rewrites response_mask after the rewards (and REINFORCE++'s KL shaping) "
        "are fixed and before the estimator runs: a rejected last token drops the outcome reward R_i "
        "from every return and advantage of the response (docs/contract.md section 6.2.8).",
    ) + rule.require(
        config, estimator, "algorithm.rollout_correction.bypass_mode", lambda on: not on, "False",
        why="bypass mode uses the rollout engine's log-probabilities as the old policy (the ratio and "
        "REINFORCE++'s k1 shaping) and, in the legacy trainer, replaces the rfpp loss with verl's "
        "bypass_mode loss (docs/contract.md section 6.2.8).",
    )


def _coefficient(config: DictConfig, key: str, estimator: Estimator, target: str) -> Any:
    """The user's KL coefficient at ``key``, carried to ``target`` when a fix moves the KL; the
    recipe's when it is no usable coefficient (6.2.11 refuses it)."""
    value = _get(config, key)
    return value if _valid_coefficient(value) else estimator.recipe_value(target, KL_COEF_FALLBACK)


def _valid_coefficient(value: Any) -> bool:
    return _has_type(value, float) and math.isfinite(value) and value >= 0


def _kl_reward(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.6: k1 shaping in the reward with a fixed coefficient, no KL loss. A KL loss the user
    turned on is moved into the reward with its coefficient, never dropped."""
    found: list[Violation] = []
    kl_in_reward = rule.value(config, "algorithm.use_kl_in_reward")
    if rule.value(config, f"{ACTOR}.use_kl_loss"):
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
        why="the returns are KL-to-go of the k1 estimator (docs/contract.md section 2).",
    )
    found += rule.require(
        config, estimator, "algorithm.kl_ctrl.type", lambda controller: controller == "fixed", "'fixed'",
        why="an adaptive coefficient changes beta during training (docs/contract.md section 2).",
    )
    return found


def _kl_loss(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.7: no KL in the reward; a KL loss, when on, is k2. KL in the reward the user turned on
    becomes the k2 loss with its coefficient, never dropped."""
    found: list[Violation] = []
    kl_loss = rule.value(config, f"{ACTOR}.use_kl_loss")
    if rule.value(config, "algorithm.use_kl_in_reward"):
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
            "'k2' (0.5 * (logp - logp_ref)^2; 'mse', 'k2+', 'mse+' are the same value and gradient)",
            why="only k2 has the value and the reverse-KL gradient the method defines "
            "(docs/contract.md section 3).",
        )
    return found


def _gamma(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, "algorithm.gamma", lambda gamma: gamma is None or 0.0 <= gamma <= 1.0,
                        "within [0, 1]")


def _kl_coefficient(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.11: the coefficient of the KL in use (the returns family's reward shaping, the group
    family's loss) is a finite number >= 0; 0 is legal (a WARNING, section 6.4)."""
    key, on = kl_in_use_keys(estimator.family)
    if not _get(config, on, False):
        return []
    return rule.require(config, estimator, key, _valid_coefficient, "a finite number >= 0")


def kl_in_use_keys(family: Family) -> tuple[str, str]:
    """``(coefficient, switch)``: the keys of the KL a family's method uses (sections 2.1, 3.2)."""
    if family.groups:
        return f"{ACTOR}.kl_loss_coef", f"{ACTOR}.use_kl_loss"
    return "algorithm.kl_ctrl.kl_coef", "algorithm.use_kl_in_reward"


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


def _clip_ratio(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.12: 0 < eps_low < 1 and 0 < eps_high < inf; a bound set by ``clip_ratio`` (both sides
    read it) is reported once."""
    found: list[Violation] = []
    accepts = {"low": lambda eps: 0 < eps < 1, "high": lambda eps: 0 < eps < math.inf}
    required = {"low": "within (0, 1)", "high": "a finite number > 0"}
    for side, (key, value) in clip_ratios(config).items():
        if key not in {v.key for v in found}:
            found += rule.require(config, estimator, key, accepts[side], required[side])
    return found


_ASYNC_WHY = ("asynchronous or off-policy trainers normalize over part of a step or mix policy versions; "
              "docs/contract.md section 4 needs one closed synchronous step batch.")

KL_COEF_FALLBACK = 0.01  # the recipes' KL coefficient (section 6.1), for a fix where the recipe sets none
ALL = FAMILIES
USE_KL_IN_REWARD = Key("algorithm.use_kl_in_reward", bool, default=False, fallback=False, required=True)
USE_KL_LOSS = Key(f"{ACTOR}.use_kl_loss", bool, default=False, fallback=False, required=True)

RULES: tuple[Rule, ...] = (
    Rule(
        id="6.2.1",
        families=(GROUP,),
        keys=(Key(f"{AR}.rollout.n", int, default=1, fallback=8, required=True),),
        accepts="greater than 1",
        why="with one sample per prompt every group-centred reward C_i is 0 (docs/contract.md section 3).",
        find=_rollout_n,
    ),
    Rule(
        id="6.2.2",
        families=ALL,
        keys=(Key(f"{ACTOR}.loss_agg_mode", str, fallback=RESPONSE_MEAN, required=True),),
        accepts=f"'{RESPONSE_MEAN}'",
        why="token-level or summed reductions change the objective's denominator (docs/contract.md section 5).",
        find=_loss_agg_mode,
    ),
    Rule(
        id="6.2.3",
        families=ALL,
        keys=(Key(f"{ACTOR}.policy_loss.loss_mode", str, default="vanilla", fallback=POLICY_LOSS_MODE,
                  required=True),),
        accepts=f"'{POLICY_LOSS_MODE}' (section 5.1)",
        why="verl's 'vanilla' adds dual-clip for negative advantages and other modes replace the "
            "clipped surrogate of docs/contract.md section 5.",
        find=_loss_mode,
    ),
    Rule(
        id="6.2.4",
        families=ALL,
        keys=(Key(SEQUENCE_SPLITTING_KEYS, int, optional=True, fallback=1),),
        accepts="1 (False for a dynamic_* switch)",
        why="context / sequence parallelism splits each response across ranks, which the estimator and the "
            "response-mean loss do not support (docs/contract.md section 6.2.4).",
        find=_sequence_parallel,
    ),
    Rule(
        id="6.2.5",
        families=ALL,
        keys=(Key("async_training", dict, optional=True),
              Key("trainer.use_v1", bool, default=False, fallback=True, required=True),
              Key("trainer.v1.trainer_mode", str, default="sync", fallback="sync", required=True),
              Key("trainer.v1.sync.parameter_sync_step", int, default=1, fallback=1)),
        accepts="no async_training block; v1 trainer_mode 'sync' with parameter_sync_step 1",
        why=_ASYNC_WHY,
        find=_trainer_mode,
    ),
    Rule(
        id="6.2.6",
        families=(RETURNS,),
        keys=(USE_KL_IN_REWARD,
              Key("algorithm.kl_penalty", str, default="kl", fallback="kl", required=True),
              Key("algorithm.kl_ctrl.type", str, default="fixed", fallback="fixed", required=True),
              USE_KL_LOSS),
        accepts="KL in the reward: k1 penalty, fixed controller; no KL loss",
        why="REINFORCE++ regularizes with k1 KL shaping in the returns (docs/contract.md section 2).",
        find=_kl_reward,
    ),
    Rule(
        id="6.2.7",
        families=(GROUP,),
        keys=(USE_KL_IN_REWARD, USE_KL_LOSS, Key(f"{ACTOR}.kl_loss_type", str, fallback="k2", required=True)),
        accepts="no KL in the reward; a KL loss, when on, is k2",
        why="REINFORCE++-baseline's KL is the separate k2 loss (docs/contract.md section 3).",
        find=_kl_loss,
    ),
    Rule(
        id="6.2.8",
        families=ALL,
        keys=(Key("algorithm.rollout_correction.rollout_rs", str, optional=True, fallback="null"),
              Key("algorithm.rollout_correction.bypass_mode", bool, default=False, fallback=False)),
        accepts="rollout_rs null, bypass_mode False",
        why="rejection sampling and bypass mode change the estimator's inputs or the loss (docs/contract.md "
            "section 6.2.8).",
        find=_rollout_correction,
    ),
    Rule(
        id="6.2.9",
        families=ALL,
        keys=(),
        accepts="every key of the other rules present, resolving, of the type verl reads",
        why="verl-rfpp's rules and verl's trainer read these keys; without them the rules cannot check the "
            "method and verl fails or falls back to a default (docs/contract.md section 6.2.9).",
        find=_complete,
    ),
    Rule(
        id="6.2.10",
        families=ALL,
        keys=(Key("algorithm.gamma", float, optional=True, fallback=1.0, required=True),),
        accepts="within [0, 1] or null",
        why="gamma discounts the returns; outside [0, 1] they grow with the distance to the end of the "
            "response or flip sign (docs/contract.md section 2).",
        find=_gamma,
    ),
    Rule(
        id="6.2.11",
        families=ALL,
        keys=(Key("algorithm.kl_ctrl.kl_coef", float, fallback=KL_COEF_FALLBACK, required=True, families=(RETURNS,)),
              Key(f"{ACTOR}.kl_loss_coef", float, fallback=KL_COEF_FALLBACK, required=True, families=(GROUP,))),
        accepts="a finite number >= 0 for the KL in use",
        why="a negative coefficient rewards moving away from the reference model and nan or inf makes every "
            "return or loss nan or inf (docs/contract.md sections 2.1 and 3.2).",
        find=_kl_coefficient,
    ),
    Rule(
        id="6.2.12",
        families=ALL,
        keys=(Key(f"{ACTOR}.clip_ratio", float, fallback=0.2, required=True),
              Key(f"{ACTOR}.clip_ratio_low", float, optional=True, fallback=0.2),
              Key(f"{ACTOR}.clip_ratio_high", float, optional=True, fallback=0.2)),
        accepts="0 < eps_low < 1, 0 < eps_high finite",
        why="the ratio rho > 0 is clipped to [1 - eps_low, 1 + eps_high]: eps_low >= 1 removes the lower clip, "
            "a bound <= 0 or not finite clips nothing or everything (docs/contract.md section 5.1).",
        find=_clip_ratio,
    ),
)
WARNING_KEYS = (Key("algorithm.filter_groups.enable", bool, default=False, fallback=False),)
"""The keys only a warning of section 6.4 reads (typed by 6.2.9 like the rules' keys)."""
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
    if not isinstance(name, str) or name in catalog.names():
        return None
    spelt = normalized(name)
    for ours in catalog.names():
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
    return name if name in catalog.names() else None


def record_of(config: Any) -> Optional[Estimator]:
    """The record of our estimator ``algorithm.adv_estimator`` selects (``estimator_of``), else ``None``."""
    name = estimator_of(config)
    return None if name is None else catalog.estimator(name)


def violations(config: DictConfig) -> list[Violation]:
    """Every rule of ``RULES`` the config breaks; empty for other estimators. The rules compare
    values: they see only a complete, well-typed config (6.2.9 first, alone when it fails).
    ``UnreadableConfigError`` when a key a rule reads does not resolve."""
    estimator = record_of(config)
    if estimator is None:
        return []
    incomplete = rule(COMPLETENESS).find(config, estimator, rule(COMPLETENESS))
    if incomplete:
        return incomplete
    return [
        violation
        for r in RULES if r.id != COMPLETENESS and estimator.family in r.families
        for violation in r.find(config, estimator, r)
    ]


def warnings_for(config: DictConfig) -> list[str]:
    """Legal but unusual settings (docs/contract.md section 6.4), each with what it means."""
    estimator = record_of(config)
    if estimator is None:
        return []
    notes = []
    gamma = _get(config, "algorithm.gamma", 1.0)
    if not estimator.family.groups and gamma != 1.0:
        notes.append(
            f"algorithm.gamma = {gamma}: returns are discounted by position, across mask holes "
            "too; the recipe uses 1.0 (docs/contract.md section 2)."
        )
    kl_in_reward = _get(config, "algorithm.use_kl_in_reward", False)
    kl_loss = _get(config, f"{ACTOR}.use_kl_loss", False)
    coefficient, switch = kl_in_use_keys(estimator.family)
    if not kl_in_reward and not kl_loss:
        notes.append(
            "KL regularization is off entirely (no KL in the reward, no KL loss): the policy is "
            "free to drift from the reference model."
        )
    elif _get(config, coefficient) == 0 and _get(config, switch):
        what = "the k2 loss is computed" if estimator.family.groups else "the KL shaping is in place"
        notes.append(f"{coefficient} = 0: {what} but has no effect.")
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


class _Recipes(Mapping):
    """Each estimator's validated recipe by name (section 6.1), read from its record (``catalog``)."""

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return catalog.estimator(name).recipe

    def __iter__(self) -> Iterator[str]:
        return iter(catalog.names())

    def __len__(self) -> int:
        return len(catalog.ESTIMATORS)


RECIPES: Mapping[str, tuple[str, ...]] = _Recipes()

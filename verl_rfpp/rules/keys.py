"""The config keys the rules read, each declared once as a ``Key`` (its name, the type verl reads,
whether null is legal, the value verl uses when it is absent, the value a fix sets), and the config
access they share: a resolved value or ``UnreadableConfigError``, a pasteable override, the walk
for sequence-splitting keys and the interpolations it follows (docs/contract.md section 6).

No rule, warning or verdict spells a key: they read these records (tests/project/test_rule_keys.py
fails on a key string outside a ``Key(...)`` declaration).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl_rfpp.absent import ABSENT
from verl_rfpp.catalog import GROUP, POLICY_LOSS_MODE, RESPONSE_MEAN, RETURNS, Family
from verl_rfpp.errors import RfppError


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

    def read(self, config: DictConfig) -> Any:
        """The resolved value of this key, its ``default`` when absent (``value_of``)."""
        return value_of(config, self.name, self.default)


KL_COEF_FALLBACK = 0.01  # the recipes' KL coefficient (section 6.1), for a fix where the recipe sets none

# What selects the estimator (section 6.3), and the blocks the actor and the reference model are
# built from (their engine configs hold the sequence-splitting keys of 6.2.4).
ADV_ESTIMATOR = Key("algorithm.adv_estimator", str)
ACTOR = Key("actor_rollout_ref.actor", dict)
REF = Key("actor_rollout_ref.ref", dict)

# The rules' keys (section 6.2), in the order of the table.
ROLLOUT_N = Key("actor_rollout_ref.rollout.n", int, default=1, fallback=8, required=True)
LOSS_AGG_MODE = Key("actor_rollout_ref.actor.loss_agg_mode", str, fallback=RESPONSE_MEAN, required=True)
LOSS_MODE = Key("actor_rollout_ref.actor.policy_loss.loss_mode", str, default="vanilla", fallback=POLICY_LOSS_MODE,
                required=True)
SEQUENCE_SPLITTING = Key("actor_rollout_ref.{actor,ref}.**.<sequence-splitting key>", int, optional=True, fallback=1)
ASYNC_TRAINING = Key("async_training", dict, optional=True)
USE_V1 = Key("trainer.use_v1", bool, default=False, fallback=True, required=True)
TRAINER_MODE = Key("trainer.v1.trainer_mode", str, default="sync", fallback="sync", required=True)
PARAMETER_SYNC_STEP = Key("trainer.v1.sync.parameter_sync_step", int, default=1, fallback=1)
USE_KL_IN_REWARD = Key("algorithm.use_kl_in_reward", bool, default=False, fallback=False, required=True)
KL_PENALTY = Key("algorithm.kl_penalty", str, default="kl", fallback="kl", required=True)
KL_CTRL_TYPE = Key("algorithm.kl_ctrl.type", str, default="fixed", fallback="fixed", required=True)
USE_KL_LOSS = Key("actor_rollout_ref.actor.use_kl_loss", bool, default=False, fallback=False, required=True)
KL_LOSS_TYPE = Key("actor_rollout_ref.actor.kl_loss_type", str, fallback="k2", required=True)
ROLLOUT_RS = Key("algorithm.rollout_correction.rollout_rs", str, optional=True, fallback="null")
BYPASS_MODE = Key("algorithm.rollout_correction.bypass_mode", bool, default=False, fallback=False)
GAMMA = Key("algorithm.gamma", float, optional=True, fallback=1.0, required=True)
KL_COEF = Key("algorithm.kl_ctrl.kl_coef", float, fallback=KL_COEF_FALLBACK, required=True, families=(RETURNS,))
KL_LOSS_COEF = Key("actor_rollout_ref.actor.kl_loss_coef", float, fallback=KL_COEF_FALLBACK, required=True,
                   families=(GROUP,))
CLIP_RATIO = Key("actor_rollout_ref.actor.clip_ratio", float, fallback=0.2, required=True)
CLIP_RATIO_LOW = Key("actor_rollout_ref.actor.clip_ratio_low", float, optional=True, fallback=0.2)
CLIP_RATIO_HIGH = Key("actor_rollout_ref.actor.clip_ratio_high", float, optional=True, fallback=0.2)

# The key only a warning of section 6.4 reads.
FILTER_GROUPS = Key("algorithm.filter_groups.enable", bool, default=False, fallback=False)

# The engine configs the actor and the reference model are built from (``actor.engine`` is
# ``fsdp_config``, ``megatron``, ``torchtitan`` or ``veomni``, chosen by ``model_engine``).
ENGINE_ROLES = (ACTOR.name, REF.name)

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

# Typed rule keys that verl 0.9.1's packaged ppo_trainer config does not have: only a
# ``+key=...`` override adds them, so their fix is ``++key=...`` (add or override), which works
# both appended to the offending command and in place of the offending override. Fixes of keys
# absent from the config (sequence-splitting keys of another engine, removed keys) are ``++``
# for the same reason.
ADDED_KEYS = frozenset({PARAMETER_SYNC_STEP.name})

TYPE_NAMES = {int: "an integer", bool: "a boolean (True or False)", float: "a number", str: "a string",
              dict: "a block of keys"}


class UnreadableConfigError(RfppError):
    """A key the rules read cannot be read: an interpolation that does not resolve, or ``???``."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        self.fix = f"give {key} a value that resolves (set what its interpolation reads, or override {key}=<value>)"
        super().__init__(
            f"verl_rfpp cannot read {key}, which docs/contract.md section 6 checks: {reason}. Fix: {self.fix}."
        )


def _reason(error: Exception) -> str:
    return " ".join(str(error).split("\n", 1)[0].split()) or type(error).__name__


def value_of(config: DictConfig, name: str, default: Any = None) -> Any:
    """The resolved value at key ``name`` (``default`` if absent); ``UnreadableConfigError`` when it
    does not resolve or is ``???``."""
    try:
        return OmegaConf.select(config, name, default=default, throw_on_missing=True)
    except OmegaConfBaseException as error:
        raise UnreadableConfigError(name, _reason(error)) from error


def override(name: str, value: Any, config: DictConfig) -> str:
    """The command-line override that sets key ``name`` to ``value``, pasteable after any command:
    ``++`` for a key verl's config lacks or ``config`` does not have."""
    present = OmegaConf.select(config, name, default=ABSENT) is not ABSENT
    return f"{'' if present and name not in ADDED_KEYS else '++'}{name}={value}"


def has_type(value: Any, kind: type) -> bool:
    """Whether ``value`` is of the type ``kind`` as verl reads it (a bool is no number)."""
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is dict:
        return isinstance(value, (dict, DictConfig))
    return isinstance(value, kind)


def sequence_splitting_keys(config: DictConfig) -> list[str]:
    """Every key under ``ENGINE_ROLES`` whose name matches ``SEQUENCE_SPLITTING_KEY``, including
    keys inside containers reached through an interpolation; other values are never resolved."""
    found: list[str] = []
    for root in ENGINE_ROLES:
        node = value_of(config, root)
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


def copied_from(config: DictConfig, key: str) -> Optional[str]:
    """The key whose value ``key`` copies (verl's ref ``${oc.select:<actor key>,1}``), else ``None``."""
    parent, name = key.rsplit(".", 1)
    node = OmegaConf.select(config, parent)
    if not OmegaConf.is_interpolation(node, name):
        return None
    match = _COPY.match(str(node._get_node(name)._value()))
    return match.group(1) if match else None

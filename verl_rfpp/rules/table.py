"""The rules of docs/contract.md section 6.2, one table, ``RULES``: each ``Rule`` has its contract
id (6.2.x), the estimator families it applies to, the keys it reads (``verl_rfpp.rules.keys``),
what it accepts, why, and the function that finds its violations. The type check (6.2.9), the keys
``check`` reads and docs/contract.md's 6.2 tables derive from them (the tables are held equal by a
test). A find function reads only its rule's keys, through the rule (``Rule.value``,
``Rule.require``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from omegaconf import DictConfig

from verl_rfpp.absent import ABSENT
from verl_rfpp.catalog import FAMILIES, GROUP, POLICY_LOSS_MODE, RESPONSE_MEAN, RETURNS, Estimator, Family
from verl_rfpp.rules.keys import (
    ASYNC_TRAINING,
    BYPASS_MODE,
    CLIP_RATIO,
    CLIP_RATIO_HIGH,
    CLIP_RATIO_LOW,
    FILTER_GROUPS,
    GAMMA,
    KL_COEF,
    KL_COEF_FALLBACK,
    KL_CTRL_TYPE,
    KL_LOSS_COEF,
    KL_LOSS_TYPE,
    KL_PENALTY,
    LOSS_AGG_MODE,
    LOSS_MODE,
    PARAMETER_SYNC_STEP,
    ROLLOUT_N,
    ROLLOUT_RS,
    SEQUENCE_SPLITTING,
    TRAINER_MODE,
    TYPE_NAMES,
    USE_KL_IN_REWARD,
    USE_KL_LOSS,
    USE_V1,
    Key,
    copied_from,
    has_type,
    override,
    sequence_splitting_keys,
    value_of,
)
from verl_rfpp.rules.violation import Violation

# verl 0.9.1's ``core_algos.kl_penalty(logprob, ref_logprob, name)``: a trailing ``+`` keeps the
# forward value of ``name`` and takes the gradient of k2 (``b - b.detach() + f.detach()`` with
# ``b = 0.5 * (logprob - ref_logprob)^2``); ``k2+`` / ``mse+`` return k2's value unchanged.
# REINFORCE++'s reward shaping uses only the value (rewards carry no gradient): the k1 names and
# their ``+`` forms give the same rewards. The baseline's KL loss needs k2's value and gradient:
# the k2 names and their ``+`` forms give both exactly.
K1_NAMES = ("kl", "k1", "kl+", "k1+")
K2_NAMES = ("k2", "mse", "k2+", "mse+")


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

    def _own(self, key: Key) -> Key:
        if key not in self.keys:
            raise ValueError(f"rule {self.id} reads {key.name}, which is not one of its keys")
        return key

    def value(self, config: DictConfig, key: Key) -> Any:
        """The value of this rule's ``key`` (its ``default`` when absent)."""
        return self._own(key).read(config)

    def violation(self, key: str, found: Any, required: str, fixes: tuple[str, ...], why: str = "") -> Violation:
        return Violation(self.id, key, found, required, why or self.why, fixes)

    def require(self, config: DictConfig, estimator: Estimator, key: Key, accepted: Callable[[Any], bool],
                required: str, why: str = "") -> list[Violation]:
        """The violation of this rule's ``key`` when its value (its default if absent) is not
        ``accepted``; the fix sets the recipe's value, else the key's fallback."""
        value = self.value(config, key)
        if accepted(value):
            return []
        fix = override(key.name, estimator.recipe_value(key.name, key.fallback), config)
        return [self.violation(key.name, value, required, (fix,), why)]


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
        if value_of(config, key.name, ABSENT) is ABSENT
    ]
    for key in typed_keys().values():
        value = value_of(config, key.name, ABSENT)
        if value is ABSENT or (value is None and key.optional) or (value is not None and has_type(value, key.kind)):
            continue
        got = "null" if value is None else type(value).__name__
        found.append(rule.violation(
            key.name, value, f"{TYPE_NAMES[key.kind]}{' or null' if key.optional else ''}, got {got}",
            (override(key.name, estimator.recipe_value(key.name, key.fallback), config),),
            "verl-rfpp's rules and verl's trainer read this value as "
            f"{TYPE_NAMES[key.kind]} (docs/contract.md section 6.2.9).",
        ))
    return found


def _rollout_n(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, ROLLOUT_N, lambda n: n is not None and n > 1,
                        "> 1 (the recipe uses 8)")


def _loss_agg_mode(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, LOSS_AGG_MODE, lambda mode: mode == RESPONSE_MEAN,
                        f"'{RESPONSE_MEAN}' (response mean)")


def _loss_mode(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, LOSS_MODE, lambda mode: mode == POLICY_LOSS_MODE,
                        f"'{POLICY_LOSS_MODE}' (the plain clipped surrogate)")


def _sequence_parallel(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.4; a reference key that copies a reported actor key is that one setting, reported once."""
    found: list[Violation] = []
    for key in sequence_splitting_keys(config):
        value = value_of(config, key)
        switch = key.rsplit(".", 1)[-1].startswith("dynamic_")
        accepted = value is None or (value is False if switch else has_type(value, int) and value == 1)
        if not accepted and copied_from(config, key) not in {v.key for v in found}:
            wanted = "False" if switch else "1"
            found.append(rule.violation(key, value, wanted, (f"++{key}={wanted}",)))
    return found


def _trainer_mode(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    found = []
    if rule.value(config, ASYNC_TRAINING) is not None:
        found.append(rule.violation(ASYNC_TRAINING.name, "<present>", "absent (synchronous training)",
                                    (f"~{ASYNC_TRAINING.name}",)))
    if rule.value(config, USE_V1):
        found += rule.require(config, estimator, TRAINER_MODE, lambda mode: mode == "sync", "'sync'")
        if rule.value(config, TRAINER_MODE) == "sync":
            found += rule.require(config, estimator, PARAMETER_SYNC_STEP, lambda step: step == 1, "1")
    return found


def _rollout_correction(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """Both estimators: verl's rollout correction may reweight the loss (``rollout_is``) but
    nothing may rewrite the mask or replace the loss and its old log-probabilities."""
    return rule.require(
        config, estimator, ROLLOUT_RS, lambda rs: rs is None, "null",
        why="rejection sampling rewrites response_mask after the rewards (and REINFORCE++'s KL shaping) "
        "are fixed and before the estimator runs: a rejected last token drops the outcome reward R_i "
        "from every return and advantage of the response (docs/contract.md section 6.2.8).",
    ) + rule.require(
        config, estimator, BYPASS_MODE, lambda on: not on, "False",
        why="bypass mode uses the rollout engine's log-probabilities as the old policy (the ratio and "
        "REINFORCE++'s k1 shaping) and, in the legacy trainer, replaces the rfpp loss with verl's "
        "bypass_mode loss (docs/contract.md section 6.2.8).",
    )


def _coefficient(config: DictConfig, key: Key, estimator: Estimator, target: Key) -> Any:
    """The user's KL coefficient at ``key``, carried to ``target`` when a fix moves the KL; the
    recipe's when it is no usable coefficient (6.2.11 refuses it)."""
    value = value_of(config, key.name)
    return value if valid_coefficient(value) else estimator.recipe_value(target.name, KL_COEF_FALLBACK)


def valid_coefficient(value: Any) -> bool:
    """Whether ``value`` is a usable KL coefficient: a finite number >= 0 (6.2.11)."""
    return has_type(value, float) and math.isfinite(value) and value >= 0


def _kl_reward(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.6: k1 shaping in the reward with a fixed coefficient, no KL loss. A KL loss the user
    turned on is moved into the reward with its coefficient, never dropped."""
    found: list[Violation] = []
    kl_in_reward = rule.value(config, USE_KL_IN_REWARD)
    if rule.value(config, USE_KL_LOSS):
        fixes = [f"{USE_KL_LOSS.name}=False"]
        if not kl_in_reward:
            coef = _coefficient(config, KL_LOSS_COEF, estimator, KL_COEF)
            fixes += [f"{USE_KL_IN_REWARD.name}=True", f"{KL_PENALTY.name}=kl", f"{KL_CTRL_TYPE.name}=fixed",
                      f"{KL_COEF.name}={coef}"]
        found.append(rule.violation(
            USE_KL_LOSS.name, True, "False (REINFORCE++'s KL is k1 shaping in the reward)", tuple(fixes),
            "REINFORCE++ puts the k1 KL inside the returns; a KL loss would change the method, or count "
            "the KL twice (docs/contract.md section 2).",
        ))
    if not kl_in_reward:
        return found
    found += rule.require(
        config, estimator, KL_PENALTY, lambda penalty: penalty in K1_NAMES,
        "'kl' (k1, the signed estimator d = logp_old - logp_ref; 'k1', 'kl+', 'k1+' give the same rewards)",
        why="the returns are KL-to-go of the k1 estimator (docs/contract.md section 2).",
    )
    found += rule.require(
        config, estimator, KL_CTRL_TYPE, lambda controller: controller == "fixed", "'fixed'",
        why="an adaptive coefficient changes beta during training (docs/contract.md section 2).",
    )
    return found


def _kl_loss(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.7: no KL in the reward; a KL loss, when on, is k2. KL in the reward the user turned on
    becomes the k2 loss with its coefficient, never dropped."""
    found: list[Violation] = []
    kl_loss = rule.value(config, USE_KL_LOSS)
    if rule.value(config, USE_KL_IN_REWARD):
        fixes = [f"{USE_KL_IN_REWARD.name}=False"]
        if not kl_loss:
            coef = _coefficient(config, KL_COEF, estimator, KL_LOSS_COEF)
            fixes += [f"{USE_KL_LOSS.name}=True", f"{KL_LOSS_TYPE.name}=k2", f"{KL_LOSS_COEF.name}={coef}"]
        found.append(rule.violation(
            USE_KL_IN_REWARD.name, True, "False (the baseline's KL is the k2 loss)", tuple(fixes),
            "REINFORCE++-baseline keeps KL out of the advantage; it is the separate k2 loss "
            "(docs/contract.md section 3).",
        ))
    if kl_loss:
        found += rule.require(
            config, estimator, KL_LOSS_TYPE, lambda kind: kind in K2_NAMES,
            "'k2' (0.5 * (logp - logp_ref)^2; 'mse', 'k2+', 'mse+' are the same value and gradient)",
            why="only k2 has the value and the reverse-KL gradient the method defines "
            "(docs/contract.md section 3).",
        )
    return found


def _gamma(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    return rule.require(config, estimator, GAMMA, lambda gamma: gamma is None or 0.0 <= gamma <= 1.0,
                        "within [0, 1]")


def _kl_coefficient(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.11: the coefficient of the KL in use (the returns family's reward shaping, the group
    family's loss) is a finite number >= 0; 0 is legal (a WARNING, section 6.4)."""
    key, on = kl_in_use_keys(estimator.family)
    if not value_of(config, on.name, False):
        return []
    return rule.require(config, estimator, key, valid_coefficient, "a finite number >= 0")


def kl_in_use_keys(family: Family) -> tuple[Key, Key]:
    """``(coefficient, switch)``: the keys of the KL a family's method uses (sections 2.1, 3.2)."""
    if family.groups:
        return KL_LOSS_COEF, USE_KL_LOSS
    return KL_COEF, USE_KL_IN_REWARD


def clip_ratios(config: DictConfig) -> dict[str, tuple[Key, Any]]:
    """The clip ranges the rfpp loss uses, as verl reads them (``core_algos.compute_policy_loss``,
    ``adapter/actor_loss``): ``low``/``high`` -> (the key that sets it, its value);
    ``clip_ratio_low``/``_high`` when not null, else ``clip_ratio``."""
    ranges = {}
    for side, key in (("low", CLIP_RATIO_LOW), ("high", CLIP_RATIO_HIGH)):
        value = value_of(config, key.name)
        if value is None:
            key = CLIP_RATIO
            value = value_of(config, key.name)
        ranges[side] = (key, value)
    return ranges


def _clip_ratio(config: DictConfig, estimator: Estimator, rule: Rule) -> list[Violation]:
    """6.2.12: 0 < eps_low < 1 and 0 < eps_high < inf; a bound set by ``clip_ratio`` (both sides
    read it) is reported once."""
    found: list[Violation] = []
    accepts = {"low": lambda eps: 0 < eps < 1, "high": lambda eps: 0 < eps < math.inf}
    required = {"low": "within (0, 1)", "high": "a finite number > 0"}
    for side, (key, value) in clip_ratios(config).items():
        if key.name not in {v.key for v in found}:
            found += rule.require(config, estimator, key, accepts[side], required[side])
    return found


_ASYNC_WHY = ("asynchronous or off-policy trainers normalize over part of a step or mix policy versions; "
              "docs/contract.md section 4 needs one closed synchronous step batch.")

ALL = FAMILIES

RULES: tuple[Rule, ...] = (
    Rule(
        id="6.2.1",
        families=(GROUP,),
        keys=(ROLLOUT_N,),
        accepts="greater than 1",
        why="with one sample per prompt every group-centred reward C_i is 0 (docs/contract.md section 3).",
        find=_rollout_n,
    ),
    Rule(
        id="6.2.2",
        families=ALL,
        keys=(LOSS_AGG_MODE,),
        accepts=f"'{RESPONSE_MEAN}'",
        why="token-level or summed reductions change the objective's denominator (docs/contract.md section 5).",
        find=_loss_agg_mode,
    ),
    Rule(
        id="6.2.3",
        families=ALL,
        keys=(LOSS_MODE,),
        accepts=f"'{POLICY_LOSS_MODE}' (section 5.1)",
        why="verl's 'vanilla' adds dual-clip for negative advantages and other modes replace the "
            "clipped surrogate of docs/contract.md section 5.",
        find=_loss_mode,
    ),
    Rule(
        id="6.2.4",
        families=ALL,
        keys=(SEQUENCE_SPLITTING,),
        accepts="1 (False for a dynamic_* switch)",
        why="context / sequence parallelism splits each response across ranks, which the estimator and the "
            "response-mean loss do not support (docs/contract.md section 6.2.4).",
        find=_sequence_parallel,
    ),
    Rule(
        id="6.2.5",
        families=ALL,
        keys=(ASYNC_TRAINING, USE_V1, TRAINER_MODE, PARAMETER_SYNC_STEP),
        accepts=f"no {ASYNC_TRAINING.name} block; v1 trainer_mode 'sync' with parameter_sync_step 1",
        why=_ASYNC_WHY,
        find=_trainer_mode,
    ),
    Rule(
        id="6.2.6",
        families=(RETURNS,),
        keys=(USE_KL_IN_REWARD, KL_PENALTY, KL_CTRL_TYPE, USE_KL_LOSS),
        accepts="KL in the reward: k1 penalty, fixed controller; no KL loss",
        why="REINFORCE++ regularizes with k1 KL shaping in the returns (docs/contract.md section 2).",
        find=_kl_reward,
    ),
    Rule(
        id="6.2.7",
        families=(GROUP,),
        keys=(USE_KL_IN_REWARD, USE_KL_LOSS, KL_LOSS_TYPE),
        accepts="no KL in the reward; a KL loss, when on, is k2",
        why="REINFORCE++-baseline's KL is the separate k2 loss (docs/contract.md section 3).",
        find=_kl_loss,
    ),
    Rule(
        id="6.2.8",
        families=ALL,
        keys=(ROLLOUT_RS, BYPASS_MODE),
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
        keys=(GAMMA,),
        accepts="within [0, 1] or null",
        why="gamma discounts the returns; outside [0, 1] they grow with the distance to the end of the "
            "response or flip sign (docs/contract.md section 2).",
        find=_gamma,
    ),
    Rule(
        id="6.2.11",
        families=ALL,
        keys=(KL_COEF, KL_LOSS_COEF),
        accepts="a finite number >= 0 for the KL in use",
        why="a negative coefficient rewards moving away from the reference model and nan or inf makes every "
            "return or loss nan or inf (docs/contract.md sections 2.1 and 3.2).",
        find=_kl_coefficient,
    ),
    Rule(
        id="6.2.12",
        families=ALL,
        keys=(CLIP_RATIO, CLIP_RATIO_LOW, CLIP_RATIO_HIGH),
        accepts="0 < eps_low < 1, 0 < eps_high finite",
        why="the ratio rho > 0 is clipped to [1 - eps_low, 1 + eps_high]: eps_low >= 1 removes the lower clip, "
            "a bound <= 0 or not finite clips nothing or everything (docs/contract.md section 5.1).",
        find=_clip_ratio,
    ),
)
WARNING_KEYS = (FILTER_GROUPS,)
"""The keys only a warning of section 6.4 reads (typed by 6.2.9 like the rules' keys)."""
COMPLETENESS = "6.2.9"


def rule(rule_id: str) -> Rule:
    """The rule with contract id ``rule_id``."""
    return next(r for r in RULES if r.id == rule_id)


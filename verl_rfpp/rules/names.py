"""Our estimators' names read off a config (``algorithm.adv_estimator``, section 6.3): which of
ours it selects, and a name that is none of verl's but reads as one of ours (a near miss, refused
as misspelt)."""

from __future__ import annotations

import re
from typing import Any, Optional

from omegaconf import DictConfig

from verl_rfpp import catalog
from verl_rfpp.catalog import Estimator
from verl_rfpp.errors import RfppError
from verl_rfpp.rules.keys import ADV_ESTIMATOR, UnreadableConfigError, value_of
from verl_rfpp.rules.violation import fix_line


class MisspeltEstimatorError(RfppError):
    """``algorithm.adv_estimator`` is not an estimator verl knows but reads as one of ours."""

    def __init__(self, name: Any, meant: str):
        self.name = name
        self.meant = meant
        self.fixes = (f"{ADV_ESTIMATOR.name}={meant}",)
        super().__init__(
            f"{ADV_ESTIMATOR.name}={name} is not an estimator verl knows; did you mean {meant}? "
            "(docs/contract.md section 6.3)\n" + fix_line(list(self.fixes))
        )


def misspelt_estimator(name: Any) -> Optional[MisspeltEstimatorError]:
    """The refusal for an ``adv_estimator`` that reads as one of ours (``near_miss``), else ``None``;
    the caller checks that verl's registry does not hold ``name``."""
    meant = near_miss(name)
    return None if meant is None else MisspeltEstimatorError(name, meant)


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
    name = value_of(config, ADV_ESTIMATOR.name)
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

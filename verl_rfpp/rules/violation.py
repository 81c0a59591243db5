"""A broken rule (``Violation``), the ``Fix:`` line of the overrides that repair a config, and the
refusal that lists every violation (docs/contract.md section 6)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from verl_rfpp.errors import RfppError
from verl_rfpp.rules.keys import ADV_ESTIMATOR


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


class ConfigViolationError(RfppError):
    """A config that would silently change REINFORCE++; the message lists every violation and
    ends with one ``Fix:`` line holding every override that repairs them."""

    def __init__(self, estimator: str, violations: list[Violation]):
        self.estimator = estimator
        self.violations = list(violations)
        self.fixes = fix_overrides(self.violations)
        lines = [
            f"verl_rfpp refuses this config for {ADV_ESTIMATOR.name}={estimator}: "
            f"{len(self.violations)} setting(s) would silently change the method "
            "(docs/contract.md section 6).",
            *(str(violation) for violation in self.violations),
            "The whole validated recipe: verl-rfpp recipe " + estimator,
            fix_line(self.fixes),
        ]
        super().__init__("\n".join(lines))

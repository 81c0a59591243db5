"""Each hook, the verl internals it relies on, and whether it attached (docs/contract.md section 8.5).

A hook patches one verl subsystem when verl first imports its module. Before it patches anything
it checks every internal it relies on (present, of the expected kind, with the expected call
shape); one missing or changed internal and the hook patches nothing and records why, so a newer
verl that moved something is never run half-patched. The activation guard (``registries``) then
refuses our estimators naming each failed internal, and ``verl-rfpp doctor`` shows it as FAIL.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from verl_rfpp.plugin import imports
from verl_rfpp.plugin.state import logger


@dataclass(frozen=True)
class Internal:
    """One verl object a hook relies on: ``module`` and the attribute ``path`` inside it."""

    module: str
    path: str
    parameters: tuple[str, ...] = ()  # the leading parameters of its call shape, in order
    kind: Optional[type] = None  # what it must be an instance of (``dict`` for a registry); else a callable

    @property
    def name(self) -> str:
        return f"{self.module}.{self.path}"

    def problem(self) -> Optional[str]:
        """What is wrong with this internal in the installed verl, or ``None``."""
        try:
            found: Any = sys.modules.get(self.module) or importlib.import_module(self.module)
        except Exception as error:  # noqa: BLE001 (a module verl moved or broke: say which)
            return f"{self.name}: module {self.module} cannot be imported ({type(error).__name__}: {error})"
        for part in self.path.split("."):
            if not hasattr(found, part):
                return f"{self.name} is missing"
            found = getattr(found, part)
        if self.kind is not None and not isinstance(found, self.kind):
            return f"{self.name} is a {type(found).__name__}, not a {self.kind.__name__}"
        if self.kind is None and not callable(found):
            return f"{self.name} is a {type(found).__name__}, not a callable"
        if self.parameters:
            try:
                names = list(inspect.signature(found).parameters)
            except (TypeError, ValueError):
                return f"{self.name} is not a callable with parameters"
            if names[: len(self.parameters)] != list(self.parameters):
                return (f"{self.name} takes ({', '.join(names)}); the plugin relies on "
                        f"({', '.join(self.parameters)}, ...)")
        return None


@dataclass(frozen=True)
class Hook:
    """One patch of one verl subsystem: attached right after verl imports ``module``."""

    name: str  # doctor's label
    module: str
    internals: tuple[Internal, ...]
    attach: Callable[[], None]
    attached: Callable[[], bool]


HOOKS: dict[str, Hook] = {}  # by name, in activation order
FAILURES: dict[str, list[str]] = {}  # hook name -> what was wrong when it tried to attach


def _attach(hook: Hook) -> None:
    """Check every internal of ``hook``; patch only if all are there, else record the problems."""
    problems = [problem for internal in hook.internals if (problem := internal.problem()) is not None]
    if not problems:
        try:
            hook.attach()
        except Exception as error:  # noqa: BLE001 (recorded and logged; verl's import goes on)
            problems = [f"attaching raised {type(error).__name__}: {error}"]
    if problems:
        FAILURES[hook.name] = problems
        logger.error("verl_rfpp could not attach its %s (%s); runs with our estimators are refused. "
                     "Run `verl-rfpp doctor`.", hook.name, "; ".join(problems))
    else:
        FAILURES.pop(hook.name, None)


def install(hook: Hook) -> None:
    """Attach ``hook`` now if its verl module is loaded, else right after verl first imports it."""
    HOOKS[hook.name] = hook
    imports.after_import(hook.module, lambda module: _attach(hook))


def uninstall_all() -> None:
    """Forget every hook and failure (``deactivate``; the patches themselves are undone there)."""
    for hook in HOOKS.values():
        imports.cancel(hook.module)
    HOOKS.clear()
    FAILURES.clear()


def attach_pending() -> None:
    """Import each verl module a hook still waits for (its hook attaches or fails right then)."""
    for module in sorted({hook.module for hook in HOOKS.values()} & imports.pending_imports()):
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 (the hooks of a module that cannot be imported fail)
            for hook in HOOKS.values():
                if hook.module == module:
                    FAILURES[hook.name] = [f"module {module} cannot be imported ({type(error).__name__}: {error})"]
                    logger.error("verl_rfpp could not attach its %s (%s); runs with our estimators are "
                                 "refused. Run `verl-rfpp doctor`.", hook.name, FAILURES[hook.name][0])


def problem() -> Optional[str]:
    """Why the plugin cannot be active in this verl (every hook that failed to attach, with the
    internals it misses), or ``None``. A hook undone or replaced later is the registry guard's
    and doctor's business, not this one's."""
    attach_pending()
    failed = dict(FAILURES)
    if not failed:
        return None
    from verl_rfpp.plugin.versions import TESTED_VERL, verl_version

    details = "; ".join(f"{name}: {', '.join(problems)}" for name, problems in failed.items())
    return (f"verl {verl_version()} lacks what verl-rfpp relies on, so none of its runs start "
            f"({details}). Fix: use a tested verl ({', '.join(TESTED_VERL)}) or a verl-rfpp release "
            "that supports this verl")

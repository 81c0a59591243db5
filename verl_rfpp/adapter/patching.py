"""The record type of every change verl-rfpp makes to verl, and the loops over a table of them
(docs/contract.md section 8.5). Imports nothing of verl: ``verl_rfpp.adapter.table`` holds the
plugin's table, ``verl_rfpp.cpu.patches`` the CPU backend's.

A ``Patch`` puts ``replace(verl's object)`` into one slot of one verl module: an attribute (a
function, a method of a class) or an entry of a registry dict, and rebinds the modules that bound
the name with ``from module import name``. Before it changes anything it checks every verl
internal it relies on (present, of the expected kind, with the expected leading parameters): one
missing or changed and it changes nothing and records why, so a verl that moved something is never
run half-patched. ``undo`` puts verl's objects back, bindings included. The post-import finder (a
patch of ``sys.meta_path``) lets a patch wait for verl's own first import of its module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import inspect
import logging
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from verl_rfpp.absent import ABSENT  # what a slot holds when it holds nothing (a registry key verl lacks)

logger = logging.getLogger("verl_rfpp")

MARKER = "__verl_rfpp__"


def marked(replacement: Any) -> Any:
    """Mark ``replacement`` as ours (see ``is_ours``) and return it."""
    setattr(replacement, MARKER, True)
    return replacement


def is_ours(obj: Any) -> bool:
    """Whether ``obj`` is one of verl-rfpp's replacements."""
    return bool(getattr(obj, MARKER, False))


def _resolve(owner: Any, path: str) -> Any:
    for part in path.split("."):
        owner = getattr(owner, part)
    return owner


def _import_problem(module: str, error: BaseException) -> tuple[str, bool]:
    """``(text, moved)``: why ``module`` cannot be imported, and whether that is verl's own doing
    (a verl module missing or broken) rather than a third-party package this environment lacks."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    moved = missing is None or missing.split(".")[0] == "verl"
    return f"module {module} cannot be imported ({type(error).__name__}: {error})", moved


@dataclass(frozen=True)
class Internal:
    """One verl object a patch relies on: ``module`` and the attribute ``path`` inside it."""

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
            return f"{self.name}: {_import_problem(self.module, error)[0]}"
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
                return (f"{self.name} takes ({', '.join(names)}); verl-rfpp relies on "
                        f"({', '.join(self.parameters)}, ...)")
        return None


# Slots: where in its module a patch puts its object. ``get`` gives ``ABSENT`` for an empty slot.

@dataclass(frozen=True)
class Attribute:
    """The attribute ``path`` of the module (``name`` or ``Class.name``)."""

    path: str

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    def _owner(self, module: Any) -> Any:
        parent, _, _ = self.path.rpartition(".")
        return _resolve(module, parent) if parent else module

    def get(self, module: Any) -> Any:
        return getattr(self._owner(module), self.name, ABSENT)

    def set(self, module: Any, value: Any) -> None:
        setattr(self._owner(module), self.name, value)

    def clear(self, module: Any) -> None:
        delattr(self._owner(module), self.name)

    def describe(self, module: str) -> str:
        return f"{module}.{self.path}"


@dataclass(frozen=True)
class Entry:
    """The entry ``key`` of the dict at attribute ``registry`` (read through the module each time:
    verl's own tests rebind its registries)."""

    registry: str
    key: str

    def get(self, module: Any) -> Any:
        return getattr(module, self.registry).get(self.key, ABSENT)

    def set(self, module: Any, value: Any) -> None:
        getattr(module, self.registry)[self.key] = value

    def clear(self, module: Any) -> None:
        getattr(module, self.registry).pop(self.key, None)

    def describe(self, module: str) -> str:
        return f"{module}.{self.registry}[{self.key!r}]"


@dataclass(frozen=True)
class MetaPathEntry:
    """``sys.meta_path`` holding a finder (first, so it sees each import before the others)."""

    def get(self, module: Any) -> Any:
        return next((finder for finder in module.meta_path if isinstance(finder, _AfterImport)), ABSENT)

    def set(self, module: Any, value: Any) -> None:
        module.meta_path.insert(0, value)

    def clear(self, module: Any) -> None:
        module.meta_path.remove(self.get(module))

    def describe(self, module: str) -> str:
        return f"{module}.meta_path"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Applies the patches waiting for a module right after it is first imported: finds the
    module's spec through the other finders and wraps that spec's own loader's ``exec_module`` for
    this one execution."""

    def __init__(self) -> None:
        self.pending: dict[str, dict[str, Patch]] = {}  # module -> the patches waiting for it, by name

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        patches = self.pending.pop(fullname, None)
        if patches is None:
            return None
        spec = next((spec for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec")
                     for spec in [finder.find_spec(fullname, path, target)] if spec is not None), None)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module, before = loader.exec_module, vars(loader).get("exec_module", ABSENT)

        def exec_then_patch(module: Any) -> None:
            if before is ABSENT:  # the loader as it was: nothing of ours stays on it
                del loader.exec_module
            else:
                loader.exec_module = before
            exec_module(module)
            for patch in patches.values():
                patch.apply()  # never raises: a failure is recorded and logged, verl's import goes on

        loader.exec_module = exec_then_patch
        return spec


FINDER = _AfterImport()


@dataclass
class _Applied:
    original: Any  # verl's object in the slot before (``ABSENT``: none)
    ours: Any
    rebound: set[str]  # the modules of ``bound_by`` rebound to ``ours``


_APPLIED: dict[str, _Applied] = {}  # patch name -> what it changed
FAILURES: dict[str, list[str]] = {}  # patch name -> why it changed nothing
UNAVAILABLE: dict[str, str] = {}  # patch name -> why its module cannot be imported in this environment
INSTALLED: dict[str, Patch] = {}  # patch name -> the patch, from its ``install()`` to its ``undo()``


@dataclass(frozen=True, kw_only=True)
class Patch:
    """One change to verl: ``slot`` of ``module`` holds ``replace(verl's object)``; so do the
    modules of ``bound_by`` that hold verl's object under the same name. ``others`` says what the
    change does for a run that is not ours (docs/contract.md section 6.3: nothing)."""

    name: str  # doctor's line
    module: str  # the verl module: patched when it is loaded, or right after verl first imports it
    slot: Any  # ``Attribute``, ``Entry`` or ``MetaPathEntry``
    replace: Callable[[Any], Any]  # verl's object in the slot (``ABSENT`` when empty) -> ours
    internals: tuple[Internal, ...]
    others: str
    bound_by: tuple[str, ...] = ()  # modules that bind the name by ``from module import name``

    @property
    def target(self) -> str:
        return self.slot.describe(self.module)

    def problems(self) -> list[str]:
        """Every internal this patch relies on that is missing or changed."""
        return [problem for internal in self.internals if (problem := internal.problem()) is not None]

    def apply(self) -> None:
        """Patch now (the module must be loaded), if every internal holds; else record why not and
        log it at ERROR. Idempotent; puts ours back where something replaced it."""
        problems = self.problems()
        if not problems:
            try:
                self._apply(sys.modules[self.module])
            except Exception as error:  # noqa: BLE001 (recorded and logged; verl's import goes on)
                problems = [f"patching raised {type(error).__name__}: {error}"]
        if problems:
            FAILURES[self.name] = problems
            logger.error("verl_rfpp could not attach its %s (%s); runs with our estimators are refused. "
                         "Run `verl-rfpp doctor`.", self.name, "; ".join(problems))
        else:
            FAILURES.pop(self.name, None)

    def _apply(self, module: Any) -> None:
        applied = _APPLIED.get(self.name)
        if applied is None:
            original = self.slot.get(module)
            applied = _APPLIED[self.name] = _Applied(original, self.replace(original), set())
        if self.slot.get(module) is not applied.ours:
            self.slot.set(module, applied.ours)
        for binder in self.bound_by:
            bound = sys.modules.get(binder)
            if bound is not None and getattr(bound, self.slot.name, ABSENT) is applied.original:
                setattr(bound, self.slot.name, applied.ours)
                applied.rebound.add(binder)

    def install(self) -> None:
        """Apply now if the module is loaded, else right after verl first imports it (while
        ``FINDER`` is on ``sys.meta_path``)."""
        INSTALLED[self.name] = self
        if self.module in sys.modules:
            self.apply()
        else:
            FINDER.pending.setdefault(self.module, {})[self.name] = self

    def undo(self) -> None:
        """verl's objects again, in the slot and in every module that bound ours by name."""
        FINDER.pending.get(self.module, {}).pop(self.name, None)
        if not FINDER.pending.get(self.module, True):
            del FINDER.pending[self.module]
        INSTALLED.pop(self.name, None)
        FAILURES.pop(self.name, None)
        UNAVAILABLE.pop(self.name, None)
        applied = _APPLIED.pop(self.name, None)
        module = sys.modules.get(self.module)
        if applied is None or module is None:
            return
        for binder in self.bound_by:
            bound = sys.modules.get(binder)
            if bound is not None and getattr(bound, self.slot.name, ABSENT) is applied.ours:
                setattr(bound, self.slot.name, applied.original)
        if self.slot.get(module) is applied.ours:
            if applied.original is ABSENT:
                self.slot.clear(module)
            else:
                self.slot.set(module, applied.original)

    def applied(self) -> bool:
        """Whether the slot, and every loaded module of ``bound_by``, holds ours."""
        applied = _APPLIED.get(self.name)
        module = sys.modules.get(self.module)
        if applied is None or module is None or self.slot.get(module) is not applied.ours:
            return False
        return all(getattr(sys.modules[binder], self.slot.name, ABSENT) is applied.ours
                   for binder in self.bound_by if binder in sys.modules)

    def original(self) -> Any:
        """verl's object this patch replaced (``ABSENT``: the slot was empty); ``KeyError`` if not applied."""
        return _APPLIED[self.name].original


def import_pending(table: tuple[Patch, ...]) -> None:
    """Import each module a patch of ``table`` still waits for: its patch applies or fails right
    then. A module that needs a package this environment lacks (not a verl module) is recorded as
    unavailable: nothing of it runs here, so there is nothing to patch."""
    for module in sorted({patch.module for patch in table} & set(FINDER.pending)):
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 (the patches of a module that cannot be imported)
            text, moved = _import_problem(module, error)
            for patch in table:
                if patch.module == module:
                    FINDER.pending.pop(module, None)
                    if moved:
                        FAILURES[patch.name] = [text]
                        logger.error("verl_rfpp could not attach its %s (%s); runs with our estimators are "
                                     "refused. Run `verl-rfpp doctor`.", patch.name, text)
                    else:
                        UNAVAILABLE[patch.name] = text


def status(table: tuple[Patch, ...]) -> dict[str, bool]:
    """``verl-rfpp doctor``'s lines, after importing every module a patch waits for: each patch
    and whether it is in; a failed one names each internal that is missing or changed; one whose
    module this environment cannot import says so (there is nothing of it to patch)."""
    import_pending(table)
    lines: dict[str, bool] = {}
    for patch in table:
        if patch.name in FAILURES:
            lines[f"{patch.name}: {'; '.join(FAILURES[patch.name])}"] = False
        elif patch.name in UNAVAILABLE:
            lines[f"{patch.name}: not patched, {UNAVAILABLE[patch.name]}: nothing of it runs here"] = True
        else:
            lines[patch.name] = patch.applied()
    return lines


def failures(table: tuple[Patch, ...]) -> dict[str, list[str]]:
    """The patches of ``table`` that could not be applied, after importing every module one waits for."""
    import_pending(table)
    return {patch.name: FAILURES[patch.name] for patch in table if patch.name in FAILURES}


def installed() -> tuple[Patch, ...]:
    """The patches installed in this process and not undone, in the order installed: the plugin's
    table once ``verl_rfpp.plugin`` activated (and the advantage record where a test asks for it)."""
    return tuple(INSTALLED.values())


def lacking(table: tuple[Patch, ...]) -> Optional[str]:
    """Why the plugin cannot be active in this verl (every patch of ``table`` that could not be
    applied, with the internals it misses), or ``None``; first imports every verl module a patch
    waits for, so each has applied or failed. A patch undone or replaced later is the registry
    guard's and doctor's business, not this one's."""
    failed = failures(table)
    if not failed:
        return None
    from verl_rfpp.adapter.versions import TESTED_VERL, verl_version

    details = "; ".join(f"{name}: {', '.join(problems)}" for name, problems in failed.items())
    return (f"verl {verl_version()} lacks what verl-rfpp relies on, so none of its runs start "
            f"({details}). Fix: use a tested verl ({', '.join(TESTED_VERL)}) or a verl-rfpp release "
            "that supports this verl")

"""Post-import hooks: patch a verl module right after verl first imports it.

The plugin never imports ``core_algos`` (the registries pull in transformers and scipy), the
engine or ``Tracking`` itself: about 1 s in each process that imports verl
(benchmarks/bench_import.py). The processes that use them import them anyway.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable, Optional

from verl_rfpp.plugin.state import logger


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a module is first imported. One shot per module; the finder
    leaves ``sys.meta_path`` when nothing is pending. A failing callback is logged at ERROR (verl's
    import goes on; the activation guard in ``validate_config`` then refuses our estimators)."""

    def __init__(self) -> None:
        self.pending: dict[str, list[Callable[[Any], None]]] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        callbacks = self.pending.pop(fullname, None)
        if callbacks is None:
            return None
        if not self.pending:
            remove_finder()
        spec = next((spec for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec")
                     for spec in [finder.find_spec(fullname, path, target)] if spec is not None), None)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            for callback in callbacks:
                _run_callback(callback, module)

        spec.loader.exec_module = exec_then_patch
        return spec


def _finder() -> Optional[_AfterImport]:
    return next((finder for finder in sys.meta_path if isinstance(finder, _AfterImport)), None)


def remove_finder() -> None:
    """Drop every pending hook (nothing pending runs any more)."""
    finder = _finder()
    if finder is not None:
        sys.meta_path.remove(finder)


def _run_callback(callback: Callable[[Any], None], module: Any) -> None:
    try:
        callback(module)
    except Exception:  # noqa: BLE001 (logged loudly; failing verl's import would hide it worse)
        logger.exception("verl_rfpp could not patch %s; run `verl-rfpp doctor`.", module.__name__)


def after_import(name: str, callback: Callable[[Any], None]) -> None:
    """``callback(module)`` now if module ``name`` is loaded, else right after its first import."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    finder = _finder()
    if finder is None:
        finder = _AfterImport()
        sys.meta_path.insert(0, finder)
    finder.pending.setdefault(name, []).append(callback)


def cancel(name: str) -> None:
    """Forget the pending hooks of module ``name``, if any."""
    finder = _finder()
    if finder is not None:
        finder.pending.pop(name, None)


def pending_imports() -> set[str]:
    """Modules whose patch waits for their first import."""
    finder = _finder()
    return set(finder.pending) if finder is not None else set()

"""Run a script or module against a verl with one internal removed or changed (tests/adapter/test_verl_internals.py).

    python verl_breaker.py MODULE:PATH:ACTION[,MODULE:PATH:ACTION...] (--script FILE | --module NAME) [ARGS...]

Right after verl first imports ``MODULE`` (before the plugin's post-import hook sees it), the
attribute ``PATH`` inside it is deleted (``delete``), replaced by a callable of another call shape
(``reshape``: ``(*args, **kwargs)``), or replaced by a plain object (``retype``). ``-`` breaks
nothing (the control). The breaker sits on ``sys.meta_path`` before ``import verl``; the
plugin's own finder, inserted in front of it later, asks it for the module's spec, so verl's code
runs, then the breaker, then the plugin.
"""

from __future__ import annotations

import importlib.abc
import runpy
import sys
from typing import Any


class Breaker(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, path: str, action: str) -> None:
        self.module, self.path, self.action = module, path, action

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.module:
            return None
        sys.meta_path.remove(self)
        spec = next((spec for finder in list(sys.meta_path)
                     if hasattr(finder, "find_spec") and type(finder).__name__ != "_AfterImport"
                     for spec in [finder.find_spec(fullname, path, target)] if spec is not None), None)
        exec_module = spec.loader.exec_module

        def exec_then_break(module: Any) -> None:
            exec_module(module)
            self.breaks(module)

        spec.loader.exec_module = exec_then_break
        return spec

    def breaks(self, module: Any) -> None:
        *parents, last = self.path.split(".")
        owner = module
        for part in parents:
            owner = getattr(owner, part)
        if self.action == "delete":
            delattr(owner, last)
        elif self.action == "reshape":
            setattr(owner, last, lambda *args, **kwargs: None)
        elif self.action == "retype":
            setattr(owner, last, object())
        else:
            raise ValueError(f"unknown action {self.action!r}")


def main() -> None:
    breaks, how, target, *rest = sys.argv[1:]
    for one in breaks.split(",") if breaks != "-" else []:
        sys.meta_path.insert(0, Breaker(*one.split(":")))
    sys.argv = [target, *rest]
    if how == "--script":
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

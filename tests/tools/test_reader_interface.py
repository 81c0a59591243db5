"""The bash reader's modules meet only at public names (docs/layout.md, "verl_rfpp/bash_reader/"):
no file of ``verl_rfpp/bash_reader/`` reads a private name (``_x``, not a dunder) that another file
of the package defines, neither as an attribute (``shell._block``, ``self._set`` of a method
another module's mixin defines, ``words._SPECIAL``) nor by import (``from .words import _x``);
nor does its users' code outside the package (``check SCRIPT``'s module, the benchmarks, tests/support/).
Static (``ast``): a file's own private names are its business. The check itself is tried on a
two-file package written in memory, once with the crossing and once without, so it can fail."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "verl_rfpp" / "bash_reader"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The private names a file defines: its module's own (top-level functions, classes and
    assignments), and its classes' (methods, class-body names, ``self._x = ...`` in a method).
    ``shell._x = ...`` on another object defines nothing: it writes another file's name."""
    module, members = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                module.update(name.id for name in ast.walk(target) if isinstance(name, ast.Name))
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                members.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    members.update(name.id for name in ast.walk(target) if isinstance(name, ast.Name))
        for node in ast.walk(cls):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                members.add(node.attr)
    return {name for name in module if _private(name)}, {name for name in members if _private(name)}


def _used(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """``(name, line, attribute)`` of every private attribute read or written (``obj._x``) and
    every private name imported (``from m import _x``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            found.append((node.attr, node.lineno, True))
        elif isinstance(node, ast.ImportFrom):
            found.extend((alias.name, node.lineno, False) for alias in node.names if _private(alias.name))
    return found


def crossings(sources: dict[str, str]) -> list[str]:
    """``file:line uses _x (defined in other)`` for each private name one file takes from another."""
    trees = {name: ast.parse(text, name) for name, text in sources.items()}
    defined = {name: _defined(tree) for name, tree in trees.items()}
    wrong = []
    for name, tree in trees.items():
        module, members = defined[name]
        for used, line, attribute in _used(tree):
            if used in (members if attribute else module):
                continue  # an attribute of this file's own classes
            owners = sorted(other for other, (names, attrs) in defined.items()
                            if other != name and used in names | attrs)
            if owners:
                wrong.append(f"{name}:{line} uses {used} (defined in {', '.join(owners)})")
    return sorted(wrong)


def test_the_check_finds_a_private_name_taken_across_files():
    shell = "class Shell:\n    def _block(self, nodes):\n        self._depth = 0\n        return self._depth\n"
    crossing = "def run(shell):\n    return shell._block([])\n"
    imported = "from pkg.shell import _helper\n"
    public = "def run(shell):\n    return shell.block([])\n"
    assert crossings({"shell.py": shell, "builtins.py": crossing}) == [
        "builtins.py:2 uses _block (defined in shell.py)"]
    assert crossings({"shell.py": shell + "def _helper():\n    pass\n", "child.py": imported}) == [
        "child.py:1 uses _helper (defined in shell.py)"]
    assert crossings({"shell.py": shell, "builtins.py": public}) == []
    # A function of the same name here does not make another file's attribute ours; writing one is using it.
    same_name = "def _block(shell):\n    shell._depth += 1\n    return shell._block([])\n"
    assert crossings({"shell.py": shell, "builtins.py": same_name}) == [
        "builtins.py:2 uses _depth (defined in shell.py)", "builtins.py:3 uses _block (defined in shell.py)"]
    # A mixin that calls a private method another module's mixin defines crosses too.
    mixin = "class Statements:\n    def _run(self):\n        return self._block([])\n"
    assert crossings({"shell.py": shell, "statements.py": mixin}) == [
        "statements.py:3 uses _block (defined in shell.py)"]


def test_no_module_of_the_reader_uses_another_ones_private_names():
    sources = {path.name: path.read_text() for path in sorted(PACKAGE.glob("*.py"))}
    assert len(sources) > 5
    assert crossings(sources) == []


def test_its_users_outside_the_package_use_only_its_public_names():
    """``check SCRIPT`` (the CLI's scripts module), the benchmarks and the tests' helpers read the
    package from outside: none of them uses a private name one of its files defines."""
    inside = {f"verl_rfpp/bash_reader/{path.name}": path.read_text() for path in sorted(PACKAGE.glob("*.py"))}
    outside = {}
    for folder in ("verl_rfpp", "benchmarks", "tests/support"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name not in inside and "__pycache__" not in path.parts and "bash_reader" in path.read_text():
                outside[name] = path.read_text()
    assert any(name.endswith("scripts.py") for name in outside)
    wrong = [found for found in crossings({**inside, **outside}) if found.split(":")[0] in outside
             and "verl_rfpp/bash_reader/" in found.split(" (defined in ")[1]]
    assert wrong == []

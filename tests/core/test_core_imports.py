"""The numerical core (``verl_rfpp/core/``) and the design card's top-level modules
(``estimators.py``, ``losses.py``, ``validation.py`` with the ``rules/`` package it re-exports, and
the ``catalog.py`` they read) import no verl (docs/layout.md): every import statement of every one
of them, at any depth, names the standard library, torch, numpy, numba, pandas, omegaconf or another
of these verl-free modules (``errors``, ``absent`` too)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "verl_rfpp"
CORE = PACKAGE / "core"
RULES = PACKAGE / "rules"
CARD = ("estimators", "losses", "validation", "catalog")
ALLOWED = {"torch", "numpy", "numba", "pandas", "omegaconf", "__future__"} | set(sys.stdlib_module_names)
OURS = ("verl_rfpp.core", "verl_rfpp.rules", *(f"verl_rfpp.{name}" for name in (*CARD, "errors", "absent")))


def _imported(tree: ast.AST, package: str) -> list[str]:
    """Every module an import statement of ``tree`` names (relative ones resolved in ``package``)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).rstrip(".")
            names += [base] if base not in ("verl_rfpp", "verl_rfpp.core") else [f"{base}.{a.name}" for a in node.names]
    return names


def test_the_core_and_the_cards_modules_import_no_verl():
    modules = [*sorted(CORE.glob("*.py")), *sorted(RULES.glob("*.py")), *(PACKAGE / f"{name}.py" for name in CARD)]
    assert {path.stem for path in modules} >= {"estimators", "normalization", "passes", "kernels", "inputs",
                                                 "groups", "losses", "metrics", "validation", "catalog",
                                                 "keys", "table", "checks", "names"}
    foreign = {}
    for path in modules:
        package = {CORE: "verl_rfpp.core", RULES: "verl_rfpp.rules"}.get(path.parent, "verl_rfpp")
        for name in _imported(ast.parse(path.read_text()), package):
            if not (name.split(".")[0] in ALLOWED or any(name == ours or name.startswith(ours + ".") for ours in OURS)):
                foreign.setdefault(path.name, []).append(name)
    assert foreign == {}

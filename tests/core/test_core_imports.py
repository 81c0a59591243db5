"""The numerical core (``verl_rfpp/core/``) imports no verl (docs/layout.md): every import
statement of every module, at any depth, names the standard library, torch, numpy, numba, pandas,
omegaconf, the core itself or ``verl_rfpp.errors``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "verl_rfpp" / "core"
ALLOWED = {"torch", "numpy", "numba", "pandas", "omegaconf", "__future__"} | set(sys.stdlib_module_names)
OURS = ("verl_rfpp.core", "verl_rfpp.errors")


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


def test_the_core_imports_no_verl():
    modules = sorted(CORE.glob("*.py"))
    assert {path.stem for path in modules} >= {"estimators", "normalization", "passes", "kernels", "inputs",
                                                 "losses", "metrics"}
    foreign = {}
    for path in modules:
        for name in _imported(ast.parse(path.read_text()), "verl_rfpp.core"):
            if not (name.split(".")[0] in ALLOWED or name == OURS[1] or name.startswith(OURS[0] + ".")):
                foreign.setdefault(path.name, []).append(name)
    assert foreign == {}


def test_the_check_sees_an_import_of_verl():
    tree = ast.parse("def f():\n    from verl.trainer.ppo import core_algos\nimport verl_rfpp.plugin\n"
                     "from verl_rfpp import plugin\n")
    assert sorted(_imported(tree, "verl_rfpp.core")) == ["verl.trainer.ppo", "verl_rfpp.plugin", "verl_rfpp.plugin"]

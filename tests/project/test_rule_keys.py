"""Every config key a rule reads is declared once, as a ``Key`` (``verl_rfpp/rules/keys.py``), and
the rules' code reads the records, never spells a key (docs/contract.md section 6; issue 51).
Static (``ast``, nothing imported): in the rules modules (``verl_rfpp/rules/`` and
``verl_rfpp/validation.py``) no string outside a ``Key(...)`` declaration and outside a docstring
holds a dotted name (``algorithm.use_kl_in_reward``; a placeholder stands for each ``{...}`` of an
f-string, so ``f"{ACTOR}.use_kl_loss"`` is one, ``f"{prefix}.{name}"`` none) or the name of a
declared key (``async_training``). Each declared key is read somewhere, and a name is declared once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES_MODULES = sorted((ROOT / "verl_rfpp" / "rules").glob("*.py")) + [ROOT / "verl_rfpp" / "validation.py"]
KEYS_MODULE = ROOT / "verl_rfpp" / "rules" / "keys.py"

# A dotted name: identifiers joined by dots, not part of a path (``docs/contract.md``) or a longer name.
DOTTED = re.compile(r"(?<![\w/.])[^\W\d]\w*(?:\.[^\W\d]\w*)+(?![\w/])")
PLACEHOLDER = "\u03d5"  # stands for an f-string's {...}: a name made of nothing else is built, not spelt


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions, and of the string
    right after an assignment (an attribute's docstring)."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for index, statement in enumerate(body):
            is_string = (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                         and isinstance(statement.value.value, str))
            follows = index == 0 or isinstance(body[index - 1], (ast.Assign, ast.AnnAssign))
            if is_string and follows and not isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                found.add(id(statement.value))
    return found


def _is_key_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Key"


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of every string the code spells outside ``Key(...)`` and docstrings; an
    f-string's text with ``PLACEHOLDER`` for each ``{...}``."""
    skipped = _docstrings(tree)
    found = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_key_call(node) or id(node) in skipped:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(part.value if isinstance(part, ast.Constant) else PLACEHOLDER for part in node.values)
            found.append((node.lineno, text))
            stack.extend(part.value for part in node.values if isinstance(part, ast.FormattedValue))
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
        stack.extend(ast.iter_child_nodes(node))
    return found


def declared_names(source: str) -> list[str]:
    """The first argument of every ``Key(...)`` call with a literal name in ``source``."""
    return [call.args[0].value for call in ast.walk(ast.parse(source))
            if _is_key_call(call) and call.args and isinstance(call.args[0], ast.Constant)]


def spelt_keys(source: str, declared: set[str]) -> list[str]:
    """``line: text`` of every key the code of ``source`` spells: a dotted name, or a declared key's name."""
    single = re.compile(r"(?<![\w.])(?:" + "|".join(map(re.escape, sorted(declared))) + r")(?![\w])")
    return [f"{line}: {text!r}" for line, text in sorted(_strings(ast.parse(source)))
            if any(set(found.split(".")) != {PLACEHOLDER} for found in DOTTED.findall(text)) or single.search(text)]


DECLARED = declared_names(KEYS_MODULE.read_text())


def test_no_rule_spells_a_key():
    spelt = [f"{path.relative_to(ROOT)}:{found}" for path in RULES_MODULES
             for found in spelt_keys(path.read_text(), set(DECLARED))]
    assert spelt == []


def test_keys_are_declared_once_and_only_in_keys_py():
    assert len(DECLARED) > 20
    assert len(DECLARED) == len(set(DECLARED))
    elsewhere = [path.name for path in RULES_MODULES if path != KEYS_MODULE and declared_names(path.read_text())]
    assert elsewhere == []


def test_every_declared_key_is_read():
    """Each ``Key`` constant of keys.py is read by name somewhere in the rules modules."""
    constants = [target.id for statement in ast.parse(KEYS_MODULE.read_text()).body
                 if isinstance(statement, ast.Assign) and _is_key_call(statement.value)
                 for target in statement.targets if isinstance(target, ast.Name)]
    read = {node.id for path in RULES_MODULES for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    assert len(constants) == len(DECLARED)
    assert sorted(set(constants) - read) == []


def test_the_scan_sees_each_way_a_key_is_spelt():
    """What today's rules would look like with the keys spelt (the code of validation.py before the
    keys were declared once): each spelling is found; a declaration, a docstring, a file name and a
    message without a key are not."""
    source = '''
"""Reads ``algorithm.use_kl_in_reward`` (a docstring)."""
ACTOR = f"{AR}.actor"
USE = Key("algorithm.use_kl_in_reward", bool, default=False)


def warnings_for(config):
    """``algorithm.gamma`` (a docstring)."""
    kl_in_reward = _get(config, "algorithm.use_kl_in_reward", False)
    kl_loss = _get(config, f"{ACTOR}.use_kl_loss", False)
    fixes = ["~async_training"]
    why = "the returns are KL-to-go (docs/contract.md section 2); 0.5 * (logp - logp_ref)^2"
    return f"{USE.name} = {kl_in_reward}: see docs/contract.md", f"{prefix}.{name}"
'''
    spelt = spelt_keys(source, {"async_training", "algorithm.use_kl_in_reward"})
    assert [entry.split(":", 1)[0] for entry in spelt] == ["3", "9", "10", "11"], spelt
    assert declared_names(source) == ["algorithm.use_kl_in_reward"]

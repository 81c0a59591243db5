"""docs/layout.md names every module of the package and of the tests' helpers (tests/support/), every
folder of tests, and no module or folder that is gone; test modules have distinct names (pytest
imports each by its name, tests/ on sys.path); every tests/ path the docs, the code and the tests
cite exists (the CHANGELOG's history aside); the contract's sections are numbered in order
(docs/contract.md); tests/e2e/ holds the tests marked ``e2e`` and no other."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Where a tests/ path is cited: everything of ours but the CHANGELOG (history) and verl's own
# example scripts (tests/tools/scripts/verl/, which cite verl's tests).
CITING = sorted(
    path
    for folder in ("verl_rfpp", "tests", "benchmarks", "examples", "docs")
    for pattern in ("*.py", "*.sh", "*.md")
    for path in (ROOT / folder).rglob(pattern)
    if "__pycache__" not in path.parts and not path.is_relative_to(TESTS / "tools" / "scripts")
) + [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / ".ci" / "run"]
TESTS_PATH = re.compile(r"(?<![\w/.])tests/[\w./-]*[\w/]")


def _python_files(folder: Path) -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in folder.rglob("*.py") if "__pycache__" not in path.parts}


def test_layout_lists_every_module():
    text = (ROOT / "docs" / "layout.md").read_text()
    named = set(re.findall(r"`((?:verl_rfpp|tests/support)/[\w/]+\.py)`", text))
    present = _python_files(ROOT / "verl_rfpp") | _python_files(TESTS / "support")
    assert sorted(present - named) == [], "modules docs/layout.md does not list"
    assert sorted(named - present) == [], "modules docs/layout.md lists that do not exist"


def test_layout_lists_every_folder_of_tests():
    text = (ROOT / "docs" / "layout.md").read_text()
    named = set(re.findall(r"`tests/(\w+)/`", text))
    present = {path.name for path in TESTS.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert sorted(present - named) == [], "folders of tests/ docs/layout.md does not list"
    assert sorted(named - present) == [], "folders of tests/ docs/layout.md lists that do not exist"


def test_test_modules_have_distinct_names_and_no_package_above_them():
    """pytest imports ``tests/<folder>/test_x.py`` as ``test_x`` (its folder on sys.path: no
    ``__init__.py`` in tests/ or its test folders), so two modules of one name would clash, and
    conftest's xdist groups are named by module."""
    modules = [path for path in TESTS.rglob("test_*.py") if not path.is_relative_to(TESTS / "tools" / "scripts")]
    assert len(modules) > 40
    assert [name for name, count in Counter(path.name for path in modules).items() if count > 1] == []
    assert not (TESTS / "__init__.py").exists()
    assert sorted({path.parent.name for path in modules if (path.parent / "__init__.py").exists()}) == []
    assert (TESTS / "support" / "__init__.py").exists()


def test_every_cited_tests_path_exists():
    missing = [f"{source.relative_to(ROOT)}: {cited}" for source in CITING
               for cited in TESTS_PATH.findall(source.read_text()) if not (ROOT / cited.rstrip(".")).exists()]
    assert missing == []


def test_the_contract_sections_are_in_order():
    numbers = [tuple(int(part) for part in match.split("."))
               for match in re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", (ROOT / "docs" / "contract.md").read_text(),
                                       flags=re.M)]
    assert len(numbers) > 40
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def _marks_e2e(node: ast.AST) -> bool:
    """Whether an expression is or holds ``pytest.mark.e2e`` (a decorator, a ``pytestmark`` list)."""
    return any(isinstance(part, ast.Attribute) and part.attr == "e2e" and ast.unparse(part.value) == "pytest.mark"
               for part in ast.walk(node))


def _e2e_tests(path: Path) -> dict[str, bool]:
    """Each test of a module (``test_*`` functions, methods of ``Test*`` classes) and whether it is
    marked ``e2e``: by the module's ``pytestmark``, its class's decorators or its own, read
    statically (nothing imported)."""
    module = ast.parse(path.read_text())
    module_marked = any(isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "pytestmark"
                                                             for target in node.targets) and _marks_e2e(node.value)
                        for node in module.body)
    tests = {}
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            marked = module_marked or any(_marks_e2e(decorator) for decorator in node.decorator_list)
            for method in node.body:
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.name.startswith("test"):
                    tests[f"{node.name}.{method.name}"] = marked or any(map(_marks_e2e, method.decorator_list))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            tests[node.name] = module_marked or any(map(_marks_e2e, node.decorator_list))
    return tests


def test_the_e2e_folder_holds_the_e2e_tests_and_no_other():
    """tests/e2e/ is the ``e2e`` marker: every test there is marked ``e2e`` (the two-minute tier,
    ``-m "not slow and not e2e"``, runs none of it), and no module elsewhere uses the marker at all
    (a test, a parameter's ``marks``, a ``pytestmark``)."""
    modules = sorted(path for path in TESTS.rglob("test_*.py") if not path.is_relative_to(TESTS / "tools" / "scripts"))
    inside = [path for path in modules if path.parent == TESTS / "e2e"]
    assert len(inside) >= 5
    unmarked = [f"{path.relative_to(ROOT)}::{name}" for path in inside
                for name, marked in _e2e_tests(path).items() if not marked]
    assert unmarked == [], "tests in tests/e2e/ not marked e2e: move them to the folder of what they test"
    assert all(_e2e_tests(path) for path in inside)
    outside = [str(path.relative_to(ROOT)) for path in modules
               if path.parent != TESTS / "e2e" and _marks_e2e(ast.parse(path.read_text()))]
    assert outside == [], "modules outside tests/e2e/ that mark a test e2e: move the e2e tests to tests/e2e/"


MODULE_LINES = 600  # issue 51: no module over this without a reason in its docstring


def _over_long(paths, root: Path = ROOT) -> list[str]:
    """The Python files of ``paths`` over ``MODULE_LINES`` lines whose docstring gives no reason
    ("over 600 lines on purpose: WHY")."""
    import ast

    long = []
    for path in paths:
        text = path.read_text()
        if text.count("\n") > MODULE_LINES:
            docstring = ast.get_docstring(ast.parse(text)) or ""
            if f"over {MODULE_LINES} lines on purpose:" not in " ".join(docstring.split()):
                long.append(f"{path.relative_to(root)}: {text.count(chr(10))} lines")
    return long


def test_no_module_is_over_600_lines_without_its_reason(tmp_path):
    """The package, the benchmarks and the tests' helpers: a file over 600 lines says why in its
    docstring (today: none of the package's; tests/support/generated.py and benchmarks/faults.py)."""
    files = [*(ROOT / "verl_rfpp").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "tests").rglob("*.py")]
    assert _over_long(files) == []
    assert all(path.read_text().count("\n") <= MODULE_LINES for path in (ROOT / "verl_rfpp").rglob("*.py"))
    planted = tmp_path / "long.py"  # the check can fail: a long file without its reason
    planted.write_text('"""A module."""\n' + "x = 1\n" * MODULE_LINES)
    with_reason = tmp_path / "reason.py"
    with_reason.write_text('"""A module. One file of over 600 lines on purpose: one grammar."""\n' + "x = 1\n" * 601)
    assert [line.split(":")[0] for line in _over_long([planted, with_reason], tmp_path)] == ["long.py"]


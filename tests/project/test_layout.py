"""docs/layout.md names every module of the package and of the tests' helpers (tests/support/), every
folder of tests, and no module or folder that is gone; test modules have distinct names (pytest
imports each by its name, tests/ on sys.path); every tests/ path the docs, the code and the tests
cite exists (the CHANGELOG's history aside); the contract's sections are numbered in order
(docs/contract.md)."""

from __future__ import annotations

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

"""docs/layout.md names every module of the package and no module that is gone; the contract's
sections are numbered in order (docs/contract.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_layout_lists_every_module():
    text = (ROOT / "docs" / "layout.md").read_text()
    named = set(re.findall(r"`(verl_rfpp/[\w/]+\.py)`", text))
    present = {path.relative_to(ROOT).as_posix() for path in (ROOT / "verl_rfpp").rglob("*.py")}
    assert sorted(present - named) == [], "modules docs/layout.md does not list"
    assert sorted(named - present) == [], "modules docs/layout.md lists that do not exist"


def test_the_contract_sections_are_in_order():
    numbers = [tuple(int(part) for part in match.split("."))
               for match in re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", (ROOT / "docs" / "contract.md").read_text(),
                                       flags=re.M)]
    assert len(numbers) > 40
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)

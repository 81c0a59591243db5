"""The documentation is self-contained: every relative link resolves inside the repository, every
cited document exists, every cited contract section exists, and the README's commands hold."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Markdown files a reader of a clone or an sdist follows links in.
MARKDOWN = sorted(
    [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.md")]
)
# Text that messages, docstrings and comments live in.
SOURCES = sorted(
    path
    for folder in ("verl_rfpp", "tests", "benchmarks", "examples", "docs")
    for pattern in ("*.py", "*.sh", "*.md")
    for path in (ROOT / folder).rglob(pattern)
    if "__pycache__" not in path.parts
) + [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml", ROOT / ".ci" / "run"]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# Documents that live outside the repository (the pre-release design notes); never cite them.
FOREIGN = re.compile(r"SPEC" + r"\.md|\.\./" + r"shared|DESIGN" + r"\.md|VERL-0\.9\.1" + r"\.md|\bSPEC [0-9]")
# Our own files (examples/<dir>/... is verl's examples folder, as in its data preparation script).
DOC_PATH = re.compile(r"(?<![\w/.])(docs/[\w./-]+\.(?:md|png|json)|benchmarks/[\w.-]+\.py|examples/[\w.-]+\.(?:md|sh))")
SECTION_CITE = re.compile(r"docs/contract\.md,? (sections?) ((?:\d+(?:\.\d+)*(?:\s*(?:,|-|and)\s*)?)+)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lowercased, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(markdown: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in markdown.read_text().splitlines() if line.startswith("#")}


def broken_links(markdown: Path, root: Path) -> list[str]:
    """Every relative link of ``markdown`` whose target (or #anchor) is missing or outside ``root``."""
    broken = []
    text = re.sub(r"(?ms)^```.*?^```", "", markdown.read_text())  # links in code blocks are code
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (markdown.parent / path_part).resolve() if path_part else markdown.resolve()
        if not resolved.is_relative_to(root.resolve()) or not resolved.exists():
            broken.append(f"{markdown.name}: {target} (no such file in the repository)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{markdown.name}: {target} (no heading #{anchor} in {resolved.name})")
    return broken


def contract_sections(contract: Path) -> set[str]:
    """Section numbers of the contract: headings ``## N.`` / ``### N.M`` and the rule labels N.M.K."""
    text = contract.read_text()
    numbers = set(re.findall(r"(?m)^#{2,4} (\d+(?:\.\d+)*)\.? ", text))
    numbers |= set(re.findall(r"(?m)^\| (\d+\.\d+\.\d+) ", text))
    return numbers


def bad_citations(text: str, sections: set[str], root: Path) -> list[str]:
    """Citations in ``text`` of a foreign document, a missing repository file or a missing section."""
    problems = [f"cites {match.group(0)!r}, which is not in the repository" for match in FOREIGN.finditer(text)]
    problems += [f"cites {path}, which does not exist" for path in DOC_PATH.findall(text) if not (root / path).exists()]
    for match in SECTION_CITE.finditer(text):
        for first, last in re.findall(r"(\d+(?:\.\d+)*)(?:\s*-\s*(\d+))?", match.group(2)):
            cited = [first] if not last else [str(n) for n in range(int(first), int(last) + 1)]
            problems += [f"cites contract section {number}, which does not exist" for number in cited
                         if number not in sections]
    return problems


@pytest.mark.parametrize("markdown", MARKDOWN, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(markdown: Path) -> None:
    assert broken_links(markdown, ROOT) == []


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_citation_of_a_missing_document_or_section(source: Path) -> None:
    text = source.read_text()
    if source == Path(__file__).resolve():
        text = text.split("# --- self-tests", 1)[0]  # not the planted bad citations below
    assert bad_citations(text, contract_sections(ROOT / "docs" / "contract.md"), ROOT) == []


def test_contract_keeps_top_level_sections_1_to_9() -> None:
    numbers = contract_sections(ROOT / "docs" / "contract.md")
    assert {str(n) for n in range(1, 10)} <= numbers


# --- self-tests: the checkers above find what they are meant to find --------------------------


def test_checkers_catch_planted_problems(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "contract.md").write_text("# c\n\n## 1. One\n\n### 1.1 Sub\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/contract.md#11-sub) [gone](docs/missing.md) [out](../elsewhere.md) "
        "[anchor](docs/contract.md#2-two) ![img](docs/x.png) [web](https://example.org)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "README.md: docs/missing.md (no such file in the repository)",
        "README.md: ../elsewhere.md (no such file in the repository)",
        "README.md: docs/contract.md#2-two (no heading #2-two in contract.md)",
        "README.md: docs/x.png (no such file in the repository)",
    ]
    sections = contract_sections(tmp_path / "docs" / "contract.md")
    assert sections == {"1", "1.1"}
    text = "(SPEC" + ".md section 4) ../" + "shared/x docs/gone.md (docs/contract.md sections 1-2, 1.1 and 1.3)"
    assert bad_citations(text, sections, tmp_path) == [
        "cites 'SPEC.md', which is not in the repository",
        "cites '../shared', which is not in the repository",
        "cites docs/gone.md, which does not exist",
        "cites contract section 2, which does not exist",
        "cites contract section 1.3, which does not exist",
    ]


DEMO = 'pip install torch==2.13.0 && pip install -e ".[cpu]" && verl-rfpp demo'
SUITE = 'pip install -e ".[test]" && python -m pytest -q -n 2 tests'
FAST_TIER = 'python -m pytest -q -m "not slow and not e2e" tests'
FIRST_SCREEN = 40  # README lines a reader sees before scrolling (GitHub's page, a terminal)
# A time or a range of numbers: "0.5-0.8 s", "347 s", "about two minutes", "81.6-272.7"
_UNIT = r"\s*(?:ms|s|min|minutes?|seconds?|hours?|h)\b"
TIMING = re.compile(rf"\d+(?:\.\d+)?\s*(?:-|\u2013|to)\s*\d+(?:\.\d+)?(?:{_UNIT})?|\d+(?:\.\d+)?{_UNIT}"
                    rf"|\b(?:one|two|three|four|five|ten|a few)\s+(?:minutes?|seconds?|hours?)\b", re.I)


def _parenthesized(text: str) -> list[str]:
    """The text of every parenthesized span of ``text``, nested ones too (a link inside one)."""
    spans, opened = [], []
    for index, char in enumerate(text):
        if char == "(":
            opened.append(index)
        elif char == ")" and opened:
            spans.append(text[opened.pop() + 1:index])
    return spans


def _timings_in_parentheses(prose: str) -> list[str]:
    return [match.group(0) for span in _parenthesized(" ".join(prose.split())) for match in TIMING.finditer(span)]


def _readme_screen() -> tuple[list[str], str]:
    """The README's first screen: its lines in code blocks (comments dropped) and its prose."""
    code, prose, inside = [], [], False
    for line in (ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN]:
        if line.startswith("```"):
            inside = not inside
        elif inside:
            code.append(line.split("  #", 1)[0].rstrip())
        else:
            prose.append(line)
    return code, "\n".join(prose)


def test_the_readmes_first_screen_is_the_two_commands_then_the_install() -> None:
    """The README starts with the two commands of a fresh machine, the demo and the whole suite (the
    suite's line behind the marker ``.ci/run`` reads), then, still on the first screen (issue 50), the
    install into an existing verl environment (the card's first use: it keeps that environment's
    torch and verl); no other command crowds the first screen."""
    code, prose = _readme_screen()
    assert code == [DEMO, SUITE, "pip install --dry-run .", "pip install .", "verl-rfpp doctor"]
    assert "keeps that environment's torch and verl" in " ".join(prose.split())
    lines = (ROOT / "README.md").read_text().splitlines()
    marker = lines.index("<!-- test-command -->")
    assert marker < FIRST_SCREEN
    assert lines[marker + 1] == "```bash"  # .ci/run takes the second line after the marker
    assert lines[marker + 2] == SUITE


def test_the_readme_gives_one_torch_instruction() -> None:
    """One command installs torch (the demo's, CI's version, .ci/run); every torch version the
    README pins is that one; the existing environment keeps its own (the first test above)."""
    readme = (ROOT / "README.md").read_text()
    (pin,) = set(re.findall(r"install python3 torch==([\d.]+)", (ROOT / ".ci" / "run").read_text()))
    assert f"torch=={pin}" in DEMO
    installs = [command for command in _commands(ROOT / "README.md") if "pip install torch" in command]
    assert installs == [DEMO]
    assert set(re.findall(r"\btorch(?:==| \()(\d[\d.]*\d)", readme)) == {pin}


def test_the_readmes_first_screen_has_no_timings_in_parentheses() -> None:
    """Issue 50: times and ranges live in docs/timings.md, not in asides of the first screen."""
    assert _timings_in_parentheses(_readme_screen()[1]) == []
    planted = "a (0.5-0.8 s, [timings](docs/timings.md)) b (2.13.0, CI's; [x](y#a-b)) c (about two minutes) (3 seeds)"
    assert _timings_in_parentheses(planted) == ["0.5-0.8 s", "two minutes"]


def test_the_readmes_fast_tier_row_installs_the_test_extra_and_ci_runs_it() -> None:
    (row,) = [cells for cells in _readme_table("| tier | command | what |")[1:] if cells[0] == "fast"]
    assert row[1] == f'`pip install -e ".[test]"`, then `{FAST_TIER}`'
    ci = (ROOT / ".ci" / "run").read_text()
    assert '"$python" -m pytest -q -m "not slow and not e2e" tests' in ci  # the tier, on verl 0.9.0
    assert "python3 -m ruff check ." in ci


def _commands(markdown: Path) -> list[str]:
    """The lines of ``markdown``'s code blocks and its inline code spans, comments dropped."""
    text = markdown.read_text()
    blocks = re.findall(r"(?ms)^```[^\n]*\n(.*?)^```", text)
    prose = re.sub(r"(?ms)^```.*?^```", "", text)
    spans = [line for block in blocks for line in block.splitlines()] + re.findall(r"`([^`\n]+)`", prose)
    return [span.split(" #", 1)[0].rstrip() for span in spans]


def test_the_recipe_goes_after_the_users_own_arguments() -> None:
    """Hydra's last value wins: a recipe before the user's overrides would let the script's own
    values undo it. Every command of the docs that expands the recipe ends with it."""
    expansion = re.compile(r"\$\(verl-rfpp recipe [\w+]+\)")
    misplaced = [f"{markdown.name}: {command}" for markdown in MARKDOWN for command in _commands(markdown)
                 if (found := expansion.search(command)) and found.end() != len(command)]
    assert misplaced == []
    assert any(expansion.search(command) for command in _commands(ROOT / "README.md"))


@pytest.mark.slow
def test_readme_one_liner_prints_our_registry_entry(tmp_path: Path) -> None:
    """The README's check by hand must print our registry entry, run from outside the checkout."""
    readme = (ROOT / "README.md").read_text()
    (command,) = re.findall(r"(?m)^python -c \"(.*get_adv_estimator_fn.*)\"$", readme)
    result = subprocess.run(
        [sys.executable, "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "GuardedEstimator(reinforce_plus_plus)"


def test_readme_states_the_torch_floor_of_pyproject() -> None:
    """A GPU user reads the torch range in the README; pip applies the one in pyproject.toml."""
    (torch,) = re.findall(r'(?m)^\s*"(torch[<>=!~][^"]*)",', (ROOT / "pyproject.toml").read_text())
    assert f"torch `{torch[len('torch'):]}`" in (ROOT / "README.md").read_text()


def _readme_table(header: str) -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    lines = text[text.index(header):].split("\n\n", 1)[0].splitlines()
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in lines[:1] + lines[2:]]


def _overrides(cell: str, left: set[str]) -> set[str]:
    """The overrides a README recipe cell names: ``same`` is the left cell's; a key without a dot is
    under the previous override's parent (`actor.use_kl_loss=True`, `kl_loss_type=k2`)."""
    if cell == "same":
        return left
    found, parent = set(), ""
    for override in re.findall(r"`([^`]+)`", cell):
        key = override.split("=", 1)[0]
        if "." not in key:
            override = f"{parent}.{override}"
        parent = override.split("=", 1)[0].rsplit(".", 1)[0]
        found.add(override)
    return found


def test_the_readmes_recipe_table_is_the_records_recipes() -> None:
    """The README's recipe table: one column per estimator record (its label), holding its recipe."""
    from verl_rfpp import catalog

    header, *rows = _readme_table("| " + " | ".join(record.label for record in catalog.in_report_order()) + " |")
    columns: dict[str, set[str]] = {label: set() for label in header}
    for row in rows:
        left: set[str] = set()
        for label, cell in zip(header, row, strict=True):
            left = _overrides(cell, left)
            columns[label] |= left
    assert columns == {record.label: set(record.recipe) for record in catalog.ESTIMATORS}


def test_every_estimator_record_has_its_contract_section() -> None:
    """A top-level section of docs/contract.md headed ``N. LABEL (`name`...``, for every record."""
    from verl_rfpp import catalog

    text = (ROOT / "docs" / "contract.md").read_text()
    missing = [record.name for record in catalog.ESTIMATORS
               if not re.search(rf"^## \d+\. {re.escape(record.label)} \(`{re.escape(record.name)}`", text, re.M)]
    assert missing == []


def test_the_readmes_rule_table_applies_each_rule_to_its_families() -> None:
    from verl_rfpp import catalog, validation

    names = {"both": set(catalog.FAMILIES), "baseline": {catalog.GROUP}, "REINFORCE++": {catalog.RETURNS}}
    _, *rows = _readme_table("| rule | setting | rejected when | applies to | why |")
    assert {rule_id for rule_id, *_ in rows} == {rule.id for rule in validation.RULES}
    for rule_id, _, _, applies, _ in rows:
        assert names[applies] == set(validation.rule(rule_id).families), rule_id


def test_the_readmes_rule_table_has_the_contracts_rules_with_their_families() -> None:
    """The README's rows name the rules of contract section 6.2's table, each applied to the
    families that table gives it (README: both / baseline / REINFORCE++; contract: all / group / returns)."""
    contract = (ROOT / "docs" / "contract.md").read_text()
    table = contract[contract.index("| id | rule | families | keys |"):].split("\n\n", 1)[0].splitlines()[2:]
    families = {cells[0]: cells[2] for cells in ([c.strip() for c in line.strip("|").split(" | ")] for line in table)}
    words = {"both": "all", "baseline": "group", "REINFORCE++": "returns"}
    _, *rows = _readme_table("| rule | setting | rejected when | applies to | why |")
    assert {rule_id for rule_id, *_ in rows} == set(families)
    assert {(rule_id, words[applies]) for rule_id, _, _, applies, _ in rows} == set(families.items())

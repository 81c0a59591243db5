"""A fourth estimator of a new kind, added by docs/layout.md's "Add an estimator" checklist alone.

The estimator: REINFORCE with a global mean baseline, ``A = m * (G - mu)``, the KL-to-go returns
``G`` of the returns family centred by their mean over the batch's valid tokens and not divided by
their std (a different whitening from REINFORCE++'s, not a variant of either shipped estimator).
In a copy of the repository under ``tmp_path`` (never the repository itself), each step of the
checklist is one edit of the file the step names, in the checklist's order; the steps this test
knows are exactly the checklist's (a step added to the checklist, or one this test takes that the
checklist lacks, fails the first test). Then the tier's tests of what the edits touch run in the
copy (the docs' tables, the layout, the import graph, the estimator records and their pickling,
the patch table, the family's required keys), with the new estimator's own float64 test that step
5 wrote, and a probe: verl's registry resolves the name to the plugin's entry and it computes the
record's examples, doctor lists it (its patch line and its kernel check) and is healthy, ``recipe``
prints it and ``check`` accepts its recipe.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME, LABEL = "reinforce_mean_baseline", "REINFORCE (mean baseline)"

RECORD = '''REINFORCE_MEAN_BASELINE = Estimator(
    name="reinforce_mean_baseline", label="REINFORCE (mean baseline)", short="meanbase", family=RETURNS, examples=(
        Example(rewards=((1.0, 2.0, 9.0), (4.0, 0.0, 0.0)), mask=((1, 1, 0), (1, 0, 0)),
                returns=((3.0, 2.0, 0.0), (4.0, 0.0, 0.0)), advantages=((0.0, -1.0, 0.0), (1.0, 0.0, 0.0))),
        Example(rewards=((1.0, 4.0, 9.0),), mask=((1, 1, 0),), gamma=0.5, returns=((3.0, 4.0, 0.0),),
                advantages=((-0.5, 0.5, 0.0),)),
    ))

'''

FUNCTION = '''

@catalog.implements(catalog.REINFORCE_MEAN_BASELINE)
def reinforce_mean_baseline(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    *,
    process_group: Optional[dist.ProcessGroup] = None,
) -> EstimatorResult:
    """REINFORCE with a global mean baseline (the contract's section 10): the KL-to-go returns
    ``G`` minus their mean over the batch's valid tokens, not divided by their std. ``stats``: the
    moments of ``G`` (section 7)."""
    inputs.check_process_group(process_group)
    _check_rewards(token_level_rewards, response_mask)
    rewards = token_level_rewards.detach().to(passes.compute_dtype(token_level_rewards.dtype))
    returns, valid, row_sum, row_count = passes.returns_pass(rewards, response_mask, gamma_of(config))
    _, stats = normalize_with_sums(returns, valid, row_count, row_sum, process_group=process_group)
    advantages = torch.where(valid, returns - stats.raw_mean.to(returns.dtype), 0.0)
    dtype = token_level_rewards.dtype
    return EstimatorResult(advantages.to(dtype), returns.to(dtype), stats)
'''

SECTION = '''

## 10. REINFORCE (mean baseline) (`reinforce_mean_baseline`, any number of samples per prompt)

The returns family's KL-to-go returns `G` (section 2.3, discount 2.4), centred by their mean over
the batch's valid tokens (the population of section 4.1) and not divided by their std:
`A[i,t] = m[i,t] * (G[i,t] - mu)`, `mu = sum_{valid} G / N`. The raw advantage returned is `G`.
'''

OWN_TEST = '''"""REINFORCE (mean baseline) against a float64 reference written out in loops."""

import random

import torch

from verl_rfpp.estimators import reinforce_mean_baseline


def reference(rewards, mask, gamma):
    """``G[i][t] = m * sum_{u >= t} gamma^(u - t) select(m, r)[u]``, ``A = m * (G - mean of valid G)``."""
    returns = []
    for row, keep in zip(rewards, mask):
        running, out = 0.0, [0.0] * len(row)
        for t in reversed(range(len(row))):
            running = (row[t] if keep[t] else 0.0) + gamma * running
            out[t] = running if keep[t] else 0.0
        returns.append(out)
    valid = [g for out, keep in zip(returns, mask) for g, k in zip(out, keep) if k]
    mean = sum(valid) / len(valid)
    return returns, [[(g - mean) if k else 0.0 for g, k in zip(out, keep)] for out, keep in zip(returns, mask)]


def test_it_is_the_reference_on_random_batches():
    generator = random.Random(0)
    for _ in range(20):
        rows, length, gamma = generator.randint(1, 6), generator.randint(1, 7), generator.choice([1.0, 0.9, 0.5])
        rewards = [[generator.uniform(-2, 2) for _ in range(length)] for _ in range(rows)]
        mask = [[generator.random() < 0.7 for _ in range(length)] for _ in range(rows)]
        mask[0][0] = True
        returns, advantages = reference(rewards, mask, gamma)
        result = reinforce_mean_baseline(torch.tensor(rewards, dtype=torch.float64), torch.tensor(mask),
                                         {"gamma": gamma})
        assert torch.allclose(result.returns, torch.tensor(returns, dtype=torch.float64), rtol=0, atol=1e-12)
        assert torch.allclose(result.advantages, torch.tensor(advantages, dtype=torch.float64), rtol=0, atol=1e-12)
'''

PROBE = '''"""What follows from the fourth record with no edit (tests/project/test_fourth_estimator.py writes this)."""

from pathlib import Path

import torch
import verl  # noqa: F401  (loads the plugin through its entry point)

import verl_rfpp
from verl_rfpp import catalog, plugin, validation
from verl_rfpp.cli import doctor
from verl_rfpp.cli import main as cli

NAME = "reinforce_mean_baseline"


def test_this_is_the_copy():
    assert Path(verl_rfpp.__file__).resolve().parents[1] == Path(__file__).resolve().parents[2]


def test_verl_resolves_it_to_the_plugins_entry_and_it_computes_its_examples():
    from verl.trainer.ppo import core_algos

    assert plugin.activation_problem(NAME) is None
    entry = core_algos.get_adv_estimator_fn(NAME)
    for example in catalog.estimator(NAME).examples:
        advantages, returns = entry(token_level_rewards=torch.tensor(example.rewards),
                                    response_mask=torch.tensor(example.mask), config={"gamma": example.gamma})
        assert advantages.tolist() == [list(row) for row in example.advantages]
        assert returns.tolist() == [list(row) for row in example.returns]


def test_doctor_lists_it_and_is_healthy():
    report = doctor.diagnose()
    labels = [label for label, ok in report.checks]
    assert f"estimator {NAME}" in labels
    (kernels,) = [label for label in labels if label.startswith("CPU kernels")]
    assert NAME in kernels and "exact values" in kernels
    assert [case[0] for case in doctor.kernel_cases()].count(f"{NAME}, bool mask, gamma 0.5") == 1
    assert report.healthy, doctor.render(report)


def test_recipe_prints_it_and_check_accepts_it(capsys):
    assert cli.main(["recipe", NAME]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == list(validation.RECIPES[NAME]) and printed[0] == f"algorithm.adv_estimator={NAME}"
    assert cli.main(["check", *printed]) == 0
'''

# Run in the copy: the new estimator's own test, the probe, and the tier's tests of what the edits touch.
# The two written into the copy are spelt from TESTS: they exist only there (tests/project/test_layout.py
# checks that every tests/ path the repository cites exists).
TESTS = "tests"
COPY_TESTS = (
    f"{TESTS}/core/test_{NAME}.py",
    f"{TESTS}/project/test_fourth_probe.py",
    "tests/project/test_docs.py::test_the_readmes_recipe_table_is_the_records_recipes",
    "tests/project/test_docs.py::test_every_estimator_record_has_its_contract_section",
    "tests/project/test_docs.py::test_contract_keeps_top_level_sections_1_to_9",
    "tests/project/test_layout.py",
    "tests/project/test_import_graph.py",
    "tests/adapter/test_estimator_records.py",
    "tests/adapter/test_patch_table.py::test_every_patch_has_a_grpo_call",
    f"tests/adapter/test_patch_table.py::test_a_grpo_run_gets_bit_for_bit_what_verl_alone_gives"
    f"[cached-composition-estimator {NAME}]",
    "tests/contract/test_validation.py::test_required_keys_are_in_every_engines_packaged_config[dp]",
)


def _add_record(path: Path) -> None:
    text = path.read_text()
    head, tail = text.split("ESTIMATORS: list[Estimator] = [", 1)
    names, rest = tail.split("]", 1)
    path.write_text(f"{head}{RECORD}ESTIMATORS: list[Estimator] = [{names}, REINFORCE_MEAN_BASELINE]{rest}")


def _add_function(path: Path) -> None:
    path.write_text(path.read_text() + FUNCTION)


def _add_section(path: Path) -> None:
    path.write_text(path.read_text().rstrip("\n") + "\n" + SECTION)


def _add_column(path: Path) -> None:
    """The recipe table's new column: its name in the first row, ``same`` (REINFORCE++'s cell) below."""
    lines = path.read_text().split("\n")
    start = lines.index("| REINFORCE++-baseline | REINFORCE++ |")
    lines[start] += f" {LABEL} |"
    lines[start + 1] += " --- |"
    lines[start + 2] += f" `algorithm.adv_estimator={NAME}` |"
    row = start + 3
    while lines[row].startswith("|"):
        lines[row] += " same |"
        row += 1
    path.write_text("\n".join(lines))


def _add_own_test(path: Path) -> None:
    (path / f"test_{NAME}.py").write_text(OWN_TEST)


EDITS = {
    "verl_rfpp/catalog.py": _add_record,
    "verl_rfpp/estimators.py": _add_function,
    "docs/contract.md": _add_section,
    "README.md": _add_column,
    "tests/core/": _add_own_test,
}


def checklist() -> list[str]:
    """The files docs/layout.md's "Add an estimator" names, one per numbered step, in order."""
    text = (ROOT / "docs" / "layout.md").read_text()
    section = text.split("\n## Add an estimator\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([^`]+)`", section, flags=re.M)


def test_the_checklist_names_the_files_this_test_edits_in_order():
    assert checklist() == list(EDITS)


def _copy(target: Path) -> None:
    """What the copy's tests read: the package, the tests, the docs' pages, the README, pyproject, CI."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "verl_rfpp", target / "verl_rfpp", ignore=skip)
    shutil.copytree(ROOT / "tests", target / "tests", ignore=skip)
    shutil.copytree(ROOT / ".ci", target / ".ci")
    (target / "docs").mkdir()
    for page in (ROOT / "docs").glob("*.md"):
        shutil.copy2(page, target / "docs" / page.name)
    for name in ("README.md", "pyproject.toml"):
        shutil.copy2(ROOT / name, target / name)


@pytest.mark.slow  # runs pytest in a process of its own
def test_a_fourth_estimator_by_the_checklist_alone(tmp_path):
    copy = tmp_path / "repository"
    _copy(copy)
    for step in checklist():
        EDITS[step](copy / step)
    (copy / COPY_TESTS[1]).write_text(PROBE)
    environment = {**os.environ, "PYTHONPATH": str(copy)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:randomly", "-m", "not slow and not e2e",
         *COPY_TESTS], cwd=copy, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    passed = re.findall(r"^PASSED (.+)$", result.stdout, flags=re.M)
    for own in ("test_reinforce_mean_baseline.py::test_it_is_the_reference_on_random_batches",
                "test_fourth_probe.py::test_this_is_the_copy",
                "test_fourth_probe.py::test_verl_resolves_it_to_the_plugins_entry_and_it_computes_its_examples",
                "test_fourth_probe.py::test_doctor_lists_it_and_is_healthy",
                "test_fourth_probe.py::test_recipe_prints_it_and_check_accepts_it",
                f"test_estimator_records.py::test_every_registered_entry_survives_a_pickle_round_trip[{NAME}]",
                f"test_patch_table.py::test_a_grpo_run_gets_bit_for_bit_what_verl_alone_gives"
                f"[cached-composition-estimator {NAME}]"):
        assert any(node.endswith(own) for node in passed), (own, result.stdout[-3000:])

"""Every examples/*.sh launches one main_ppo run of one of our estimators, and passes the contract
(``verl-rfpp check SCRIPT``: the script itself, read through ``verl_rfpp.cli.scripts``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_rfpp.cli import main as cli
from verl_rfpp.cli import scripts

pytestmark = pytest.mark.slow  # composes verl's config for every example

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.sh"))


def test_there_are_scripts_for_both_estimators():
    names = " ".join(path.name for path in EXAMPLES)
    assert "rfpp_baseline" in names and "rfpp.sh" in names and "multinode" in names


@pytest.mark.parametrize("script", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_script_passes_verl_rfpp_check(script, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    launch, = scripts.read_script(script).launches
    appended, = scripts.read_script(script, ["trainer.seed=1"]).launches  # a Fix: line's overrides reach main_ppo
    assert appended.arguments == (*launch.arguments, "trainer.seed=1")
    assert any(o.startswith("algorithm.adv_estimator=reinforce_plus_plus") for o in launch.arguments)
    assert cli.main(["check", str(script)]) == 0
    assert "OK: this config runs" in capsys.readouterr().out

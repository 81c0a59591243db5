"""Generated scripts judged word for word by real bash (issue 49; docs/contract.md section 6.5;
the machinery and its ``--long`` hunt: tests/support/generated.py). Each script is run by
``/bin/bash`` under recording stand-ins and read by check's reader in this process: every command's
argv bash recorded must equal the reader's, or the reader refuses. A fixed seed: the same scripts
every run. Every mismatch the generator ever found is a file of tests/tools/generated/, whose
``# expect:`` line says whether the reader now reads it exactly or refuses it."""

from __future__ import annotations

import re

import pytest
from support import generated

from verl_rfpp.bash_reader import words

pytestmark = pytest.mark.slow  # bash runs every script (one driver process for 50)

BATCHES = 45  # of generated.BATCH scripts: 2,250 a run


@pytest.fixture(scope="module")
def judge():
    with generated.Judge() as found:
        yield found


def test_generated_scripts_read_as_bash_runs_them_or_refused(judge):
    tally = generated.Tally()
    generated.hunt(judge, BATCHES, None, tally, derandomize=True)
    if tally.mismatches:  # pytest.fail: the whole report (an assert's message is cut short)
        pytest.fail(f"{tally}\n\n" + "\n\n".join(outcome.report(judge.errors(outcome.script))
                                                   for outcome in tally.mismatches), pytrace=False)
    total = sum(tally.counts.values())
    # the generator stays inside what the reader models: most scripts are read exactly
    assert total >= 2000 and tally.counts.get("agree", 0) >= total // 2, str(tally)


EXAMPLES = sorted(generated.GENERATED.glob("*.sh"))


def test_every_mismatch_found_stays_exact_or_refused(judge):
    scripts = [generated.Script.from_file(path) for path in EXAMPLES]
    outcomes = judge.judge(scripts)
    assert len(outcomes) >= 15
    wrong = []
    for path, outcome in zip(EXAMPLES, outcomes, strict=True):
        expected = re.search(r"^# expect: (exact|refused)$", path.read_text(encoding="utf-8-sig"), re.M).group(1)
        if {"exact": "agree", "refused": "refused"}[expected] != outcome.result:
            wrong.append(f"{path.name}: expected {expected}\n{outcome.report()}")
    assert not wrong, "\n\n".join(wrong)


def test_the_judge_finds_a_reader_that_does_not_split(judge, monkeypatch):
    """The oracle bites: with word splitting turned off in the reader, generated scripts mismatch."""
    monkeypatch.setattr(words, "split", lambda pieces, ifs=words.DEFAULT_IFS: [
        "".join(piece.text for piece in pieces if piece is not words.BREAK)])
    outcomes = judge.judge([generated.Script((("A='a b'",), ("rec", "$A")))])
    assert [outcome.result for outcome in outcomes] == ["MISMATCH"]
    assert outcomes[0].bash == [("rec", "a", "b")] and outcomes[0].reader == [("rec", "a b")]

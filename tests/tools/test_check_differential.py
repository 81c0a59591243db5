"""bash is the judge of ``verl-rfpp check SCRIPT`` (issue 38; docs/contract.md section 6.5): every
script of tests/tools/differential/ and every verl example script runs under real bash in a sandbox
whose PATH holds only recording stand-ins (tests/support/standins.py), each main_ppo run bash
starts is judged by ``check OVERRIDES``, and ``check SCRIPT ARGS`` must agree (the same runs, each
with the same verdict line and rule ids, the worst status) or exit 2. The harness and its command
line: tests/support/differential.py."""

from __future__ import annotations

import pytest
from support import differential

pytestmark = pytest.mark.slow  # a bash run and a check per script, verl imported once


def test_check_agrees_with_bash_or_exits_2():
    outcomes = differential.run_all(differential.corpus())
    mismatches = [outcome.report() for outcome in outcomes if outcome.result == "MISMATCH"]
    assert len(outcomes) >= 300 and not mismatches, (
        differential.totals(outcomes) + "\n" + "\n".join(mismatches))

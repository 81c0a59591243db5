"""``verl_rfpp.cli.quiet``: other libraries' lines are routed away and mentioned only when one of
them reads as an error; nothing of it is left in the temporary directory unless it names it."""

from __future__ import annotations

import os
import tempfile

import pytest

from verl_rfpp.cli import quiet

WARNINGS = (b"/site-packages/verl/workers/engine/__init__.py:32: UserWarning: torchtitan engine is not available: "
            b"ModuleNotFoundError(\"No module named 'torchtitan'\")\n  warnings.warn(f\"...\", stacklevel=1)\n"
            b"WARNING:2026-12-04 21:45:18,801:Platform 'nvidia' (PlatformCUDA) is registered but not available.\n")


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _routed(text: bytes, keep: bool) -> quiet.QuietLog:
    with quiet.quiet("test", keep=keep) as log:
        os.write(2, text)
    return log


@pytest.mark.parametrize("keep", [True, False])
def test_warnings_alone_are_not_mentioned_and_leave_nothing(private_tmp, keep, capfd):
    log = _routed(WARNINGS, keep)
    assert (log.lines, log.errors, log.mention()) == (3, 0, "")
    quiet.discard(log)
    assert os.listdir(private_tmp) == [] and capfd.readouterr().err == ""


@pytest.mark.parametrize("line", [b"ERROR:verl_rfpp:verl_rfpp could not activate\n",
                                  b"Traceback (most recent call last):\n",
                                  b"[CRITICAL] worker died\n",
                                  b"ModuleNotFoundError: No module named 'x'\n"])
def test_an_error_line_is_mentioned_and_its_log_kept(private_tmp, line):
    log = _routed(WARNINGS + line, keep=True)
    assert log.errors == 1 and log.mention() == f"(other libraries' messages: {log.path})"
    quiet.discard(log)
    assert os.listdir(private_tmp) == [os.path.basename(log.path)]
    counted = _routed(WARNINGS + line, keep=False)
    assert counted.mention() == "(other libraries printed 4 lines, not shown: -v shows them)"


def test_an_interrupted_block_leaves_no_log(private_tmp):
    with pytest.raises(KeyboardInterrupt), quiet.quiet("demo", stdout=True) as log:
        os.write(2, b"^C\n")
        raise KeyboardInterrupt
    assert log.path is None and os.listdir(private_tmp) == []

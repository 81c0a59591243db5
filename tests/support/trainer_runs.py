"""verl trainer runs that more than one test module reads (each run takes one to two minutes of
start-up; the modules' assertions share it). Session-scoped fixtures, imported by conftest.py;
only e2e tests take them. ``run_processes``: the live processes of one run, for the tests that
kill a run and count what is left."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import torch


@dataclass
class TwoOutputRun:
    """What the run left: verl's result (metrics, trace, log), its output directory, and the
    advantage step of every training step as ``verl_rfpp.cpu.advantage_dump`` recorded it."""

    result: object
    out: Path
    steps: list[dict]


def two_output_run(out: Path) -> TwoOutputRun:
    """verl's v1 trainer, 2 FSDP ranks, 2 steps of REINFORCE++-baseline with the recipe's k2 KL
    loss, tensorboard on, and ``verl_rfpp.cpu.agent.TwoOutputAgentLoop`` (4 prompts x 4 sessions;
    even sessions return two outputs, so 24 rows, 2 mini-batches per step), seed 0."""
    from verl_rfpp.cpu import advantage_dump, agent, configuration, launch

    env = {"VERL_USE_EXTERNAL_MODULES": f"{configuration.BACKEND},verl_rfpp.cpu.advantage_dump",
           advantage_dump.DUMP_ENV: str(out / "dump")}
    result = launch.run("reinforce_plus_plus_baseline", out, steps=2, echo=False, timeout=900, ranks=2,
                        loggers=("console", "tensorboard"),
                        extra_overrides=[f"actor_rollout_ref.rollout.agent.default_agent_loop={agent.SESSION_LOOP}"],
                        extra_env=env)
    assert result.returncode == 0 and sorted(result.steps) == [1, 2], "".join(result.log[-80:])
    dumps = sorted((out / "dump").glob("advantages-*.pt"), key=lambda path: int(path.stem.rsplit("-", 1)[1]))
    return TwoOutputRun(result, out, [torch.load(path) for path in dumps])


@pytest.fixture(scope="session")
def v1_two_output_run(tmp_path_factory) -> TwoOutputRun:
    """``two_output_run``: read by tests/e2e/test_end_to_end.py (the v1 trainer on 2 ranks),
    tests/e2e/test_sessions_runs.py (contract 3.7) and tests/e2e/test_determinism_runs.py (the same run again)."""
    return two_output_run(tmp_path_factory.mktemp("v1-two-outputs"))


def run_processes(out: Path) -> list[psutil.Process]:
    """The live processes whose environment names ``out``'s trace file: the trainer, the Ray
    processes it started, its workers and servers (they inherit the trainer's environment)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("VERL_RFPP_TRACE") == str(out / "trace.txt") and \
                    process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found

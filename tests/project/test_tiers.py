"""The test tiers (README, Tests): in a run that deselects ``slow``, a test of the fast tier that
starts a process fails naming itself, even when the code under test swallows the error; a test
marked ``slow`` starts what it needs. The guard is tests/conftest.py's, run here in an inner
pytest session (pytester) with the same conftest and markers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
# The outer test runs the inner session's slow test, which starts a real process.
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]
INNER = """
import multiprocessing, os, subprocess, sys

import pytest


def test_starts_a_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_swallows_the_refusal():
    try:
        subprocess.run(["true"])
    except BaseException:
        pass


def test_starts_a_multiprocessing_child():
    process = multiprocessing.get_context("spawn").Process(target=print)
    process.start()
    process.join()


def test_starts_ray():
    import ray

    ray.init(num_cpus=1)


def test_os_system():
    os.system("true")


@pytest.fixture(scope="module")
def cluster():
    subprocess.run(["true"])


def test_sets_up_a_module_fixture_that_starts_a_process(cluster):
    pass


def test_pure():
    assert sum(range(4)) == 6


@pytest.mark.slow
def test_marked_slow_starts_what_it_needs():
    assert subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout == "42\\n"
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    e2e: e2e\n")
    pytester.makepyfile(test_inner=INNER)
    return pytester


def test_the_fast_tier_fails_every_test_that_starts_a_process_naming_it(inner: pytest.Pytester) -> None:
    result = inner.runpytest("-p", "no:cacheprovider", "-m", "not slow and not e2e")
    result.assert_outcomes(passed=1, failed=5, errors=1, deselected=1)
    text = result.stdout.str()
    for name, what in [("test_starts_a_subprocess", "a subprocess"), ("test_swallows_the_refusal", "a subprocess"),
                       ("test_starts_a_multiprocessing_child", "a multiprocessing process"),
                       ("test_starts_ray", "a Ray cluster (ray.init)"), ("test_os_system", "os.system"),
                       ("test_sets_up_a_module_fixture_that_starts_a_process", "a subprocess")]:
        assert f"test_inner.py::{name} starts {what}" in text, text
    assert "but is not marked slow: mark it @pytest.mark.slow" in text


def test_a_run_that_keeps_slow_tests_starts_processes_freely(inner: pytest.Pytester) -> None:
    result = inner.runpytest("-p", "no:cacheprovider", "-k", "subprocess or slow or pure or swallows")
    result.assert_outcomes(passed=4, deselected=4)


FIRST_USE = """
import matplotlib
import torch

from verl_rfpp.estimators import reinforce_plus_plus

matplotlib.use("Agg")


def test_draws_text_and_computes_advantages(tmp_path):
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    axes.set_title("reward")
    figure.savefig(tmp_path / "reward.png")
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    advantages = reinforce_plus_plus(rewards, torch.ones_like(rewards)).advantages
    assert torch.isfinite(advantages).all()
"""


def test_the_fast_tier_passes_twice_on_a_fresh_machine(pytester: pytest.Pytester, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty caches (issue 30): matplotlib's first import lists the fonts with ``fc-list`` and numba
    compiles the kernels into an empty ``NUMBA_CACHE_DIR``. The tier builds the font cache before
    its guard is on, so a tier test that plots passes on the first run and on the second, which
    reads the caches the first wrote; the guard still fails a test that starts a process itself."""
    fresh = {name: tmp_path / name for name in ("HOME", "MPLCONFIGDIR", "NUMBA_CACHE_DIR")}
    for name, folder in fresh.items():
        folder.mkdir()
        monkeypatch.setenv(name, str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    e2e: e2e\n")
    pytester.makepyfile(test_first_use=FIRST_USE, test_inner=INNER)
    for run in ("first", "second"):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", "-m", "not slow and not e2e")
        assert "test_first_use.py::test_draws_text_and_computes_advantages PASSED" in result.stdout.str(), run
        result.assert_outcomes(passed=2, failed=5, errors=1, deselected=1)
    assert list(fresh["MPLCONFIGDIR"].glob("fontlist-*.json"))
    assert list(fresh["NUMBA_CACHE_DIR"].rglob("*.nbi"))


GROUPED = """
import os

import pytest


@pytest.fixture(scope="module")
def expensive():
    with open(os.environ["RFPP_SETUPS"], "a") as record:
        record.write("set up\\n")


@pytest.mark.parametrize("case", range(6))
def test_reads_the_module_fixture(expensive, case):
    pass
"""


def test_with_two_workers_a_modules_fixture_is_set_up_once(pytester: pytest.Pytester, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's ``-n 2`` with pyproject's addopts: a module is one xdist group (its Ray cluster
    or trainer run starts once), which needs conftest's groups before xdist reads them."""
    import tomllib

    addopts = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makeini(f"[pytest]\naddopts = {addopts}\nmarkers =\n    slow: slow\n    e2e: e2e\n")
    pytester.makepyfile(test_grouped=GROUPED)
    monkeypatch.setenv("RFPP_SETUPS", str(tmp_path / "setups"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=6)
    assert (tmp_path / "setups").read_text() == "set up\n"


LEAVES = """
from hypothesis import given
from hypothesis import strategies as st


def test_imports_verl():
    import verl  # noqa: F401  (verl imports torch._dynamo, which makes torch's inductor cache folder)


@given(st.text())
def test_draws_text(text):  # Hypothesis writes its unicode and constants caches into its home
    assert isinstance(text, str)


def test_writes_tmp_path(tmp_path):  # pytest's own folder: $TMPDIR/pytest-of-USER/pytest-N by default
    (tmp_path / "file").write_text("x")
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "two-workers"])
def test_a_run_leaves_nothing_in_tmpdir(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        workers: list[str]) -> None:
    """A run with tests/conftest.py, in one process and on two xdist workers (whose processes end
    without ``atexit``), leaves a private ``TMPDIR`` as it found it, pytest's own ``pytest-of-*``
    included (before: pytest's ``pytest-of-USER/pytest-N``, kept after the session;
    ``torchinductor_USER``, made when verl imports ``torch._dynamo``; and in the loaded tier both
    workers' ``verl-rfpp-hypothesis-*``, removed at exit only, which execnet skips
    with ``os._exit`` when a worker takes over 10 s to end)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    # as a fresh run has them: unset (pytester points pytest's temporary root elsewhere)
    for name in ("TORCHINDUCTOR_CACHE_DIR", "VERL_RFPP_TESTS_SCRATCH", "PYTEST_DEBUG_TEMPROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    e2e: e2e\n")
    pytester.makepyfile(test_leaves=LEAVES)
    # Not runpytest_subprocess: it passes --basetemp, and pytest's default one is what this test watches.
    result = pytester.run(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "not slow and not e2e",
                          *workers, str(pytester.path), timeout=600)
    result.assert_outcomes(passed=3)
    assert sorted(os.listdir(scratch)) == []

"""Shared fixtures and settings. Nothing a test run leaves behind lands in the repository:
pytest's cache is off (``-p no:cacheprovider`` in pyproject), Hypothesis keeps no example
database and its other storage (``.hypothesis/``, by default in the cwd) lives in a temporary
directory removed at exit. The two-minute tier (``-m "not slow and not e2e"``) stays honest:
in a run that deselects ``slow``, a test of the tier that starts a process fails, naming itself;
a cache a library builds with a helper process on first use is built before the first test.
Nothing is left in ``$TMPDIR`` either: pytest's own ``tmp_path`` folders and what the suite's libraries
put there by default (torch's ``torchinductor_USER`` cache, made when verl imports ``torch._dynamo``;
Hypothesis's home) go to one scratch directory per process, removed when the process's session ends."""

from __future__ import annotations

import atexit
import multiprocessing.process
import os
import shutil
import subprocess
import tempfile


def _scratch() -> str:
    """This process's scratch directory: made once (a pytester session in the same process imports
    this file again and gets the same one), removed at exit and, in an xdist worker (which ends
    without running ``atexit``), at the end of its session."""
    pid, _, path = os.environ.get("VERL_RFPP_TESTS_SCRATCH", "").partition(":")
    if pid != str(os.getpid()) or not os.path.isdir(path):
        path = tempfile.mkdtemp(prefix="verl-rfpp-tests-")
        os.environ["VERL_RFPP_TESTS_SCRATCH"] = f"{os.getpid()}:{path}"
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


_SCRATCH = _scratch()
# torch makes $TMPDIR/torchinductor_USER when torch._dynamo is imported (verl imports it) unless this
# names another place; the processes a test starts inherit it (the xdist workers: the controller's).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_SCRATCH, "torchinductor"))
# A suite run from an activated virtual environment (``source venv/bin/activate``, the README's fresh
# machine): check reads a launch script's exported VIRTUAL_ENV as the run's Python (an ``assumed:``
# line), which the tests' expected outputs, written for a plain environment, do not have.
os.environ.pop("VIRTUAL_ENV", None)

import pytest  # noqa: E402
import torch  # noqa: E402
from _pytest.mark.expression import Expression  # noqa: E402
from hypothesis import settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402
from support.trainer_runs import v1_two_output_run  # noqa: E402, F401  (a session fixture of the e2e modules)

from verl_rfpp.core import passes  # noqa: E402

set_hypothesis_home_dir(os.path.join(_SCRATCH, "hypothesis"))
settings.register_profile("verl_rfpp", database=None, deadline=None)  # no timing asserted: loaded CI machines
settings.load_profile("verl_rfpp")


@pytest.fixture(scope="module", params=["kernels", "torch"])
def passes_implementation(request):
    """Run a module's tests once with the numba CPU kernels and once with the torch operations
    (what accelerators run), through the documented ``VERL_RFPP_CPU_KERNELS`` switch. Spawned
    processes (the gloo tests) inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(passes.CPU_KERNELS_VARIABLE, "1" if request.param == "kernels" else "0")
        yield request.param


# --- every device present (docs/performance.md "On a GPU") --------------------------------------
# The numerical modules take ``device``: the CPU always, ``cuda`` when torch sees a GPU; ids are
# the device names. On cuda the ``passes_implementation`` switch changes nothing (the numba
# kernels run on CPU tensors only): benchmarks/gpu_check.sh selects ``-k "cuda and not kernels"``.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="session", params=DEVICES)
def device(request):
    """A ``torch.device`` of this machine; session-scoped so Hypothesis tests may take it."""
    return torch.device(request.param)


# --- the whole suite on two workers (README: ``python -m pytest -q -n 2 tests``) ---------------------
# pyproject's addopts: ``--dist loadgroup --no-loadscope-reorder`` (ignored without ``-n``). A group
# runs in one worker, in the order given here.

_CHEAP_SHARED_FIXTURES = {"passes_implementation", "device"}


def _group(item: pytest.Item) -> str:
    """A module's tests are one group (its module fixtures, a Ray cluster or verl's actor workers,
    are set up once). An e2e test is a group of its own, shared with the tests that read the same
    expensive module- or session-scoped fixture of this suite (a trainer run)."""
    if item.get_closest_marker("e2e") is None:
        return item.module.__name__
    shared = sorted(name for name, definitions in item._fixtureinfo.name2fixturedefs.items()
                    if definitions[-1].scope in ("module", "session") and definitions[-1].baseid
                    and name not in _CHEAP_SHARED_FIXTURES)
    return shared[0] if shared else item.nodeid


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets its ``xdist_group``; the groups are ordered e2e first (trainer runs of one to
    four minutes), then those with slow tests, then the rest (many short tests fill the end), a
    group's tests kept together and in their own order. Modules come in the order of their names,
    whatever their folder (the order of a flat tests/: moving a module between folders changes no
    group and no order)."""
    items.sort(key=lambda item: item.path.name)  # stable: a module's tests keep their order
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(_group(item), []).append(item)

    def weight(members: list[pytest.Item]) -> int:
        for rank, marker in enumerate(("e2e", "slow")):
            if any(item.get_closest_marker(marker) for item in members):
                return rank
        return 2

    ordered = sorted(groups.items(), key=lambda group: weight(group[1]))
    items[:] = [item for _, members in ordered for item in members]
    for name, members in ordered:
        for item in members:
            item.add_marker(pytest.mark.xdist_group(name))


# --- test tiers: the fast tier starts no process ---------------------------------------------------

# What starts a process, Ray or verl's trainer (``ray.init`` starts its processes through subprocess),
# and which positional argument names what it starts.
_PROCESS_STARTS = [
    (subprocess.Popen, "_execute_child", "a subprocess", 1),
    (multiprocessing.process.BaseProcess, "start", "a multiprocessing process", 0),
    (os, "system", "os.system", 0),
    (os, "fork", "os.fork", 0),
    (os, "posix_spawn", "os.posix_spawn", 0),
    (os, "posix_spawnp", "os.posix_spawnp", 0),
]
_STARTED = pytest.StashKey[list[str]]()


def _deselects_slow(config: pytest.Config) -> bool:
    """Whether ``-m`` leaves out a test marked only ``slow`` (pytest's own reading of the expression)."""
    expression = config.getoption("markexpr")
    return bool(expression) and not Expression.compile(expression).evaluate(lambda name, **_: name == "slow")


def _in_fast_tier(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is None and item.get_closest_marker("e2e") is None


def _refusal(item: pytest.Item, what: str, detail: object) -> str:
    return (f"{item.nodeid} starts {what} ({detail!r:.200}) but is not marked slow: mark it "
            f"@pytest.mark.slow (or the module's pytestmark); the tier -m \"not slow and not e2e\" "
            f"starts no process (README, Tests)")


def pytest_sessionstart(session: pytest.Session) -> None:
    """A fresh machine (empty ``MPLCONFIGDIR``) runs the tier as a warm one does: matplotlib lists
    the system's fonts with ``fc-list`` once, on its first import, and caches them there. Done here,
    before any test, the guard below needs no exception for a library's helper process and still
    fails every test that starts one itself (tests/project/test_tiers.py runs both on a fresh MPLCONFIGDIR)."""
    if _deselects_slow(session.config):
        import matplotlib.font_manager  # noqa: F401


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """Around setup, call and teardown of a fast-tier test (module fixtures it sets up included),
    every way of starting a process raises; what code under test swallowed still fails the test."""
    if not (_deselects_slow(item.config) and _in_fast_tier(item)):
        return (yield)
    started = item.stash.setdefault(_STARTED, [])

    def refuse(what, index):
        def start(*args, **kwargs):
            started.append(_refusal(item, what, args[index] if index < len(args) else kwargs))
            pytest.fail(started[-1], pytrace=False)
        return start

    import ray

    with pytest.MonkeyPatch.context() as patch:
        for owner, name, what, index in [*_PROCESS_STARTS, (ray, "init", "a Ray cluster (ray.init)", 0)]:
            if hasattr(owner, name):
                patch.setattr(owner, name, refuse(what, index))
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """A refusal the code under test caught still fails the phase it happened in."""
    report = yield
    started = item.stash.get(_STARTED, [])
    if started:
        if report.passed:
            report.outcome, report.longrepr = "failed", started[0]
        started.clear()
    return report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that asks for ``cached_composition`` (a module's ``pytestmark =
    pytest.mark.usefixtures("cached_composition")``) says in its id which composition it gets:
    ``cached-composition`` for a test of the two-minute tier in a run that deselects ``slow``,
    ``full-composition`` otherwise (the whole suite)."""
    if "cached_composition" in metafunc.fixturenames:
        cached = _deselects_slow(metafunc.config) and _in_fast_tier(metafunc.definition)
        metafunc.parametrize("cached_composition", [cached], indirect=True,
                             ids=["cached-composition" if cached else "full-composition"])


@pytest.fixture
def cached_composition(request):
    """With the parameter ``cached-composition``, ``compose_verl_config`` without a
    ``--config-path``/``--config-name`` composes verl's packaged config once per choice of config
    groups and applies the rest of the overrides with Hydra's own code (tests/support/composed.py,
    held equal to a full composition by a slow test of test_validation); ``verl-rfpp check`` and the
    test's module, when it imported the name, get it. ``full-composition``: nothing is swapped.
    Every contract rule's verdict on a full composition, as verl's main_ppo composes, is held in the
    tier by tests/contract/test_validation.py, which does not ask for this fixture."""
    if not request.param:
        yield False
        return
    from support import composed

    from verl_rfpp.adapter import compose

    full = compose.compose_verl_config

    def compose_verl_config(overrides, config_path=None, config_name=None):
        if config_path is None and config_name is None:
            return composed.fresh(list(overrides))
        return full(overrides, config_path, config_name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compose, "compose_verl_config", compose_verl_config)
        if getattr(request.module, "compose_verl_config", None) is full:
            patch.setattr(request.module, "compose_verl_config", compose_verl_config)
        yield True


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    """pytest's own temporary folders (``tmp_path``) live in this process's scratch directory unless
    ``--basetemp`` names a place: by default pytest keeps ``$TMPDIR/pytest-of-USER/pytest-N`` (the
    last three runs) after the session. An xdist worker is given ``BASETEMP/gwN`` by the controller,
    inside the controller's scratch, removed when the controller exits."""
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = os.path.join(_SCRATCH, "pytest")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker's process ends without running ``atexit``: its scratch directory goes here
    (a pytester session run inside a worker has no ``workerinput`` and leaves it be)."""
    if hasattr(session.config, "workerinput"):
        shutil.rmtree(_SCRATCH, ignore_errors=True)

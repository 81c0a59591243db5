"""Shared fixtures and settings. Nothing a test run leaves behind lands in the repository:
pytest's cache is off (``-p no:cacheprovider`` in pyproject), Hypothesis keeps no example
database and its other storage (``.hypothesis/``, by default in the cwd) lives in a temporary
directory removed at exit."""

from __future__ import annotations

import atexit
import shutil
import tempfile

import pytest
import torch
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from verl_rfpp import passes

_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="verl-rfpp-hypothesis-")
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, ignore_errors=True)
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
settings.register_profile("verl_rfpp", database=None)
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

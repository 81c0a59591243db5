"""Shared fixtures."""

from __future__ import annotations

import pytest

from verl_rfpp import passes


@pytest.fixture(scope="module", params=["kernels", "torch"])
def passes_implementation(request):
    """Run a module's tests once with the numba CPU kernels and once with the torch operations
    (what accelerators run), through the documented ``VERL_RFPP_CPU_KERNELS`` switch. Spawned
    processes (the gloo tests) inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(passes.CPU_KERNELS_VARIABLE, "1" if request.param == "kernels" else "0")
        yield request.param

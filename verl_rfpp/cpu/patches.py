"""The minimal patches for verl 0.9.1's CUDA-only assumptions; each says what it works around.

Applied at import of ``verl_rfpp.cpu``, which verl performs early (``VERL_USE_EXTERNAL_MODULES``),
before its worker modules bind these names.
"""

from __future__ import annotations

import functools

MARKER = "__verl_rfpp_cpu__"


def _once(module, name, make):
    current = getattr(module, name)
    if getattr(current, MARKER, False):
        return
    patched = make(current)
    setattr(patched, MARKER, True)
    setattr(module, name, patched)


def _gloo_only(original):
    # verl.utils.distributed.initialize_global_process_group_ray builds the backend string
    # f"cpu:gloo,{device}:{backend}", which is "cpu:gloo,cpu:gloo" on the CPU: torch rejects the
    # duplicate device type. One gloo backend serves the CPU.
    @functools.wraps(original)
    def initialize(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    return initialize


def _unpinned(original):
    # verl's FSDP2 engine forces CPUOffloadPolicy(pin_memory=True) for the reference model;
    # pinning host memory raises without an accelerator. On the CPU there is nothing to pin.
    @functools.wraps(original, updated=())
    def policy(*args, pin_memory=False, **kwargs):
        return original(*args, pin_memory=False, **kwargs)

    return policy


def apply() -> None:
    """Idempotent; runs in every process that imports ``verl_rfpp.cpu``."""
    import verl.utils.distributed as distributed
    import verl.workers.engine.fsdp.transformer_impl as fsdp_engine

    _once(distributed, "initialize_global_process_group_ray", _gloo_only)
    _once(fsdp_engine, "CPUOffloadPolicy", _unpinned)

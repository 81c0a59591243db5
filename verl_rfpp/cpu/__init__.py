"""Opt-in CPU backend for verl 0.9.0 and 0.9.1 (never imported by the plugin's entry point).

Imported in every verl process through ``VERL_USE_EXTERNAL_MODULES=verl_rfpp.cpu``, which the
launcher (``verl-rfpp demo``) sets together with ``VERL_PLATFORM=cpu``. Importing it:

- registers a ``cpu`` platform (gloo collectives) in verl's platform registry;
- registers the ``hf_cpu`` rollout (transformers ``generate``) in verl's replica and adapter
  registries;
- applies the few patches for verl's CUDA-only assumptions, and two observing hooks for the run
  trace (``patches.apply``).

It never imports ``verl_rfpp.plugin``: with the plugin excluded (``VERL_USE_EXTERNAL_PLUGINS=none``)
verl's own estimators run untouched.
"""

from __future__ import annotations

import logging

from verl_rfpp.cpu import patches

TESTED_VERL = ("0.9.0", "0.9.1")  # the releases whose internals the patches are written against


def _check_verl_version() -> None:
    """A verl without the plugin loader (older than 0.9.0) is refused; a newer, untested one is
    tried with a WARNING."""
    from importlib import metadata

    from packaging.version import Version

    installed = Version(metadata.version("verl"))
    if installed.release < (0, 9, 0):
        raise RuntimeError(
            f"verl_rfpp.cpu (verl-rfpp demo) needs verl 0.9.0 or newer (tested: {', '.join(TESTED_VERL)}); "
            f"verl {installed} is installed and has no plugin loader. Fix: pip install 'verl>=0.9.0'"
        )
    if installed.base_version not in TESTED_VERL:
        logging.getLogger("verl_rfpp").warning(
            "verl_rfpp.cpu is tested with verl %s; verl %s is installed: the CPU backend may fail.",
            ", ".join(TESTED_VERL), installed,
        )


def _activate() -> None:
    _check_verl_version()
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from verl_rfpp.cpu import agent, platform, rollout  # noqa: F401  (register the toy tool parser, cpu platform)

    RolloutReplicaRegistry.register(rollout.NAME, lambda: rollout.HFReplica)
    rollout_base._ROLLOUT_REGISTRY[(rollout.NAME, "async")] = "verl_rfpp.cpu.rollout.HFServerAdapter"
    patches.apply()


_activate()

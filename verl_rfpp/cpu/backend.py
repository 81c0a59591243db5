"""The CPU backend's one activating module (docs/layout.md): importing it changes verl.

Imported in every verl process through ``VERL_USE_EXTERNAL_MODULES=verl_rfpp.cpu.backend``, which
the CPU run's environment (``verl_rfpp.cpu.configuration.trainer_environment``: ``verl-rfpp demo``)
sets together with ``VERL_PLATFORM=cpu``. Importing it:

- registers a ``cpu`` platform (gloo collectives) in verl's platform registry;
- registers the ``hf_cpu`` rollout (transformers ``generate``) in verl's replica and adapter
  registries;
- applies the few patches for verl's CUDA-only assumptions, and two observing hooks for the run
  trace (``patches.apply``).

No other module of ``verl_rfpp.cpu`` changes verl when imported (tests/adapter/test_activation.py).
It never imports ``verl_rfpp.plugin``: with the plugin excluded (``VERL_USE_EXTERNAL_PLUGINS=none``)
verl's own estimators run untouched.
"""

from __future__ import annotations

import importlib

from verl_rfpp.adapter import versions
from verl_rfpp.cpu import patches

ROLLOUT_MODULE = "verl_rfpp.cpu.rollout"


def _check_verl_version() -> None:
    """A verl without the plugin loader (older than 0.9.0) is refused; a newer, untested one is
    tried with a WARNING (the releases and the parser are ``verl_rfpp.adapter.versions``')."""
    installed = versions.verl_version()
    tested = ", ".join(versions.TESTED_VERL)
    if not versions.has_plugin_loader(installed):
        raise RuntimeError(
            f"verl_rfpp.cpu (verl-rfpp demo) needs verl {versions.SUPPORTED_VERL_TEXT} (tested: {tested}); verl "
            f"{installed} is installed and has no plugin loader. Fix: pip install 'verl{versions.SUPPORTED_VERL_TEXT}'"
        )
    if not versions.verl_tested(installed):
        versions.logger.warning(
            "verl_rfpp.cpu is tested with verl %s; verl %s is installed: the CPU backend may fail.", tested, installed,
        )


def _activate() -> None:
    _check_verl_version()
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from verl_rfpp.cpu import ROLLOUT_NAME, agent, platform

    agent.register_agent_loops()
    platform.register_platform()
    # The rollout module is named, not imported: a Ray worker that unpickles its server class imports
    # it first, and its own ``import verl`` brings this module in while it is half-initialized.
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: importlib.import_module(ROLLOUT_MODULE).HFReplica)
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{ROLLOUT_MODULE}.HFServerAdapter"
    patches.apply()


_activate()

"""The CPU backend's one activating module (docs/layout.md): importing it changes verl.

Imported in every verl process through ``VERL_USE_EXTERNAL_MODULES=verl_rfpp.cpu.backend``, which
the launcher (``verl-rfpp demo``, ``verl_rfpp.cpu.launch``) sets together with ``VERL_PLATFORM=cpu``.
Importing it:

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

from verl_rfpp.adapter import versions
from verl_rfpp.cpu import patches


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


ROLLOUT = "hf_cpu"  # verl_rfpp.cpu.rollout.NAME


def _hf_replica() -> type:
    from verl_rfpp.cpu import rollout

    return rollout.HFReplica


def _activate() -> None:
    _check_verl_version()
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from verl_rfpp.cpu import agent, platform

    agent.register()
    platform.register()
    # By name, rollout imported on first use: a Ray worker that unpickles the rollout server imports
    # ``verl_rfpp.cpu.rollout`` first, whose ``import verl`` imports this module, while rollout is
    # still half-initialized (reading ``rollout.NAME`` here failed: the server never started).
    RolloutReplicaRegistry.register(ROLLOUT, _hf_replica)
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT, "async")] = "verl_rfpp.cpu.rollout.HFServerAdapter"
    patches.apply()


_activate()

"""Opt-in CPU backend for verl 0.9.1 (never imported by the plugin's entry point).

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

from verl_rfpp.cpu import patches

SUPPORTED_VERL = "0.9.1"


def _activate() -> None:
    from importlib import metadata

    installed = metadata.version("verl")
    if installed != SUPPORTED_VERL:
        raise RuntimeError(
            f"verl_rfpp.cpu patches verl {SUPPORTED_VERL} internals; verl {installed} is installed. "
            "The CPU backend (verl-rfpp demo) needs that exact verl version."
        )
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from verl_rfpp.cpu import agent, platform, rollout  # noqa: F401  (register the toy tool parser, cpu platform)

    RolloutReplicaRegistry.register(rollout.NAME, lambda: rollout.HFReplica)
    rollout_base._ROLLOUT_REGISTRY[(rollout.NAME, "async")] = "verl_rfpp.cpu.rollout.HFServerAdapter"
    patches.apply()


_activate()

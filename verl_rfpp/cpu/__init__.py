"""Opt-in CPU backend for verl 0.9.1 (never imported by the plugin's entry point).

Imported in every verl process through ``VERL_USE_EXTERNAL_MODULES=verl_rfpp.cpu``, which the
launcher (``verl-rfpp demo``) sets together with ``VERL_PLATFORM=cpu``. Importing it:

- registers a ``cpu`` platform (gloo collectives) in verl's platform registry;
- registers the ``hf_cpu`` rollout (transformers ``generate``) in verl's replica and adapter
  registries;
- applies the few patches for verl's CUDA-only assumptions (``patches.apply``).
"""

from __future__ import annotations

from verl_rfpp.cpu import patches

SUPPORTED_VERL = "0.9.1"


def _activate() -> None:
    from verl_rfpp.plugin import verl_version

    if verl_version() != SUPPORTED_VERL:
        raise RuntimeError(
            f"verl_rfpp.cpu patches verl {SUPPORTED_VERL} internals; verl {verl_version()} is installed. "
            "The CPU backend (verl-rfpp demo) needs that exact verl version."
        )
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from verl_rfpp.cpu import platform, rollout  # noqa: F401  (registers the cpu platform)

    RolloutReplicaRegistry.register(rollout.NAME, lambda: rollout.HFReplica)
    rollout_base._ROLLOUT_REGISTRY[(rollout.NAME, "async")] = "verl_rfpp.cpu.rollout.HFServerAdapter"
    patches.apply()


_activate()

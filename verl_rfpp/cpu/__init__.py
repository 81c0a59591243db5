"""Opt-in CPU backend for verl 0.9.0 and 0.9.1 (never imported by the plugin's entry point): the
``cpu`` platform, the ``hf_cpu`` rollout, the backend's patches and the ``demo`` launcher.

Only ``verl_rfpp.cpu.backend`` changes verl when imported (verl imports it through
``VERL_USE_EXTERNAL_MODULES=verl_rfpp.cpu.backend``); this package and its other modules change
nothing (tests/adapter/test_activation.py)."""

ROLLOUT_NAME = "hf_cpu"  # the hf_cpu rollout's name in verl's rollout registries and run configs

"""Whether verl loads the plugin: ``import verl`` imports every allowed ``verl.plugins`` entry
point, so ``verl_rfpp.plugin`` is in ``sys.modules`` right after it only if verl loaded it.
Asked before anything imports the plugin itself (``verl-rfpp check``, ``verl-rfpp doctor``)."""

from __future__ import annotations

import sys

PLUGIN_MODULE = "verl_rfpp.plugin"


def verl_loads_plugin() -> bool:
    """Import verl (loading its plugins); whether that imported ``verl_rfpp.plugin``."""
    import verl  # noqa: F401

    return PLUGIN_MODULE in sys.modules

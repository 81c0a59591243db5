"""The plugin's logger, and how its objects are named and recognised.

``MARKER`` (``verl_rfpp.adapter.patching``) is set on every wrapper the plugin puts into verl, so tests
and ``doctor`` can tell ours apart; ``public`` names the objects verl's registries hold.
"""

from __future__ import annotations

import logging
from typing import Any

from verl_rfpp.adapter.patching import MARKER, is_ours, marked

__all__ = ["MARKER", "PUBLIC_MODULE", "is_ours", "logger", "marked", "public"]

logger = logging.getLogger("verl_rfpp")

PUBLIC_MODULE = "verl_rfpp.plugin"  # where users and pickles find the objects verl's registries hold


def public(function: Any) -> Any:
    """Report ``function`` as ``verl_rfpp.plugin.<name>`` (it is re-exported there), the module
    name verl's registries, ``doctor`` and the traces show for our entries."""
    function.__module__ = PUBLIC_MODULE
    return function

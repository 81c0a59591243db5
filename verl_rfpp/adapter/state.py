"""The plugin's logger, and how its objects are named and recognised.

``MARKER`` (``verl_rfpp.adapter.patching``) is set on every wrapper the plugin puts into verl, so tests
and ``doctor`` can tell ours apart.
"""

from __future__ import annotations

import logging

from verl_rfpp.adapter.patching import MARKER, is_ours, marked

__all__ = ["MARKER", "PUBLIC_MODULE", "is_ours", "logger", "marked"]

logger = logging.getLogger("verl_rfpp")

PUBLIC_MODULE = "verl_rfpp.plugin"  # the activating module (verl.plugins entry point)

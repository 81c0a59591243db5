"""What the plugin replaced in verl, and how its own replacements are recognised.

``ORIGINALS`` keeps each verl object a hook replaced (``deactivate`` puts them back); ``MARKER``
is set on every replacement, so a second activation is a no-op and ``doctor`` can tell ours apart.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("verl_rfpp")

MARKER = "__verl_rfpp__"
PUBLIC_MODULE = "verl_rfpp.plugin"  # where users and pickles find the objects verl's registries hold

ORIGINALS: dict[str, Any] = {}


def marked(replacement: Any) -> Any:
    """Mark ``replacement`` as ours (see ``is_ours``) and return it."""
    setattr(replacement, MARKER, True)
    return replacement


def is_ours(obj: Any) -> bool:
    """Whether ``obj`` is one of the plugin's replacements."""
    return bool(getattr(obj, MARKER, False))


def public(function: Any) -> Any:
    """Report ``function`` as ``verl_rfpp.plugin.<name>`` (it is re-exported there), the module
    name verl's registries, ``doctor`` and the traces show for our entries."""
    function.__module__ = PUBLIC_MODULE
    return function

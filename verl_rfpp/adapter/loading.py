"""Whether verl loads the plugin: ``import verl`` imports every allowed ``verl.plugins`` entry
point, so ``verl_rfpp.plugin`` is in ``sys.modules`` right after it only if verl loaded it.
Asked before anything imports the plugin itself (``verl-rfpp check``, ``verl-rfpp doctor``).

``known_active`` answers the question ``verl-rfpp check`` asks of verl (is the plugin loaded, every
hook attached, both names ours: docs/contract.md section 6.5) without importing verl or torch,
where the installed distributions' metadata and files settle it; elsewhere check imports verl and
asks it (``verl_loads_plugin``, then the registry and the hooks themselves)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import sys
from importlib import metadata
from typing import Mapping, Optional

from verl_rfpp.adapter.runtime_env import DRIVER_VERSION_ENV, MODULES_ENV, PLUGINS_ENV
from verl_rfpp.adapter.state import PUBLIC_MODULE as PLUGIN_MODULE

ENTRY_POINT = "verl_rfpp"  # the name of our ``verl.plugins`` entry point (VERL_USE_EXTERNAL_PLUGINS lists it)


def verl_loads_plugin() -> bool:
    """Import verl (loading its plugins); whether that imported ``verl_rfpp.plugin``."""
    import verl  # noqa: F401

    return PLUGIN_MODULE in sys.modules


def allowed_by_policy(name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``VERL_USE_EXTERNAL_PLUGINS`` lets ``import verl`` load the entry point ``name``, read as
    verl 0.9 reads it (``auto``: all; ``none``: none; else the comma-separated names)."""
    policy = (os.environ if environ is None else environ).get(PLUGINS_ENV, "auto").strip().lower()
    if policy == "none":
        return False
    return policy == "auto" or name in {part.strip() for part in policy.split(",") if part.strip()}


def exclusion_cause() -> Optional[str]:
    """Why ``VERL_USE_EXTERNAL_PLUGINS`` keeps verl from loading this plugin, or ``None``."""
    if allowed_by_policy(ENTRY_POINT):
        return None
    policy = os.getenv(PLUGINS_ENV, "auto").strip().lower()
    return (f"the plugin is excluded by {PLUGINS_ENV}={policy!r}; set it to 'auto' or add '{ENTRY_POINT}' to "
            "the list")


def known_active() -> bool:
    """Whether ``import verl`` in this process's environment is known, without running it, to load this
    plugin with every hook attached and nothing else touching verl's registries; ``False``: not known
    (the caller imports verl and asks it). Known when all of these hold:

    - verl is a tested release (``versions.TESTED_VERL``: CI holds every hook attaching to it);
    - every file of verl is byte for byte what its distribution's RECORD lists (sha256): nothing
      edited after the install;
    - ``import verl`` runs no code but verl's and this plugin's: ``VERL_USE_EXTERNAL_MODULES`` is
      empty, and the only ``verl.plugins`` entry point ``VERL_USE_EXTERNAL_PLUGINS`` lets load is ours,
      naming ``verl_rfpp.plugin``, which is the module of this very package;
    - the plugin's import-time version check passes (``VERL_RFPP_DRIVER_VERSION`` unset or ours).

    Found once per process for each value of those variables and of ``sys.path``."""
    key = (*(os.environ.get(name) for name in (MODULES_ENV, PLUGINS_ENV, DRIVER_VERSION_ENV)), tuple(sys.path))
    if key not in _KNOWN:
        _KNOWN[key] = _known_active()
    return _KNOWN[key]


_KNOWN: dict[tuple, bool] = {}  # known_active's answers in this process


def _known_active() -> bool:
    from verl_rfpp import __version__
    from verl_rfpp.adapter.versions import verl_tested

    if os.environ.get(MODULES_ENV, "").strip() or os.environ.get(DRIVER_VERSION_ENV, __version__) != __version__:
        return False
    try:
        verl = metadata.distribution("verl")
        points = [point for point in metadata.entry_points(group="verl.plugins") if allowed_by_policy(point.name)]
    except (metadata.PackageNotFoundError, OSError, ValueError):
        return False
    if not verl_tested(verl.version) or [(point.name, point.value) for point in points] != [(ENTRY_POINT,
                                                                                           PLUGIN_MODULE)]:
        return False
    return _is_this_package(PLUGIN_MODULE) and _as_recorded(verl)


def _is_this_package(module: str) -> bool:
    """Whether ``import module`` finds it in the directory of the running ``verl_rfpp`` package."""
    here = os.path.dirname(os.path.abspath(sys.modules["verl_rfpp"].__file__ or ""))
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None and os.path.dirname(os.path.abspath(spec.origin)) == here


def _as_recorded(distribution: metadata.Distribution) -> bool:
    """Whether the distribution's files that its RECORD gives a hash (every file but RECORD itself
    and compiled ``.pyc``) hold those bytes; ``False`` when it lists none."""
    hashed = [path for path in distribution.files or () if path.hash is not None]
    for path in hashed:
        try:
            digest = hashlib.new(path.hash.mode, path.locate().read_bytes()).digest()
        except (OSError, ValueError):
            return False
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != path.hash.value:
            return False
    return bool(hashed)

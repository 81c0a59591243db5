"""The verl releases this plugin is written against (docs/contract.md section 8.5), read from the
installed distributions' metadata: no verl import (``verl-rfpp recipe`` and ``demo`` ask it first).

verl loads plugins through its ``verl.plugins`` entry point from release 0.9.0 on: an older verl
never imports us, so its own estimators run under our names. Every release with that loader is
supported; the tested ones are ``TESTED_VERL``. A newer, untested verl gets a WARNING, and the
activation checks (``verl_rfpp.adapter.table``) stop a run if it moved something the plugin relies on.
"""

from __future__ import annotations

import logging
from importlib import metadata
from typing import Optional

logger = logging.getLogger("verl_rfpp")  # the plugin's logger (verl_rfpp.adapter.state)

PLUGIN_LOADER_SINCE = (0, 9, 0)  # the first verl whose ``import verl`` loads ``verl.plugins`` entry points
TESTED_VERL = ("0.9.0", "0.9.1")  # CI runs the tests on each of these
SUPPORTED_VERL_TEXT = ">=0.9.0"


def verl_version() -> str:
    """The installed verl distribution's version string."""
    return metadata.version("verl")


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def has_plugin_loader(version: str) -> bool:
    """Whether verl ``version`` imports ``verl.plugins`` entry points at ``import verl``."""
    return _release(version) >= PLUGIN_LOADER_SINCE


def verl_supported(version: str) -> bool:
    """Whether ``version`` lies in the supported range ``SUPPORTED_VERL_TEXT`` (it has the loader)."""
    return has_plugin_loader(version)


def verl_tested(version: str) -> bool:
    """Whether ``version`` is one of the releases the tests run on (pre-releases of them included)."""
    return _release(version) in {_release(tested) for tested in TESTED_VERL}


def no_loader_problem(version: Optional[str] = None) -> Optional[str]:
    """Why verl ``version`` (the installed one by default) never loads this plugin, or ``None``."""
    version = verl_version() if version is None else version
    if has_plugin_loader(version):
        return None
    since = ".".join(map(str, PLUGIN_LOADER_SINCE))
    return (
        f"verl {version} has no plugin loader (verl loads plugins through its verl.plugins entry "
        f"point from {since} on), so `import verl` never imports verl-rfpp and verl's own "
        f"estimators run under our names. Fix: pip install 'verl>={since}' (tested: "
        f"{', '.join(TESTED_VERL)}); loading verl-rfpp through VERL_USE_EXTERNAL_MODULES on an older "
        "verl is not supported"
    )


def version_check(version: Optional[str] = None) -> tuple[str, bool]:
    """``verl-rfpp doctor``'s version line and whether it is a pass: a verl without the plugin
    loader fails; a newer, untested one passes with a note (the hook lines below it decide)."""
    version = verl_version() if version is None else version
    problem = no_loader_problem(version)
    if problem is not None:
        return problem, False
    if verl_tested(version):
        return f"verl {version}: a tested release ({', '.join(TESTED_VERL)})", True
    return (f"verl {version}: supported ({SUPPORTED_VERL_TEXT}) but untested (tested: "
            f"{', '.join(TESTED_VERL)}); the hook lines show whether what the plugin relies on is there"), True


def check_verl_version() -> None:
    """Log a WARNING when the installed verl is not a tested release (an ERROR without the loader)."""
    version = verl_version()
    problem = no_loader_problem(version)
    if problem is not None:
        logger.error("verl_rfpp: %s.", problem)
    elif not verl_tested(version):
        logger.warning(
            "verl_rfpp is tested with verl %s but verl %s is installed; a verl internal the plugin "
            "relies on that moved stops the run at config validation (ActivationError naming it). "
            "Run `verl-rfpp doctor`.",
            ", ".join(TESTED_VERL),
            version,
        )

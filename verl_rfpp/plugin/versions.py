"""The verl releases this plugin is written against."""

from __future__ import annotations

from importlib import metadata

from verl_rfpp.plugin.state import logger

SUPPORTED_VERL = ((0, 9, 1), (0, 10, 0))  # [lower, upper)
SUPPORTED_VERL_TEXT = ">=0.9.1,<0.10"


def verl_version() -> str:
    """The installed verl distribution's version string."""
    return metadata.version("verl")


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def verl_supported(version: str) -> bool:
    """Whether ``version`` lies in the supported range ``SUPPORTED_VERL_TEXT``."""
    lower, upper = SUPPORTED_VERL
    return lower <= _release(version) < upper


def check_verl_version() -> None:
    """Log a WARNING when the installed verl is outside the supported range."""
    version = verl_version()
    if not verl_supported(version):
        logger.warning(
            "verl_rfpp supports verl %s but verl %s is installed; the registry, config keys and "
            "trainer paths it relies on may differ. Install a supported verl or run "
            "`verl-rfpp doctor`.",
            SUPPORTED_VERL_TEXT,
            version,
        )

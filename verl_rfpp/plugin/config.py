"""verl's config validation: ``main_ppo`` refuses, before Ray starts, a config that ``verdict.judge``
refuses (ours misspelt, ours but not active, ours breaking docs/contract.md section 6), and logs
its warnings. Any other config, and one the verdict cannot read (not an OmegaConf node, an
``adv_estimator`` that does not resolve), goes to verl's own validation untouched."""

from __future__ import annotations

import functools
from typing import Any, Callable

from verl_rfpp.plugin import verdict
from verl_rfpp.plugin.hooks import Internal
from verl_rfpp.plugin.state import ORIGINALS, is_ours, logger, marked

VERL_CONFIG = "verl.utils.config"
INTERNALS = (Internal(VERL_CONFIG, "validate_config", ("config",)),)

def _validating(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        found = verdict.judge(config)
        if found.refusal is not None:
            raise found.refusal
        for note in found.warnings:
            logger.warning("verl_rfpp: %s", note)
        return original(config, *args, **kwargs)

    return marked(validate_config)


def wrap_validate_config() -> None:
    """Wrap ``verl.utils.config.validate_config`` and its re-export ``verl.utils.validate_config``.

    ``main_ppo`` binds the name at its import, after plugins load, so it sees the wrapper.
    """
    import verl.utils
    import verl.utils.config as verl_config

    current = verl_config.validate_config
    if is_ours(current):
        return
    ORIGINALS["validate_config"] = current
    wrapped = _validating(current)
    verl_config.validate_config = wrapped
    verl.utils.validate_config = wrapped


def unwrap_validate_config() -> None:
    import verl.utils
    import verl.utils.config as verl_config

    if "validate_config" in ORIGINALS:
        verl_config.validate_config = verl.utils.validate_config = ORIGINALS.pop("validate_config")


def validate_config_wrapped() -> bool:
    import verl.utils.config as verl_config

    return is_ours(verl_config.validate_config)

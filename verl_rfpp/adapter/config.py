"""verl's config validation: ``main_ppo`` refuses, before Ray starts, a config that ``verdict.judge_config``
refuses (ours misspelt, ours but not active, ours breaking docs/contract.md section 6), and logs
its warnings. Any other config, and one the verdict cannot read (not an OmegaConf node, an
``adv_estimator`` that does not resolve), goes to verl's own validation untouched."""

from __future__ import annotations

import functools
from typing import Any, Callable

from verl_rfpp.adapter import verdict
from verl_rfpp.adapter.patching import Internal, marked
from verl_rfpp.adapter.state import logger

VERL_CONFIG = "verl.utils.config"
INTERNALS = (Internal(VERL_CONFIG, "validate_config", ("config",)),)
# bind it by name: verl.utils re-exports it; main_ppo & co. bind it at import, after plugins load
VALIDATE_CONFIG_IMPORTERS = ("verl.utils", "verl.trainer.main_ppo", "verl.trainer.main_ppo_v0",
                             "verl.experimental.one_step_off_policy.main_ppo")

def _validating(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        found = verdict.judge_config(config)
        if found.refusal is not None:
            raise found.refusal
        for note in found.warnings:
            logger.warning("verl_rfpp: %s", note)
        return original(config, *args, **kwargs)

    return marked(validate_config)

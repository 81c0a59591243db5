"""The verl adapter: the only package that knows verl's internals (docs/contract.md sections 6-8).

verl imports this package through the ``verl.plugins`` entry point (``ep.load()`` imports and
never calls), in every process that imports verl. Importing it, once and idempotently, attaches
one hook per verl subsystem, each in its own module:

- ``config``: wraps ``verl.utils.config.validate_config`` so ``main_ppo`` refuses a violating
  config before Ray starts (section 6) and fails when our estimators are not the ones registered;
- ``registries``: replaces verl's ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline``
  registry entries, and ``actor_loss`` registers the ``rfpp`` policy loss (section 5), right
  after verl first imports ``core_algos`` (``imports.after_import``: importing it from here would
  cost every verl process about 1 s);
- ``actor_loss``: verl's ``ppo_loss`` selects the masked inputs of an ``rfpp`` actor (section
  1.3; verl's k2 term multiplies by the mask), wrapped when verl imports its losses module;
- ``engine``: the ``rfpp`` actor loss's response mean divides by the mini-batch's responses, not
  by verl's row count (``BaseEngine.train_batch``, wrapped when verl's engine module is imported);
- ``tracking``: ``Tracking.log`` (when verl imports it) passes the ``rfpp/`` metrics to verl's
  loggers (section 7).

verl swallows plugin load errors at DEBUG level, so every failure here is logged at ERROR on
logger ``verl_rfpp`` (at import, before it propagates; in a post-import patch, instead of failing
verl's import). ``deactivate()`` undoes all of it (tests).
"""

from __future__ import annotations

from verl_rfpp import validation
from verl_rfpp.plugin import imports
from verl_rfpp.plugin.actor_loss import (
    patch_ppo_loss,
    ppo_loss_patched,
    register_policy_loss,
    registered_policy_loss,
    rfpp_policy_loss,
    unpatch_ppo_loss,
    unregister_policy_loss,
)
from verl_rfpp.plugin.config import unwrap_validate_config, validate_config_wrapped, wrap_validate_config
from verl_rfpp.plugin.engine import ENGINE_BASE, engine_patched, patch_engine, unpatch_engine
from verl_rfpp.plugin.registries import (
    ENTRY_POINT,
    ESTIMATORS,
    TRACE_ENV,
    ActivationError,
    activation_problem,
    compute_reinforce_plus_plus_advantage,
    compute_reinforce_plus_plus_baseline_advantage,
    ensure_active,
    exclusion_cause,
    not_loaded_problem,
    register_estimators,
    registered_ours,
    unregister_estimators,
)
from verl_rfpp.plugin.registries import checked_in_process as _checked_in_process
from verl_rfpp.plugin.state import MARKER, logger
from verl_rfpp.plugin.state import ORIGINALS as _ORIGINALS
from verl_rfpp.plugin.tracking import TRACKING, hook_tracking, tracking_hooked, unhook_tracking
from verl_rfpp.plugin.workers import WorkerPluginError, hook_workers, unhook_workers, workers_hooked
from verl_rfpp.plugin.versions import SUPPORTED_VERL, SUPPORTED_VERL_TEXT, check_verl_version, verl_supported, verl_version

CORE_ALGOS = "verl.trainer.ppo.core_algos"  # the estimator and policy-loss registries

__all__ = [
    "ActivationError", "CORE_ALGOS", "ENGINE_BASE", "ENTRY_POINT", "ESTIMATORS", "MARKER", "SUPPORTED_VERL",
    "SUPPORTED_VERL_TEXT", "TRACE_ENV", "TRACKING", "activate", "activation_problem", "check_verl_version",
    "compute_reinforce_plus_plus_advantage", "compute_reinforce_plus_plus_baseline_advantage", "deactivate",
    "engine_patched", "ensure_active", "patch_ppo_loss", "ppo_loss_patched", "unpatch_ppo_loss", "exclusion_cause", "hook_tracking", "hooks_status", "not_loaded_problem",
    "patch_engine", "register_estimators", "register_policy_loss", "registered_ours", "rfpp_policy_loss",
    "unpatch_engine", "verl_supported", "verl_version",
]


def _register_all(core_algos) -> None:
    register_estimators()
    register_policy_loss()


def hooks_status() -> dict[str, bool]:
    """Which of our pieces verl currently resolves to ours (for ``verl-rfpp doctor``)."""
    status = {f"estimator {name}": registered_ours(name) for name in ESTIMATORS}
    status["validate_config wrapper"] = validate_config_wrapped()
    status[f"policy loss {validation.POLICY_LOSS_MODE}"] = registered_policy_loss()
    status["Tracking.log metrics hook"] = tracking_hooked()
    status["ppo_loss reads no masked slot (rfpp actor)"] = ppo_loss_patched()
    status["response-count denominator (engine train_batch)"] = engine_patched()
    status["worker plugin check (trainer init_workers)"] = workers_hooked()
    return status


def activate() -> None:
    """Everything the plugin does at import, in an order that keeps a half-failed load loud:
    the validation wrapper goes first, so a later failure is caught by its activation guard."""
    try:
        check_verl_version()
        wrap_validate_config()
        imports.after_import(CORE_ALGOS, _register_all)
        imports.after_import(TRACKING, lambda module: hook_tracking())
        patch_ppo_loss()
        patch_engine()
        hook_workers()
    except Exception:
        logger.exception(
            "verl_rfpp could not activate; verl's own reinforce_plus_plus and "
            "reinforce_plus_plus_baseline (which differ from the contract) may run instead. "
            "Run `verl-rfpp doctor`."
        )
        raise


def deactivate() -> None:
    """Undo ``activate()``: verl's own entries, ``validate_config`` and ``Tracking.log`` return."""
    imports.remove_finder()  # nothing pending runs any more
    unregister_estimators()
    unwrap_validate_config()
    unhook_tracking()
    unregister_policy_loss()
    unpatch_ppo_loss()
    unpatch_engine()
    unhook_workers()
    _checked_in_process.clear()


activate()

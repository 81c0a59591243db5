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

Each hook states the verl internals it relies on (``INTERNALS`` in its module) and checks all of
them before it patches anything (``hooks``): a verl that moved one gets that hook recorded as
failed, never half-patched, and the activation guard refuses our estimators naming the internal.
verl swallows plugin load errors at DEBUG level, so every failure here is logged at ERROR on
logger ``verl_rfpp`` (at import, before it propagates; in a post-import patch, instead of failing
verl's import). ``deactivate()`` undoes all of it (tests).
"""

from __future__ import annotations

import importlib

from verl_rfpp import validation
from verl_rfpp.plugin import actor_loss, config, engine, hooks, imports, registries, runtime_env, sessions, tracking
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
    CORE_ALGOS,
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
from verl_rfpp.plugin.versions import (
    SUPPORTED_VERL_TEXT,
    TESTED_VERL,
    check_verl_version,
    no_loader_problem,
    verl_supported,
    verl_tested,
    verl_version,
    version_check,
)

__all__ = [
    "ActivationError", "CORE_ALGOS", "ENGINE_BASE", "ENTRY_POINT", "ESTIMATORS", "HOOKS", "MARKER",
    "SUPPORTED_VERL_TEXT", "TESTED_VERL", "TRACE_ENV", "TRACKING", "activate", "activation_problem",
    "check_verl_version", "compute_reinforce_plus_plus_advantage", "compute_reinforce_plus_plus_baseline_advantage",
    "WorkerPluginError", "deactivate", "engine_patched", "patch_ppo_loss", "ppo_loss_patched", "unpatch_ppo_loss", "ensure_active", "exclusion_cause", "hook_tracking", "hooks_status",
    "no_loader_problem", "not_loaded_problem", "patch_engine", "register_estimators", "register_policy_loss",
    "registered_ours", "rfpp_policy_loss", "unpatch_engine", "verl_supported", "verl_tested", "verl_version",
    "version_check",
]

ESTIMATORS_HOOK = "estimator registry entries"

# Every hook, in activation order: the validation wrapper first, so that a later failure is
# caught by its activation guard.
HOOKS = (
    hooks.Hook("validate_config wrapper", config.VERL_CONFIG, config.INTERNALS, wrap_validate_config,
               validate_config_wrapped),
    hooks.Hook(ESTIMATORS_HOOK, CORE_ALGOS, registries.INTERNALS, register_estimators,
               lambda: all(registered_ours(name) for name in ESTIMATORS)),
    hooks.Hook(f"policy loss {validation.POLICY_LOSS_MODE}", CORE_ALGOS, actor_loss.INTERNALS,
               register_policy_loss, registered_policy_loss),
    hooks.Hook("Tracking.log metrics hook", TRACKING, tracking.INTERNALS, hook_tracking, tracking_hooked),
    hooks.Hook("ppo_loss reads no masked slot (rfpp actor)", actor_loss.LOSSES, actor_loss.PPO_LOSS_INTERNALS,
               patch_ppo_loss, ppo_loss_patched),
    hooks.Hook("response-count denominator (engine train_batch)", ENGINE_BASE, engine.INTERNALS, patch_engine,
               engine_patched),
    hooks.Hook("Ray job loads the driver's plugin everywhere (runtime_env)", runtime_env.CONSTANTS,
               runtime_env.INTERNALS, runtime_env.hook_runtime_env, runtime_env.runtime_env_hooked),
    hooks.Hook("baseline counts each agent session once (v1 trainer)", sessions.V1_TRAINER, sessions.INTERNALS,
               sessions.hook_sessions, sessions.sessions_hooked),
)


def hooks_status() -> dict[str, bool]:
    """``verl-rfpp doctor``'s hook lines: each hook (first attaching the ones still waiting for
    their verl module) and whether verl resolves it to ours; a failed hook's line names each
    missing or changed internal. The estimator hook shows one line per estimator."""
    hooks.attach_pending()
    status: dict[str, bool] = {}
    for hook in HOOKS:
        problems = hooks.FAILURES.get(hook.name)
        if problems:
            status[f"{hook.name}: {'; '.join(problems)}"] = False
        elif hook.name == ESTIMATORS_HOOK:
            status.update({f"estimator {estimator}": registered_ours(estimator) for estimator in ESTIMATORS})
        else:
            status[hook.name] = hook.attached()
    status["worker plugin check (trainer init_workers)"] = workers_hooked()
    return status


def activate() -> None:
    """Everything the plugin does at import: the version check, then every hook of ``HOOKS``
    (each now if its verl module is loaded, else right after verl imports it)."""
    try:
        runtime_env.check_driver_version()
        check_verl_version()
        # verl's config module is light and loaded with verl: import it now, so the wrapper
        # attaches here and not in the middle of verl.utils' own import (which re-exports it).
        importlib.import_module(config.VERL_CONFIG)
        for hook in HOOKS:
            hooks.install(hook)
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
    hooks.uninstall_all()
    imports.remove_finder()  # nothing pending runs any more
    unregister_estimators()
    unwrap_validate_config()
    unhook_tracking()
    unregister_policy_loss()
    unpatch_ppo_loss()
    unpatch_engine()
    unhook_workers()
    runtime_env.unhook_runtime_env()
    sessions.unhook_sessions()
    _checked_in_process.clear()


activate()

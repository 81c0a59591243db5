"""The verl adapter: the only package that knows verl's internals (docs/contract.md sections 6-8).

verl imports this package through the ``verl.plugins`` entry point (``ep.load()`` imports and
never calls), in every process that imports verl. Importing it, once and idempotently, applies
every patch of ``table.TABLE`` (one record per change to verl; the wrappers live in the module of
their verl subsystem):

- ``config``: wraps ``verl.utils.config.validate_config`` so ``main_ppo`` refuses a violating
  config before Ray starts (section 6) and fails when our estimators are not the ones registered;
- ``registries``: replaces verl's ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline``
  registry entries, and ``actor_loss`` registers the ``rfpp`` policy loss (section 5), right
  after verl first imports ``core_algos`` (the table's post-import finder: importing it from here
  would cost every verl process about 1 s);
- ``actor_loss``: verl's ``ppo_loss`` selects the masked inputs of an ``rfpp`` actor (section
  1.3; verl's k2 term multiplies by the mask), wrapped when verl imports its losses module;
- ``engine``: the ``rfpp`` actor loss's response mean divides by the mini-batch's responses, not
  by verl's row count (``BaseEngine.train_batch``, wrapped when verl's engine module is imported);
- ``tracking``: ``Tracking.log`` (when verl imports it) passes the ``rfpp/`` metrics to verl's
  loggers (section 7);
- ``runtime_env``: the Ray job of a run of ours loads the plugin on every node (section 8.6);
- ``workers``: a run of ours checks, before its first rollout, that every worker runs this plugin
  at the driver's version (section 8.4);
- ``sessions``: in verl's v1 advantage step, REINFORCE++-baseline counts each agent session once
  in its prompt's group mean (section 3.7).

Each patch states the verl internals it relies on and checks all of them before it changes
anything (``verl_rfpp.patching``): a verl that moved one gets that patch recorded as failed,
never half-patched, and the activation guard refuses our estimators naming the internal. verl
swallows plugin load errors at DEBUG level, so every failure here is logged at ERROR on logger
``verl_rfpp`` (at import, before it propagates; in a post-import patch, instead of failing verl's
import). ``deactivate()`` undoes all of it, every binding included (tests).
"""

from __future__ import annotations

import importlib

from verl_rfpp.patching import status
from verl_rfpp.plugin import config, runtime_env, table
from verl_rfpp.plugin.actor_loss import rfpp_policy_loss
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
    registered_ours,
)
from verl_rfpp.plugin.registries import checked_in_process as _checked_in_process
from verl_rfpp.plugin.state import MARKER, logger
from verl_rfpp.plugin.table import PATCHES, TABLE
from verl_rfpp.plugin.workers import WorkerPluginError
from verl_rfpp.versions import (
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
    "ActivationError", "CORE_ALGOS", "ENTRY_POINT", "ESTIMATORS", "MARKER", "PATCHES", "SUPPORTED_VERL_TEXT",
    "TABLE", "TESTED_VERL", "table", "TRACE_ENV", "WorkerPluginError", "activate", "activation_problem",
    "check_verl_version", "compute_reinforce_plus_plus_advantage", "compute_reinforce_plus_plus_baseline_advantage",
    "deactivate", "ensure_active", "exclusion_cause", "hooks_status", "no_loader_problem", "not_loaded_problem",
    "registered_ours", "rfpp_policy_loss", "verl_supported", "verl_tested", "verl_version", "version_check",
]


def hooks_status() -> dict[str, bool]:
    """``verl-rfpp doctor``'s lines: every patch of ``TABLE`` (first importing the verl modules
    still waited for, so each has applied or failed) and whether it is in; a failed one names each
    missing or changed internal."""
    return status(TABLE)


def activate() -> None:
    """Everything the plugin does at import: the version checks, then every patch of ``TABLE``
    (each now if its verl module is loaded, else right after verl imports it)."""
    try:
        runtime_env.check_driver_version()
        check_verl_version()
        # verl's config module is light and loaded with verl: import it now, so the wrapper
        # attaches here and not in the middle of verl.utils' own import (which re-exports it).
        importlib.import_module(config.VERL_CONFIG)
        for patch in TABLE:
            patch.install()
    except Exception:
        logger.exception(
            "verl_rfpp could not activate; verl's own reinforce_plus_plus and "
            "reinforce_plus_plus_baseline (which differ from the contract) may run instead. "
            "Run `verl-rfpp doctor`."
        )
        raise


def deactivate() -> None:
    """Undo ``activate()``: every patch of ``TABLE``, last first; verl's objects return to every
    slot and every module that bound them by name."""
    for patch in reversed(TABLE):
        patch.undo()
    _checked_in_process.clear()


activate()

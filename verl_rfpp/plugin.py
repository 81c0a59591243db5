"""The plugin's one activating module (docs/contract.md section 8.1): verl imports it through the
``verl.plugins`` entry point (``ep.load()`` imports and never calls), in every process that
imports verl, and importing it, once and idempotently, applies every patch of the verl adapter's
table (``verl_rfpp.adapter.table.TABLE``; what each does: ``verl_rfpp.adapter``). No other module
of the package changes verl when imported (tests/adapter/test_activation.py).

It is also the public home of the adapter's names (``deactivate()`` undoes every patch, for tests).
verl's estimator registry holds a ``GuardedEstimator`` per record of ``verl_rfpp.catalog``, its
policy-loss registry ``verl_rfpp.losses.rfpp_policy_loss``; both pickle by reference to where they
are defined, so nothing needs re-exporting here.
"""

from __future__ import annotations

import importlib

from verl_rfpp.adapter import config, runtime_env, table
from verl_rfpp.adapter.loading import ENTRY_POINT
from verl_rfpp.adapter.patching import status
from verl_rfpp.adapter.registries import (
    CORE_ALGOS,
    TRACE_ENV,
    ActivationError,
    GuardedEstimator,
    activation_problem,
    ensure_active,
    entries,
    exclusion_cause,
    not_loaded_problem,
    registered_ours,
)
from verl_rfpp.adapter.registries import checked_in_process as _checked_in_process
from verl_rfpp.adapter.state import MARKER, logger
from verl_rfpp.adapter.table import PATCHES, TABLE
from verl_rfpp.adapter.versions import (
    SUPPORTED_VERL_TEXT,
    TESTED_VERL,
    check_verl_version,
    no_loader_problem,
    verl_supported,
    verl_tested,
    verl_version,
    version_check,
)
from verl_rfpp.adapter.workers import WorkerPluginError

__all__ = [
    "activate", "activation_problem", "ActivationError", "check_verl_version", "CORE_ALGOS", "deactivate",
    "ensure_active", "entries", "ENTRY_POINT", "exclusion_cause", "GuardedEstimator", "hooks_status", "MARKER",
    "no_loader_problem", "not_loaded_problem", "PATCHES", "registered_ours", "SUPPORTED_VERL_TEXT", "table",
    "TABLE", "TESTED_VERL", "TRACE_ENV", "verl_supported", "verl_tested", "verl_version", "version_check",
    "WorkerPluginError",
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
            "verl_rfpp could not activate; verl's own estimators of our names (%s), which differ from the "
            "contract, may run instead. Run `verl-rfpp doctor`.",
            ", ".join(patch.slot.key for patch in table.ESTIMATOR_PATCHES),
        )
        raise


def deactivate() -> None:
    """Undo ``activate()``: every patch of ``TABLE``, last first; verl's objects return to every
    slot and every module that bound them by name."""
    for patch in reversed(TABLE):
        patch.undo()
    _checked_in_process.clear()


activate()

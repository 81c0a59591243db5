"""verl's advantage-estimator registry: an entry for each estimator record (``verl_rfpp.catalog``),
and whether verl resolves to them (docs/contract.md sections 8.1, 8.2, 9).

The registry is reached through ``core_algos``' module attribute at call time (verl's own tests
rebind the dict). ``register_adv_est`` refuses a name already bound, so the entries are assigned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import torch

from verl_rfpp import catalog, estimators, validation
from verl_rfpp.adapter import sessions
from verl_rfpp.adapter.loading import exclusion_cause
from verl_rfpp.adapter.patching import MARKER, Internal
from verl_rfpp.adapter.versions import no_loader_problem
from verl_rfpp.core.metrics import STEP_METRICS
from verl_rfpp.errors import ActivationError

CORE_ALGOS = "verl.trainer.ppo.core_algos"  # the estimator and policy-loss registries
INTERNALS = (
    Internal(CORE_ALGOS, "ADV_ESTIMATOR_REGISTRY", kind=dict),
    Internal(CORE_ALGOS, "get_adv_estimator_fn"),
)
TRACE_ENV = "VERL_RFPP_TRACE"  # a file path: one line per estimator call (name, pid, N)

checked_in_process: set[str] = set()


def _guard_first_call(name: str, config: Any) -> None:
    """Once per process: the activation guard, then the contract on the whole run config.

    ``config`` is the ``algorithm`` node; ``_get_root()`` reaches the run config (OmegaConf's
    private API, the only way from inside the estimator). Plain dicts, dataclasses and ``None``
    have no root: the check is skipped silently (docs/contract.md section 9).
    """
    if name in checked_in_process:
        return
    root = config._get_root() if hasattr(config, "_get_root") else None
    run_config = root if root is not None and validation.estimator_of(root) is not None else None
    ensure_active(name, run_config)
    if run_config is not None:
        validation.enforce(run_config)
    checked_in_process.add(name)


def _after_call(name: str, result: estimators.EstimatorResult) -> None:
    """Keep the step's statistics for the logger; with ``VERL_RFPP_TRACE`` set, append a line
    ``<name> pid=<pid> valid_tokens=<N> raw_adv_std=<std>`` to that file (proof of what ran where)."""
    STEP_METRICS.record(result.stats)
    trace = os.environ.get(TRACE_ENV)
    if trace:
        with open(trace, "a") as handle:
            handle.write(f"{name} pid={os.getpid()} valid_tokens={int(result.stats.valid_token_count)} "
                         f"raw_adv_std={float(result.stats.raw_std):.6g}\n")


@dataclass(frozen=True)
class GuardedEstimator:
    """verl's registry entry for one estimator record (docs/contract.md sections 2-4, 8, 9): its
    pure function behind the activation guard and the run config's check (once per process), its
    statistics kept for verl's logger. The record's family decides the call: the group family gets
    ``index`` (verl's uids) and the v1 step's agent sessions (``sessions.current``, section 3.7),
    the returns family ``config`` (the ``algorithm`` node, ``gamma``). An instance pickles by its
    record, so Ray may ship it to any worker. Returns ``(advantages, returns)``, both
    ``(bs, response_length)``."""

    estimator: catalog.Estimator

    def __repr__(self) -> str:
        return f"GuardedEstimator({self.estimator.name})"

    def __call__(self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None,
                 index: Any = None, session: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        name = self.estimator.name
        _guard_first_call(name, config)
        if self.estimator.family.groups:
            if session is None and isinstance(token_level_rewards, torch.Tensor) and token_level_rewards.dim() >= 1:
                session = sessions.current(token_level_rewards.shape[0])
            result = self.estimator.compute()(token_level_rewards, response_mask, index, session=session)
        else:
            result = self.estimator.compute()(token_level_rewards, response_mask, config)
        _after_call(name, result)
        return result.advantages, result.returns


setattr(GuardedEstimator, MARKER, True)


def entries() -> dict[str, GuardedEstimator]:
    """verl's registry entry of every estimator record, by name."""
    return {estimator.name: GuardedEstimator(estimator) for estimator in catalog.ESTIMATORS}


def registered_ours(name: str) -> bool:
    """Whether verl's registry resolves ``name`` to our estimator."""
    from verl.trainer.ppo import core_algos

    return core_algos.ADV_ESTIMATOR_REGISTRY.get(name) == GuardedEstimator(catalog.estimator(name))


def activation_problem(name: str, config: Any = None) -> Optional[str]:
    """Why a run of our estimator ``name`` would not be the contract's, or ``None``: a hook that
    could not attach (a verl internal it relies on is missing or changed), or
    ``get_adv_estimator_fn(name)`` not ours. (A key of the run config the rules read that is
    missing, removed by the user or renamed by verl, is a violation of section 6.2.9.)"""
    from verl_rfpp.adapter.patching import installed, lacking  # the table's patches, once the plugin installed them

    moved = lacking(installed())
    if moved is not None:
        return f"verl_rfpp: {moved}. Check with: verl-rfpp doctor"
    from verl.trainer.ppo import core_algos

    if registered_ours(name):
        return None
    bound = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
    cause = exclusion_cause()
    if cause is None:
        if bound is None or getattr(bound, "__module__", "") == "verl.trainer.ppo.core_algos":
            cause = (
                "the verl_rfpp plugin did not load or failed while loading (verl hides plugin "
                "errors at DEBUG); check that verl-rfpp is installed in this environment"
            )
        else:
            cause = (
                f"another plugin overrode it with {bound.__module__}.{bound.__qualname__}; "
                "uninstall it or exclude it through VERL_USE_EXTERNAL_PLUGINS"
            )
    return _problem(name, cause)


def _problem(name: str, cause: str) -> str:
    return (
        f"verl_rfpp: verl's registry does not resolve {name!r} to verl-rfpp's estimator: {cause}. "
        "Check with: verl-rfpp doctor"
    )


def not_loaded_problem(name: str) -> str:
    """The activation problem of ``name`` when ``import verl`` did not load this module."""
    cause = no_loader_problem() or exclusion_cause() or (
        "verl did not load it through its verl.plugins entry point; check that verl-rfpp is "
        "installed in this environment"
    )
    return _problem(name, cause)


def ensure_active(name: str, config: Any = None) -> None:
    """Raise ``ActivationError`` when a run of ``name`` would not be ours (``activation_problem``)."""
    problem = activation_problem(name, config)
    if problem is not None:
        raise ActivationError(problem)

"""The verl adapter: the only module that knows verl's internals (docs/contract.md sections 6-8).

verl imports this module through the ``verl.plugins`` entry point (``ep.load()`` imports and never
calls), in every process that imports verl. Importing it, once and idempotently:

- wraps ``verl.utils.config.validate_config`` so ``main_ppo`` refuses a violating config before
  Ray starts (docs/contract.md section 6) and fails when our estimators are not the ones registered;
- replaces verl's ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline`` registry entries
  and registers the ``rfpp`` policy loss (the plain clipped surrogate, docs/contract.md section 5),
  right after verl first imports ``core_algos`` (``after_import``: importing it from here would
  cost every verl process about 1 s);
- makes the ``rfpp`` actor loss's response mean divide by the mini-batch's responses, not by
  verl's row count (``BaseEngine.train_batch``, wrapped when verl's engine module is imported);
- hooks ``Tracking.log`` (when verl imports it) so the ``rfpp/`` metrics reach verl's loggers
  (docs/contract.md section 7).

verl swallows plugin load errors at DEBUG level, so every failure here is logged at ERROR on
logger ``verl_rfpp`` (at import, before it propagates; in a post-import patch, instead of failing
verl's import). ``deactivate()`` undoes all of it (tests).
"""

from __future__ import annotations

import functools
import importlib.abc
import logging
import os
import sys
from importlib import metadata
from typing import Any, Callable, Optional

import torch

from verl_rfpp import estimators, losses, validation
from verl_rfpp.errors import RfppError
from verl_rfpp.metrics import STEP_METRICS

logger = logging.getLogger("verl_rfpp")

SUPPORTED_VERL = ((0, 9, 1), (0, 10, 0))  # [lower, upper)
SUPPORTED_VERL_TEXT = ">=0.9.1,<0.10"
ENTRY_POINT = "verl_rfpp"
MARKER = "__verl_rfpp__"

TRACE_ENV = "VERL_RFPP_TRACE"  # a file path: one line per estimator call (name, pid, N)

_ORIGINALS: dict[str, Any] = {}
_checked_in_process: set[str] = set()
_logged_once: set[str] = set()


class ActivationError(RfppError):
    """verl's registry does not resolve one of our names to our estimator (docs/contract.md section 8)."""


def _guard_first_call(name: str, config: Any) -> None:
    """Once per process: the activation guard, then the contract on the whole run config.

    ``config`` is the ``algorithm`` node; ``_get_root()`` reaches the run config (OmegaConf's
    private API, the only way from inside the estimator). Plain dicts, dataclasses and ``None``
    have no root: the check is skipped silently (docs/contract.md section 9).
    """
    if name in _checked_in_process:
        return
    ensure_active(name)
    root = config._get_root() if hasattr(config, "_get_root") else None
    if root is not None and validation.estimator_of(root) is not None:
        validation.enforce(root)
    _checked_in_process.add(name)


def _after_call(name: str, result: estimators.EstimatorResult) -> None:
    """Keep the step's statistics for the logger; with ``VERL_RFPP_TRACE`` set, append a line
    ``<name> pid=<pid> valid_tokens=<N> raw_adv_std=<std>`` to that file (proof of what ran where)."""
    STEP_METRICS.record(result.stats)
    trace = os.environ.get(TRACE_ENV)
    if trace:
        with open(trace, "a") as handle:
            handle.write(f"{name} pid={os.getpid()} valid_tokens={int(result.stats.valid_token_count)} "
                         f"raw_adv_std={float(result.stats.raw_std):.6g}\n")


def compute_reinforce_plus_plus_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's registry entry ``reinforce_plus_plus`` (docs/contract.md sections 2, 4, 9).

    Args:
        token_level_rewards: ``(bs, response_length)``.
        response_mask: ``(bs, response_length)``.
        config: the ``algorithm`` node (``gamma``); ``None`` means ``gamma = 1``.

    Returns:
        ``(advantages, returns)``, both ``(bs, response_length)``: ``A_hat`` and ``G``.
    """
    _guard_first_call("reinforce_plus_plus", config)
    result = estimators.reinforce_plus_plus(token_level_rewards, response_mask, config)
    _after_call("reinforce_plus_plus", result)
    return result.advantages, result.returns


def compute_reinforce_plus_plus_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's registry entry ``reinforce_plus_plus_baseline`` (docs/contract.md sections 3, 4, 9).

    Args:
        token_level_rewards: ``(bs, response_length)``.
        response_mask: ``(bs, response_length)``.
        config: the ``algorithm`` node (unused by the estimate itself).
        index: ``(bs,)`` uids, verl's ``data.non_tensor_batch["uid"]``.

    Returns:
        ``(advantages, returns)``, both ``(bs, response_length)``: ``A_hat`` and ``m * C``.
    """
    _guard_first_call("reinforce_plus_plus_baseline", config)
    result = estimators.reinforce_plus_plus_baseline(token_level_rewards, response_mask, index)
    _after_call("reinforce_plus_plus_baseline", result)
    return result.advantages, result.returns


ESTIMATORS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "reinforce_plus_plus": compute_reinforce_plus_plus_advantage,
    "reinforce_plus_plus_baseline": compute_reinforce_plus_plus_baseline_advantage,
}


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


def rfpp_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = validation.RESPONSE_MEAN,
    config: Any = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy-loss mode ``rfpp``: the clipped surrogate of docs/contract.md section 5, response mean.

    Args:
        old_log_prob, log_prob, advantages, response_mask: ``(bs, response_length)``.
        loss_agg_mode: must be ``seq-mean-token-mean``.
        config: verl's ``ActorConfig`` (``clip_ratio``, ``clip_ratio_low``, ``clip_ratio_high``,
            ``global_batch_info``).
        rollout_is_weights: optional per-token importance weights, applied to valid tokens.

    Returns:
        ``(loss, metrics)`` with verl's ``actor/pg_clipfrac``, ``actor/ppo_kl`` and
        ``actor/pg_clipfrac_lower``. Unlike verl's ``vanilla`` there is no dual-clip.
    """
    if loss_agg_mode != validation.RESPONSE_MEAN:
        raise RfppError(
            f"verl_rfpp: policy loss 'rfpp' needs loss_agg_mode={validation.RESPONSE_MEAN}, got "
            f"{loss_agg_mode!r}. Fix: actor_rollout_ref.actor.loss_agg_mode={validation.RESPONSE_MEAN}"
        )
    clip = config.clip_ratio
    clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip
    clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip
    loss_mat, diagnostics = losses.clipped_surrogate(
        old_log_prob, log_prob, advantages, response_mask, clip_low, clip_high
    )
    if rollout_is_weights is not None:
        loss_mat = loss_mat * torch.where(response_mask.bool(), rollout_is_weights, 0.0)
    batch_info = dict(getattr(config, "global_batch_info", None) or {})
    loss = losses.response_mean(
        loss_mat,
        response_mask,
        global_batch_size=batch_info.get("global_batch_size"),
        dp_size=batch_info.get("dp_size") or 1,
    )
    metrics = {f"actor/{name}": value.detach().item() for name, value in diagnostics.items()}
    return loss, metrics


def register_estimators() -> None:
    """Bind both names in ``core_algos.ADV_ESTIMATOR_REGISTRY`` to ours (idempotent).

    The registry is reached through the module attribute at call time (verl's own tests rebind
    the dict). ``register_adv_est`` refuses a name already bound, so the entries are assigned.
    """
    from verl.trainer.ppo import core_algos

    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    for name, function in ESTIMATORS.items():
        if registry.get(name) is not function:
            _ORIGINALS.setdefault(f"estimator:{name}", registry.get(name))
        registry[name] = function


def registered_ours(name: str) -> bool:
    """Whether verl's registry resolves ``name`` to our estimator."""
    from verl.trainer.ppo import core_algos

    return core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is ESTIMATORS[name]


def activation_problem(name: str) -> Optional[str]:
    """Why ``get_adv_estimator_fn(name)`` is not ours, or ``None`` when it is."""
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


def exclusion_cause() -> Optional[str]:
    """Why ``VERL_USE_EXTERNAL_PLUGINS`` keeps verl from loading this plugin, or ``None``."""
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    allowed = {part.strip() for part in policy.split(",")}
    if policy == "none" or (policy != "auto" and ENTRY_POINT not in allowed):
        return (
            f"the plugin is excluded by VERL_USE_EXTERNAL_PLUGINS={policy!r}; set it to 'auto' or "
            f"add '{ENTRY_POINT}' to the list"
        )
    return None


def not_loaded_problem(name: str) -> str:
    """The activation problem of ``name`` when ``import verl`` did not load this module."""
    cause = exclusion_cause() or (
        "verl did not load it through its verl.plugins entry point; check that verl-rfpp is "
        "installed in this environment"
    )
    return _problem(name, cause)


def ensure_active(name: str) -> None:
    """Raise ``ActivationError`` when ``get_adv_estimator_fn(name)`` is not ours."""
    problem = activation_problem(name)
    if problem is not None:
        raise ActivationError(problem)


def _validating(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        estimator = validation.estimator_of(config)
        if estimator is not None:
            ensure_active(estimator)
            validation.enforce(config)
        return original(config, *args, **kwargs)

    setattr(validate_config, MARKER, True)
    return validate_config


def wrap_validate_config() -> None:
    """Wrap ``verl.utils.config.validate_config`` and its re-export ``verl.utils.validate_config``.

    ``main_ppo`` binds the name at its import, after plugins load, so it sees the wrapper.
    """
    import verl.utils
    import verl.utils.config as verl_config

    current = verl_config.validate_config
    if getattr(current, MARKER, False):
        return
    _ORIGINALS["validate_config"] = current
    wrapped = _validating(current)
    verl_config.validate_config = wrapped
    verl.utils.validate_config = wrapped


def register_policy_loss() -> None:
    """Register ``rfpp_policy_loss`` as ``policy_loss.loss_mode=rfpp`` (idempotent)."""
    from verl.trainer.ppo import core_algos

    core_algos.register_policy_loss(validation.POLICY_LOSS_MODE)(rfpp_policy_loss)


CORE_ALGOS = "verl.trainer.ppo.core_algos"  # the estimator and policy-loss registries
TRACKING = "verl.utils.tracking"
ENGINE_BASE = "verl.workers.engine.base"  # BaseEngine.train_batch: one optimizer step, every engine


def _rfpp_actor_config(loss_function: Any) -> Any:
    """The ``ActorConfig`` bound in verl's ``partial(ppo_loss, config=...)`` when its policy loss
    is ``rfpp``; ``None`` for anything else (critic, SFT, other policy losses stay verl's)."""
    config = (getattr(loss_function, "keywords", None) or {}).get("config")
    policy = getattr(config, "policy_loss", None)
    mode = policy.get("loss_mode", None) if policy is not None else None
    return config if mode == validation.POLICY_LOSS_MODE else None


def _counting_responses(original: Callable[..., Any]) -> Callable[..., Any]:
    """``BaseEngine.train_batch`` whose response-mean denominator counts responses only.

    verl divides both loss terms of ``seq-mean-token-mean`` (our policy loss and the k2 loss in
    ``agg_loss``) by ``global_batch_size = ppo_mini_batch_size * rollout.n``, which counts rows
    with no valid token (v1's padding rows, empty or aborted responses): they add 0 to the sum,
    so every response's weight, and the whole step's gradient, shrink by ``N / G``. Here,
    for an ``rfpp`` actor loss only, ``global_batch_size`` becomes ``N``, the number of rows with
    a valid token in this mini-batch over all data-parallel ranks (one scalar all-reduce), which
    makes the accumulated gradient the contract's response mean (docs/contract.md section 5).
    A mini-batch without any response keeps a zero loss (``N`` floored at 1, not 0/0).
    """

    @functools.wraps(original)
    def train_batch(self: Any, data: Any, loss_function: Callable[..., Any]) -> Any:
        if _rfpp_actor_config(loss_function) is not None:
            import verl.utils.tensordict_utils as tu
            from verl.utils.device import get_device_id

            count = losses.responses_with_valid_tokens(data["response_mask"]).to(get_device_id())
            if torch.distributed.is_initialized():
                group = self.get_data_parallel_group()
                torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.SUM, group=group)
            responses = max(int(count.item()), 1)
            rows = tu.get_non_tensor_data(data=data, key="global_batch_size", default=None)
            if rows is not None and responses != rows and "response count" not in _logged_once:
                _logged_once.add("response count")
                logger.info(
                    "verl_rfpp: this mini-batch holds %d responses in %s rows (rows without a valid "
                    "token: padding or empty responses); the rfpp actor loss divides by %d, not by "
                    "verl's global_batch_size=%s (docs/contract.md section 5)", responses, rows,
                    responses, rows)
            tu.assign_non_tensor(data, global_batch_size=responses)
        return original(self, data, loss_function)

    setattr(train_batch, MARKER, True)
    return train_batch


def _wrap_train_batch(engine_class: Any) -> None:
    current = engine_class.train_batch
    if getattr(current, MARKER, False):
        return
    _ORIGINALS["BaseEngine.train_batch"] = current
    engine_class.train_batch = _counting_responses(current)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a verl module is first imported, so that this plugin does not
    import it: ``core_algos`` (the registries) pulls in transformers and scipy, ``engine.base``
    every engine, about 1 s in each process that imports verl (benchmarks/bench_import.py).
    The processes that use them import them anyway. One shot per module; the finder leaves
    ``sys.meta_path`` when nothing is pending. A failing callback is logged at ERROR (verl's
    import goes on; the activation guard in ``validate_config`` then refuses our estimators)."""

    def __init__(self) -> None:
        self.pending: dict[str, Callable[[Any], None]] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        callback = self.pending.pop(fullname, None)
        if callback is None:
            return None
        if not self.pending:
            _remove_finder()
        spec = next((spec for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec")
                     for spec in [finder.find_spec(fullname, path, target)] if spec is not None), None)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            _run_callback(callback, module)

        spec.loader.exec_module = exec_then_patch
        return spec


def _finder() -> Optional[_AfterImport]:
    return next((finder for finder in sys.meta_path if isinstance(finder, _AfterImport)), None)


def _remove_finder() -> None:
    finder = _finder()
    if finder is not None:
        sys.meta_path.remove(finder)


def _run_callback(callback: Callable[[Any], None], module: Any) -> None:
    try:
        callback(module)
    except Exception:  # noqa: BLE001 (logged loudly; failing verl's import would hide it worse)
        logger.exception("verl_rfpp could not patch %s; run `verl-rfpp doctor`.", module.__name__)


def after_import(name: str, callback: Callable[[Any], None]) -> None:
    """``callback(module)`` now if module ``name`` is loaded, else right after its first import."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    finder = _finder()
    if finder is None:
        finder = _AfterImport()
        sys.meta_path.insert(0, finder)
    finder.pending[name] = callback


def pending_imports() -> set[str]:
    """Modules whose patch waits for their first import."""
    finder = _finder()
    return set(finder.pending) if finder is not None else set()


def patch_engine() -> None:
    """Count responses in the ``rfpp`` loss's denominator (``_counting_responses``), now if verl's
    engine module is loaded, else as soon as it is (idempotent)."""
    after_import(ENGINE_BASE, lambda module: _wrap_train_batch(module.BaseEngine))


def unpatch_engine() -> None:
    """verl's own ``BaseEngine.train_batch`` (and denominator) again; drops a pending hook."""
    finder = _finder()
    if finder is not None:
        finder.pending.pop(ENGINE_BASE, None)
    original = _ORIGINALS.pop("BaseEngine.train_batch", None)
    if original is not None and ENGINE_BASE in sys.modules:
        sys.modules[ENGINE_BASE].BaseEngine.train_batch = original


def engine_patched() -> bool:
    """Whether ``BaseEngine.train_batch`` is ours, or will be when verl's engine is imported."""
    if ENGINE_BASE in sys.modules:
        return bool(getattr(sys.modules[ENGINE_BASE].BaseEngine.train_batch, MARKER, False))
    return ENGINE_BASE in pending_imports()


def hook_tracking() -> None:
    """Make ``Tracking.log`` merge the pending ``rfpp/`` metrics into every logged step."""
    from verl.utils.tracking import Tracking

    current = Tracking.log
    if getattr(current, MARKER, False):
        return
    _ORIGINALS["Tracking.log"] = current

    @functools.wraps(current)
    def log(self: Any, data: dict, step: int, *args: Any, **kwargs: Any) -> Any:
        return current(self, STEP_METRICS.merge_into(data), step, *args, **kwargs)

    setattr(log, MARKER, True)
    Tracking.log = log


def hooks_status() -> dict[str, bool]:
    """Which of our pieces verl currently resolves to ours (for ``verl-rfpp doctor``)."""
    import verl.utils.config as verl_config
    from verl.trainer.ppo import core_algos
    from verl.utils.tracking import Tracking

    status = {f"estimator {name}": registered_ours(name) for name in ESTIMATORS}
    status["validate_config wrapper"] = bool(getattr(verl_config.validate_config, MARKER, False))
    status[f"policy loss {validation.POLICY_LOSS_MODE}"] = (
        core_algos.POLICY_LOSS_REGISTRY.get(validation.POLICY_LOSS_MODE) is rfpp_policy_loss
    )
    status["Tracking.log metrics hook"] = bool(getattr(Tracking.log, MARKER, False))
    status["response-count denominator (engine train_batch)"] = engine_patched()
    return status


def activate() -> None:
    """Everything the plugin does at import, in an order that keeps a half-failed load loud:
    the validation wrapper goes first, so a later failure is caught by its activation guard."""
    try:
        check_verl_version()
        wrap_validate_config()
        after_import(CORE_ALGOS, lambda module: (register_estimators(), register_policy_loss()))
        after_import(TRACKING, lambda module: hook_tracking())
        patch_engine()
    except Exception:
        logger.exception(
            "verl_rfpp could not activate; verl's own reinforce_plus_plus and "
            "reinforce_plus_plus_baseline (which differ from the contract) may run instead. "
            "Run `verl-rfpp doctor`."
        )
        raise


def deactivate() -> None:
    """Undo ``activate()``: verl's own entries, ``validate_config`` and ``Tracking.log`` return."""
    _remove_finder()  # nothing pending runs any more
    import verl.utils
    import verl.utils.config as verl_config
    from verl.trainer.ppo import core_algos
    from verl.utils.tracking import Tracking

    for name in ESTIMATORS:
        original = _ORIGINALS.pop(f"estimator:{name}", None)
        if original is not None:
            core_algos.ADV_ESTIMATOR_REGISTRY[name] = original
    if "validate_config" in _ORIGINALS:
        verl_config.validate_config = verl.utils.validate_config = _ORIGINALS.pop("validate_config")
    if "Tracking.log" in _ORIGINALS:
        Tracking.log = _ORIGINALS.pop("Tracking.log")
    core_algos.POLICY_LOSS_REGISTRY.pop(validation.POLICY_LOSS_MODE, None)
    unpatch_engine()
    _checked_in_process.clear()


activate()

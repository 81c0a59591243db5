"""REINFORCE++ and REINFORCE++-baseline advantages (docs/contract.md sections 2, 3, 9).

Both estimators take verl's keyword arguments and return ``(advantages, returns)``: the globally
normalized advantage ``A_hat`` and the raw advantage (``G`` or ``m * C``). This module imports
torch, numpy, pandas and omegaconf, never verl: it runs on plain tensors in notebooks and tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sized
from numbers import Real
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl_rfpp.core import inputs, passes
from verl_rfpp.core.normalization import NormalizationStats, normalize_rows, normalize_with_sums, refuse_on_every_rank
from verl_rfpp.errors import NonFiniteError, RfppInputError


class EstimatorResult(NamedTuple):
    """What one estimator call computed: the normalized and raw advantages and their moments."""

    advantages: torch.Tensor
    returns: torch.Tensor
    stats: NormalizationStats


def gamma_of(config: Any) -> float:
    """The discount ``gamma`` of an algorithm config (docs/contract.md section 9).

    ``None`` means 1.0. Accepts an OmegaConf node or verl's ``AlgoConfig`` (both mappings), any
    other mapping, or any object with a ``gamma`` attribute; a config without ``gamma`` means 1.0.
    A number, string, sequence or tensor is not a config (``config=0.9`` is refused, not read as 1.0).
    """
    if config is None:
        return 1.0
    if isinstance(config, DictConfig):
        value = _omegaconf_gamma(config)
    elif isinstance(config, Mapping):
        value = config.get("gamma", 1.0)
    elif isinstance(config, (Real, str, bytes, list, tuple, torch.Tensor, np.ndarray)):
        raise RfppInputError(
            f"verl_rfpp: config = {inputs.describe(config)}: expected None, a mapping or an object with "
            "a `gamma` attribute (docs/contract.md section 9.2); pass config={'gamma': 1.0}."
        )
    else:
        value = getattr(config, "gamma", 1.0)
    return checked_gamma(1.0 if value is None else value)


def _omegaconf_gamma(config: DictConfig) -> Any:
    """``gamma`` of an OmegaConf node, refusing a mandatory ``???`` (``.get`` reads it as the default)
    and an interpolation that does not resolve (an unset ``${oc.env:...}``) with the fix."""
    fix = "set it, e.g. algorithm.gamma=1.0, the recipe's value (docs/contract.md section 9.2)."
    if OmegaConf.is_missing(config, "gamma"):
        raise RfppInputError(f"verl_rfpp: algorithm.gamma is '???' (a mandatory value never set); {fix}")
    try:
        return config.get("gamma", 1.0)
    except OmegaConfBaseException as error:
        raise RfppInputError(
            f"verl_rfpp: algorithm.gamma cannot be read: {error}. Fix: define what it refers to (the "
            f"environment variable or config key), or {fix}"
        ) from error


def checked_gamma(value: Any) -> float:
    """``gamma`` as a float in ``[0, 1]`` (docs/contract.md section 2.4), else ``RfppInputError``."""
    fix = "algorithm.gamma=1.0, the recipe's value (docs/contract.md section 2)."
    gamma = inputs.real_number(value, "algorithm.gamma", "a number in [0, 1]", fix)
    if not 0.0 <= gamma <= 1.0:
        raise RfppInputError(f"verl_rfpp: algorithm.gamma = {gamma} is outside [0, 1]; use {fix}")
    return gamma


def _check_rewards(token_level_rewards: Any, response_mask: Any) -> None:
    inputs.check_values_and_mask(token_level_rewards, response_mask, "token_level_rewards")


def discounted_returns(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """KL-to-go returns ``G[i,t] = m[i,t] * sum_{u=t..T_i} gamma^(u-t) * r[i,u]``
    (docs/contract.md section 2).

    The sum runs over the selected rewards (masked positions hold anything and count as 0),
    straight through interior mask holes, discounting by position. In the rewards' dtype.
    """
    _check_rewards(token_level_rewards, response_mask)
    gamma = checked_gamma(gamma)
    rewards = token_level_rewards.detach().to(passes.compute_dtype(token_level_rewards.dtype))
    returns = passes.discounted_returns(rewards, response_mask, gamma)[0]
    return returns.to(token_level_rewards.dtype)


def _uid_array(index: Any) -> np.ndarray:
    """``index`` as a numpy array of uids: a tensor (detached; a dtype numpy lacks, bf16 or
    float8, widened exactly to float64), an array, or a sized iterable such as a list."""
    if isinstance(index, torch.Tensor):
        uids = index.detach().cpu()
        if uids.is_floating_point() and uids.dtype not in (torch.float16, torch.float32, torch.float64):
            uids = uids.to(torch.float64)
        elif uids.is_complex() and uids.dtype != torch.complex128:
            uids = uids.to(torch.complex128)
        return uids.numpy()
    if isinstance(index, np.ndarray):
        return index
    if isinstance(index, (str, bytes, Mapping)) or not (isinstance(index, Sized) and isinstance(index, Iterable)):
        raise RfppInputError(
            f"verl_rfpp: index = {inputs.describe(index)}: expected one uid per row as a list, tuple, "
            "numpy array or tensor; pass index=data.non_tensor_batch['uid'] (docs/contract.md section 3)."
        )
    # fromiter keeps tuples as single uids, where asarray would add a dimension
    return np.fromiter(index, dtype=object, count=len(index))


class Segments(NamedTuple):
    """Rows sorted by their segment (a group or a session), for sums that do not depend on the order
    in which a device accumulates (docs/contract.md section 3.8): each segment is summed in row order,
    one thread per segment on CUDA, so repeated calls give the same bits on every device
    (``index_add_`` accumulates with atomics on CUDA)."""

    order: torch.Tensor
    lengths: torch.Tensor

    @classmethod
    def of(cls, codes: torch.Tensor, count: int, device: torch.device) -> Segments:
        """The segments of host-side integer ``codes`` in ``[0, count)``, sorted on the host (no device sync)."""
        codes = codes.numpy()
        order = np.argsort(codes, kind="stable")
        lengths = np.bincount(codes, minlength=count)
        return cls(torch.from_numpy(order).to(device), torch.from_numpy(lengths).to(device))

    def sums(self, *values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per segment, the float64 sum of each ``(bs,)`` vector in ``values`` (0 for an empty segment)."""
        stacked = torch.stack(values, dim=1).index_select(0, self.order)  # not [order]: 40 ms at 4096 rows here
        return torch.segment_reduce(stacked, "sum", lengths=self.lengths, unsafe=True, initial=0.0).unbind(dim=1)


def group_codes(index: Any, batch: int) -> tuple[torch.Tensor, int, np.ndarray]:
    """Integer group ids for the ``uid`` of each row (arbitrary hashable uids, vectorized), their
    number, and which rows have no uid (``None``, NaN)."""
    if index is None:
        raise RfppInputError(
            "verl_rfpp: reinforce_plus_plus_baseline needs `index` (verl's `uid` per response) to "
            "form prompt groups (docs/contract.md section 3); pass index=data.non_tensor_batch['uid']."
        )
    uids = _uid_array(index)

    def unhashable(error: TypeError) -> str:
        kinds = sorted({type(uid).__name__ for uid in uids if not _hashable(uid)})
        return (f"verl_rfpp: index holds unhashable uids ({', '.join(kinds) or error}); a uid must be "
                "hashable (a string, a number, a tuple) to form groups (docs/contract.md section 3).")

    return _factorize(uids, batch, f"verl_rfpp: index must hold one uid per row ({batch} rows), got shape "
                      f"{uids.shape}.", unhashable)


def _factorize(labels: np.ndarray, batch: int, wrong_shape: str,
               unhashable: Callable[[TypeError], str]) -> tuple[torch.Tensor, int, np.ndarray]:
    """Integer ids of the hashable ``labels`` (one per row; vectorized), their number, and which
    rows have none (``None``, NaN): the factorization of uids into groups and of labels into
    sessions (docs/contract.md sections 3.2 and 3.7). ``wrong_shape`` and ``unhashable(error)``
    are the messages of the two refusals."""
    if labels.ndim != 1 or len(labels) != batch:
        raise RfppInputError(wrong_shape)
    import pandas as pd  # here, not at import: pandas costs every process that imports verl ~0.2 s

    try:
        codes, uniques = pd.factorize(labels, use_na_sentinel=False)
    except TypeError as error:  # an unhashable label (a list, a dict)
        raise RfppInputError(unhashable(error)) from error
    return torch.from_numpy(np.asarray(codes, dtype=np.int64)), len(uniques), np.asarray(pd.isna(labels), dtype=bool)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _check_scores_and_lengths(name: str, scores: Any, lengths: Any) -> None:
    """``scores``: a floating ``(bs,)`` tensor; ``lengths``: an integer tensor of the same shape."""
    if not (isinstance(scores, torch.Tensor) and scores.dim() == 1 and scores.is_floating_point()
            and isinstance(lengths, torch.Tensor) and lengths.shape == scores.shape
            and not lengths.is_floating_point()):
        raise RfppInputError(
            f"verl_rfpp: {name} needs scores, a floating (bs,) tensor, and lengths, an "
            f"integer tensor of the same shape; got {inputs.describe(scores)} and {inputs.describe(lengths)}."
        )


def group_centered_rewards(scores: torch.Tensor, lengths: torch.Tensor, index: Any) -> torch.Tensor:
    """``C_i = R_i - b_g`` with the inclusive group mean ``b_g`` (docs/contract.md section 3), float64.

    ``scores`` holds ``R_i`` (the sum of the selected rewards of row ``i``), ``lengths`` each
    row's valid-token count. Rows without any valid token are padding, not responses: they are in
    no group and get ``C_i = 0``; a group of one gets 0.
    """
    _check_scores_and_lengths("group_centered_rewards", scores, lengths)
    batch = scores.shape[0]
    codes, groups, missing = group_codes(index, batch)
    is_response = lengths > 0
    if missing.any():  # host-side uids; the lengths are read only when a uid is missing
        _refuse_missing_uids(missing, is_response.cpu().numpy())
    by_group = Segments.of(codes, groups, scores.device)
    codes = codes.to(scores.device)
    scores = scores.to(torch.float64)
    group_size, group_total = by_group.sums(is_response.to(torch.float64), torch.where(is_response, scores, 0.0))
    group_mean = group_total / group_size.clamp(min=1.0)
    centered = scores - group_mean[codes]
    return torch.where(is_response & (group_size[codes] > 1), centered, 0.0)


def session_centered_rewards(scores: torch.Tensor, lengths: torch.Tensor, index: Any, session: Any) -> torch.Tensor:
    """``C_i = R_i - b_g`` with every session counted once in ``b_g`` (docs/contract.md section 3.7), float64.

    ``session`` holds one hashable label per row: the rows of one session (an agent loop that
    returned several outputs) share it. ``R_s`` is the mean of ``R_i`` over the session's responses,
    ``b_g`` the mean of ``R_s`` over the sessions of group ``g`` that have a response. Rows without a
    valid token are in no session and no group and get 0. One output per session gives section 3.2.
    """
    _check_scores_and_lengths("session_centered_rewards", scores, lengths)
    batch = scores.shape[0]
    codes, groups, missing = group_codes(index, batch)
    sessions, session_count, session_missing = _session_codes(session, batch)
    is_response = lengths > 0
    if missing.any() or session_missing.any():  # the lengths are read only when a label is missing
        responses = is_response.cpu().numpy()
        _refuse_missing_uids(missing, responses)
        _refuse_missing_sessions(session_missing, responses)
    session_group = _group_of_each_session(codes.numpy(), sessions, session_count, session_missing, index, session)
    device = scores.device
    by_session, by_group = Segments.of(sessions, session_count, device), Segments.of(session_group, groups, device)
    codes = codes.to(device)
    scores = scores.to(torch.float64)
    members, session_total = by_session.sums(is_response.to(torch.float64), torch.where(is_response, scores, 0.0))
    session_mean = session_total / members.clamp(min=1.0)
    counted = members > 0
    group_size, group_total = by_group.sums(counted.to(torch.float64), torch.where(counted, session_mean, 0.0))
    baseline = group_total / group_size.clamp(min=1.0)
    return torch.where(is_response, scores - baseline[codes], 0.0)


def _session_codes(session: Any, batch: int) -> tuple[torch.Tensor, int, np.ndarray]:
    """Integer ids of the ``session`` label of each row, their number, and which rows have none."""
    if isinstance(session, (str, bytes, Mapping)) or not (
            isinstance(session, (torch.Tensor, np.ndarray))
            or (isinstance(session, Sized) and isinstance(session, Iterable))):
        raise RfppInputError(
            f"verl_rfpp: session = {inputs.describe(session)}: expected one session label per row as a list, "
            "tuple, numpy array or tensor (docs/contract.md section 3.7), or session=None when every "
            "response is its own session."
        )
    labels = _uid_array(session)
    return _factorize(
        labels, batch, f"verl_rfpp: session must hold one label per row ({batch} rows), got shape {labels.shape} "
        "(docs/contract.md section 3.7).",
        lambda error: f"verl_rfpp: session holds unhashable labels ({error}); a session label must be hashable "
                      "(a string, a number, a tuple) (docs/contract.md section 3.7).")


def _group_of_each_session(codes: np.ndarray, sessions: torch.Tensor, session_count: int, session_missing: np.ndarray,
                           index: Any, session: Any) -> torch.Tensor:
    """The group of each session; a session whose rows carry two uids is refused (host-side labels
    only: no device sync). Rows without a session label (padding) are not read."""
    labelled = ~session_missing
    rows = sessions.numpy()[labelled]
    lowest = np.full(session_count, np.iinfo(np.int64).max, dtype=np.int64)
    highest = np.full(session_count, -1, dtype=np.int64)
    np.minimum.at(lowest, rows, codes[labelled])
    np.maximum.at(highest, rows, codes[labelled])
    split = np.flatnonzero((highest >= 0) & (lowest != highest))
    if split.size:
        label_of = sessions.numpy()
        first = int(split[0])
        members = np.flatnonzero(labelled & (label_of == first))
        uids = list(dict.fromkeys(_uid_array(index)[members].tolist()))
        raise RfppInputError(
            f"verl_rfpp: session {_uid_array(session)[members[0]]!r} spans rows of several prompts (uids "
            f"{', '.join(map(repr, uids[:3]))}); the outputs of one session answer one prompt "
            f"({split.size} such sessions in all). Pass one session label per agent-loop session, "
            "e.g. '<uid>_<session_id>' (docs/contract.md section 3.7)."
        )
    return torch.from_numpy(np.where(highest >= 0, lowest, 0))


def _refuse_missing_sessions(missing: np.ndarray, is_response: np.ndarray) -> None:
    """A response without a session label has no session (docs/contract.md section 3.7)."""
    rows = np.flatnonzero(missing & is_response)
    if rows.size:
        raise RfppInputError(
            f"verl_rfpp: session has no label (None or NaN) for row {int(rows[0])}, a response with valid "
            f"tokens ({rows.size} such rows in all); pass one label per row, the same for the outputs of "
            "one session (docs/contract.md section 3.7)."
        )


def _refuse_missing_uids(missing: np.ndarray, is_response: np.ndarray) -> None:
    """A response (``L_i > 0``) without a uid has no group (docs/contract.md section 3): refuse it,
    naming the first such row. Padding rows join no group, so their uid is never read."""
    rows = np.flatnonzero(missing & is_response)
    if rows.size:
        row = int(rows[0])
        raise RfppInputError(
            f"verl_rfpp: index has no uid (None or NaN) for row {row}, a response with valid "
            f"tokens ({rows.size} such rows in all); reinforce_plus_plus_baseline groups responses "
            "by their prompt's uid (docs/contract.md section 3). Pass one uid per response, "
            "index=data.non_tensor_batch['uid']."
        )


def _overflow_message(row: Optional[int], dtype: torch.dtype) -> str:
    where = f" in row {row}" if row is not None else ""
    return (
        f"verl_rfpp: the raw advantage (the `returns` output){where} overflows {dtype} (|value| > "
        f"{torch.finfo(dtype).max:.4g}): the rewards are too large to be returned in {dtype}. "
        "Scale the rewards down, or pass them as float32/float64 (docs/contract.md section 1)."
    )


def _check_raw_fits(raw: torch.Tensor, stats: NormalizationStats) -> None:
    """REINFORCE++'s returns ``raw`` (already in the output dtype) must be finite, as the
    baseline's. A float32/float64 overflow is caught by the moments already; this is for
    bf16/fp16 outputs of float32 sums. On the CPU no pass is made unless the bound
    ``max |G| <= |mu| + sqrt(N) * std`` reaches the dtype's range; elsewhere a device assert."""
    if raw.dtype not in (torch.float16, torch.bfloat16):
        return
    if raw.device.type != "cpu":
        torch._assert_async(torch.isfinite(raw).all(), _overflow_message(None, raw.dtype))
        return
    bound = abs(float(stats.raw_mean)) + float(stats.valid_token_count) ** 0.5 * float(stats.raw_std)
    if bound < 0.5 * torch.finfo(raw.dtype).max:
        return
    bad_rows = (~torch.isfinite(raw)).any(dim=1).nonzero()
    if bad_rows.numel():
        raise NonFiniteError(_overflow_message(int(bad_rows[0]), raw.dtype))


def _check_centered_fits(centered: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype) -> None:
    """The baseline's ``C_i`` (float64, one per row) must be finite in the output ``dtype`` on
    every response: the same rule as REINFORCE++'s returns. ``(bs,)`` work only."""
    fits = torch.isfinite(centered.to(dtype)) | (lengths == 0)
    if centered.device.type != "cpu":
        torch._assert_async(fits.all(), _overflow_message(None, dtype))
    elif not bool(fits.all()):
        raise NonFiniteError(_overflow_message(int((~fits).nonzero()[0]), dtype))


def reinforce_plus_plus(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    *,
    process_group: Optional[dist.ProcessGroup] = None,
) -> EstimatorResult:
    """REINFORCE++ (docs/contract.md section 2): normalized KL-to-go returns.

    Args:
        token_level_rewards: ``(bs, response_length)``, ``R`` on the final valid token minus
            ``beta * d`` on valid tokens (verl applies the k1 shaping before the estimator).
        response_mask: ``(bs, response_length)``, ``m != 0`` marks valid tokens.
        config: anything ``gamma_of`` accepts.
        process_group: see ``masked_global_normalize``.

    Returns:
        ``EstimatorResult(A_hat, G, stats)`` in the rewards' dtype; rewards that require grad are
        read detached (the outputs are constants of the loss, docs/contract.md section 1.6).
    """
    inputs.check_process_group(process_group)
    try:
        _check_rewards(token_level_rewards, response_mask)
        gamma = gamma_of(config)
        rewards = token_level_rewards.detach().to(passes.compute_dtype(token_level_rewards.dtype))
        returns, valid, row_sum, row_count = passes.discounted_returns(rewards, response_mask, gamma)
    except Exception as error:
        refuse_on_every_rank(error, process_group, token_level_rewards, response_mask)
    del rewards  # a bf16/fp16 input's float32 copy is dead: free it before the output is allocated
    advantages, stats = normalize_with_sums(returns, valid, row_count, row_sum, process_group=process_group)
    dtype = token_level_rewards.dtype
    returns = returns.to(dtype)
    _check_raw_fits(returns, stats)
    return EstimatorResult(advantages.to(dtype), returns, stats)


def reinforce_plus_plus_baseline(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    *,
    session: Any = None,
    process_group: Optional[dist.ProcessGroup] = None,
) -> EstimatorResult:
    """REINFORCE++-baseline (docs/contract.md section 3): normalized group-centred outcome rewards.

    ``R_i = sum_t select(m, r)``, ``C_i = R_i - mean_{j in g(i)} R_j``, ``A_raw = m * C_i``,
    then the global normalization of section 4, whose moments come from the per-row ``C_i``
    weighted by the row lengths (``normalize_rows``): two passes over ``(bs, T)`` in all, one
    that sums the rewards and one that writes both outputs.

    Args:
        token_level_rewards: ``(bs, response_length)``.
        response_mask: ``(bs, response_length)``, ``m != 0`` marks valid tokens.
        index: ``(bs,)`` uids (verl's ``uid``), any hashable values.
        session: ``None`` (every response its own session), or ``(bs,)`` session labels: the
            outputs of one agent-loop session share one, and each session counts once in its
            group's mean (docs/contract.md section 3.7).
        process_group: see ``masked_global_normalize``; groups must not span ranks.

    Returns:
        ``EstimatorResult(A_hat, m * C, stats)`` in the rewards' dtype; rewards that require grad
        are read detached (docs/contract.md section 1.6).
    """
    inputs.check_process_group(process_group)
    try:
        _check_rewards(token_level_rewards, response_mask)
        rewards = token_level_rewards.detach().to(passes.compute_dtype(token_level_rewards.dtype))
        valid, scores, lengths = passes.selected_row_sums(rewards, response_mask)
        centered = (group_centered_rewards(scores, lengths, index) if session is None
                    else session_centered_rewards(scores, lengths, index, session))
    except Exception as error:
        refuse_on_every_rank(error, process_group, token_level_rewards, response_mask)
    normalized_rows, stats = normalize_rows(centered, lengths, process_group=process_group)
    _check_centered_fits(centered, lengths, token_level_rewards.dtype)  # after NaN/Inf are refused
    advantages, raw = passes.broadcast_rows(valid, normalized_rows, centered, token_level_rewards.dtype)
    return EstimatorResult(advantages, raw, stats)


def compute_reinforce_plus_plus_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl signature of REINFORCE++ (docs/contract.md sections 2, 9); extra keywords are ignored.

    Returns ``(advantages, returns)``, both ``(bs, response_length)``: ``A_hat`` and ``G``.
    """
    result = reinforce_plus_plus(token_level_rewards, response_mask, config)
    return result.advantages, result.returns


def compute_reinforce_plus_plus_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    session: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl signature of REINFORCE++-baseline (docs/contract.md sections 3, 9); extra keywords ignored.
    ``session``: optional session label per row (section 3.7).

    Returns ``(advantages, returns)``, both ``(bs, response_length)``: ``A_hat`` and ``m * C``.
    """
    result = reinforce_plus_plus_baseline(token_level_rewards, response_mask, index, session=session)
    return result.advantages, result.returns

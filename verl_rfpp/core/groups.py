"""Group means: uids and agent sessions factorized into integer ids, and the group-centred
outcome rewards ``C_i = R_i - b_g`` (REINFORCE++-baseline's, docs/contract.md sections 3.2, 3.7, 3.8).
Plain tensors and numpy; no verl. Shared by every estimator of the group family, so its messages
name none of them: they say "a group-baseline estimator" (the family, ``verl_rfpp.catalog.GROUP``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sized
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from verl_rfpp.core import inputs
from verl_rfpp.errors import RfppInputError


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
            "verl_rfpp: a group-baseline estimator needs `index` (verl's `uid` per response) to "
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
            f"tokens ({rows.size} such rows in all); a group-baseline estimator groups responses "
            "by their prompt's uid (docs/contract.md section 3). Pass one uid per response, "
            "index=data.non_tensor_batch['uid']."
        )

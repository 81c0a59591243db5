"""verl's v1 agent sessions: which rows of a step batch are outputs of one agent-loop session
(docs/contract.md section 3.7).

verl 0.9.1's v1 trainer stores each ``AgentLoopOutput`` of a session (context compression,
sub-agents) as its own row, under the TransferQueue key ``{uid}_{session_id}_{index}``
(``v1/agent_loop_tq.py``), with the session's final reward copied onto every output. The rows
reach the estimator with only their ``uid``; the session is in the keys, which
``trainer_base._compute_advantage`` passes to ``compute_advantage_for_multi_trajectories`` (verl
uses them for GRPO only). The hook wraps that function: for an estimator of ours whose family
groups responses (``catalog.Family.groups``: REINFORCE++-baseline) it reads each
row's session (``{uid}_{session_id}``) from its key and holds it for the estimator call inside
(``current``), so that each session counts once in its prompt's group mean.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

import numpy as np

from verl_rfpp import catalog
from verl_rfpp.adapter.patching import Internal, marked
from verl_rfpp.errors import RfppError

V1_TRAINER = "verl.trainer.ppo.v1.trainer_base"
FUNCTION = "compute_advantage_for_multi_trajectories"  # bound by name in trainer_base from v1.utils
INTERNALS = (Internal(V1_TRAINER, FUNCTION, ("data", "batch_keys", "adv_estimator")),)

_SESSIONS: contextvars.ContextVar[np.ndarray | None] = contextvars.ContextVar("verl_rfpp_sessions", default=None)


class SessionKeyError(RfppError):
    """verl's batch keys do not say which session a row belongs to (a verl that changed its key format)."""


def session_labels(batch_keys: Any, uids: Any) -> np.ndarray:
    """``{uid}_{session_id}`` of each row, from verl's key ``{uid}_{session_id}_{index}`` (the uid
    part must be the row's ``uid``), as a numpy object array."""
    keys, uids = list(batch_keys), list(uids)
    if len(keys) != len(uids):
        raise SessionKeyError(f"verl_rfpp: verl passed {len(keys)} batch keys for {len(uids)} rows; "
                              "the plugin cannot tell each row's agent session (docs/contract.md section 3.7).")
    labels = np.empty(len(keys), dtype=object)
    for row, (key, uid) in enumerate(zip(keys, uids, strict=True)):
        prefix, _, output = str(key).rpartition("_")
        uid_part, _, session_id = prefix.rpartition("_")
        if not (output.isdigit() and session_id.isdigit() and uid_part == str(uid)):
            raise SessionKeyError(
                f"verl_rfpp: verl's batch key {key!r} of row {row} (uid {uid!r}) is not "
                "'{uid}_{session_id}_{index}', the format of verl 0.9.1's v1 trainer; the plugin cannot "
                "tell which rows are outputs of one agent session, so an estimator of the group family "
                "would count a session once per output (docs/contract.md section 3.7). Use a tested verl "
                "(`verl-rfpp doctor`)."
            )
        labels[row] = prefix
    return labels


def current(rows: int) -> np.ndarray | None:
    """The session label of each of the ``rows`` rows of the estimator call in progress, or ``None``
    outside verl's v1 advantage step (then every response is its own session)."""
    labels = _SESSIONS.get()
    if labels is not None and len(labels) != rows:
        raise SessionKeyError(f"verl_rfpp: the estimator got {rows} rows, but verl's step batch has "
                              f"{len(labels)} keys; the plugin cannot tell each row's agent session "
                              "(docs/contract.md section 3.7).")
    return labels


def uses_sessions(adv_estimator: Any) -> bool:
    """Whether ``adv_estimator`` (a name or verl's enum) is ours and of the group family."""
    name = getattr(adv_estimator, "value", adv_estimator)
    return isinstance(name, str) and name in catalog.names() and catalog.estimator(name).family.groups


def _counting_sessions(original: Any) -> Any:
    """``trainer_base.compute_advantage_for_multi_trajectories`` that, for an estimator of ours of
    the group family only (``uses_sessions``), tells the estimator each row's agent session
    (``current``); any other estimator reaches verl's function untouched."""

    @functools.wraps(original)
    def compute_advantage_for_multi_trajectories(data: Any, batch_keys: Any, adv_estimator: Any, *args: Any,
                                                 **kwargs: Any) -> Any:
        if not uses_sessions(adv_estimator):
            return original(data, batch_keys, adv_estimator, *args, **kwargs)
        token = _SESSIONS.set(session_labels(batch_keys, data.non_tensor_batch["uid"]))
        try:
            return original(data, batch_keys, adv_estimator, *args, **kwargs)
        finally:
            _SESSIONS.reset(token)

    return marked(compute_advantage_for_multi_trajectories)

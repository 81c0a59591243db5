"""Independent float64 reference, written from docs/contract.md with plain loops.

Calls no production function. Inputs are nested lists or tensors; outputs are float64 tensors.
"""

from __future__ import annotations

import math

import torch

VARIANCE_FLOOR = 1e-8


def _rows(values):
    return [[float(v) for v in row] for row in torch.as_tensor(values, dtype=torch.float64).tolist()]


def _mask_rows(mask):
    return [[bool(v) for v in row] for row in torch.as_tensor(mask).tolist()]


def returns(rewards, mask, gamma):
    """docs/contract.md section 2: G[i,t] = m[i,t] * sum_{u=t..T_i} gamma^(u-t) * select(m, r)[i,u]."""
    r, m = _rows(rewards), _mask_rows(mask)
    out = []
    for row_r, row_m in zip(r, m, strict=True):
        valid_positions = [t for t, ok in enumerate(row_m) if ok]
        last = valid_positions[-1] if valid_positions else -1
        row = []
        for t in range(len(row_r)):
            if not row_m[t]:
                row.append(0.0)
                continue
            row.append(sum(gamma ** (u - t) * row_r[u] for u in range(t, last + 1) if row_m[u]))
        out.append(row)
    return torch.tensor(out, dtype=torch.float64).reshape(len(r), -1)


def returns_by_recurrence(rewards, mask, gamma):
    """docs/contract.md section 2.3 in its backward form, for long rows (``returns`` is O(T^2)):
    ``acc_t = select(m, r)[t] + gamma * acc_{t+1}`` over every position (holes add 0 and are
    discounted), ``G[i,t] = acc_t`` where ``m = 1``, else 0. Plain float64 Python arithmetic."""
    r, m = _rows(rewards), _mask_rows(mask)
    out = []
    for row_r, row_m in zip(r, m, strict=True):
        acc, row = 0.0, [0.0] * len(row_r)
        for t in range(len(row_r) - 1, -1, -1):
            acc = (row_r[t] if row_m[t] else 0.0) + gamma * acc
            row[t] = acc if row_m[t] else 0.0
        out.append(row)
    return torch.tensor(out, dtype=torch.float64).reshape(len(r), -1)


def centered_rewards(rewards, mask, uids):
    """docs/contract.md section 3: C_i = R_i - mean of R over the group (inclusive); groups of one -> 0.

    Rows without any valid token are padding rows, not responses: no group member, C = 0.
    """
    r, m = _rows(rewards), _mask_rows(mask)
    totals = [sum(v for v, ok in zip(row_r, row_m, strict=True) if ok) for row_r, row_m in zip(r, m, strict=True)]
    is_response = [any(row_m) for row_m in m]
    groups: dict = {}
    for i, uid in enumerate(uids):
        if is_response[i]:
            groups.setdefault(uid, []).append(totals[i])
    centered = []
    for i, uid in enumerate(uids):
        if not is_response[i] or len(groups[uid]) < 2:
            centered.append(0.0)
        else:
            centered.append(totals[i] - sum(groups[uid]) / len(groups[uid]))
    return centered


def baseline_raw(rewards, mask, uids):
    m = _mask_rows(mask)
    c = centered_rewards(rewards, mask, uids)
    return torch.tensor([[c[i] if ok else 0.0 for ok in row] for i, row in enumerate(m)],
                        dtype=torch.float64).reshape(len(m), -1)


def moments(values, mask):
    """Population mean and variance over valid positions, two passes in float64."""
    a, m = _rows(values), _mask_rows(mask)
    selected = [v for row_a, row_m in zip(a, m, strict=True) for v, ok in zip(row_a, row_m, strict=True) if ok]
    n = len(selected)
    mu = sum(selected) / n
    var = sum((v - mu) ** 2 for v in selected) / n
    return mu, var, n


def normalize(values, mask):
    """docs/contract.md section 4: m * (A - mu) / sqrt(max(var, 1e-8))."""
    a, m = _rows(values), _mask_rows(mask)
    mu, var, _ = moments(values, mask)
    scale = math.sqrt(max(var, VARIANCE_FLOOR))
    out = [[(v - mu) / scale if ok else 0.0 for v, ok in zip(row_a, row_m, strict=True)]
           for row_a, row_m in zip(a, m, strict=True)]
    return torch.tensor(out, dtype=torch.float64).reshape(len(a), -1)


def reinforce_plus_plus(rewards, mask, gamma=1.0):
    g = returns(rewards, mask, gamma)
    return normalize(g, mask), g


def reinforce_plus_plus_baseline(rewards, mask, uids):
    raw = baseline_raw(rewards, mask, uids)
    return normalize(raw, mask), raw


def k2(logp, ref_logp):
    """docs/contract.md section 3: D_k2 = 0.5 * (logp - ref)^2, elementwise."""
    return 0.5 * (logp - ref_logp) ** 2


def clipped_surrogate(log_prob, old_log_prob, advantage, eps_low, eps_high):
    """docs/contract.md section 5.1 for one token, in float64: with ``rho = exp(logp - logp_old)``
    (log ratio bounded to [-20, 20]), ``max(-rho * A, -clip(rho, 1 - eps_low, 1 + eps_high) * A)``."""
    rho = math.exp(min(max(float(log_prob) - float(old_log_prob), -20.0), 20.0))
    a = float(advantage)
    clipped = min(max(rho, 1.0 - eps_low), 1.0 + eps_high)
    return max(-rho * a, -clipped * a)


def response_mean(loss, mask):
    """docs/contract.md section 5: mean over the valid tokens of each response, then over the
    responses with a valid token."""
    per_response = []
    for row_l, row_m in zip(loss, mask, strict=True):
        values = [row_l[t] for t in range(len(row_m)) if row_m[t]]
        if values:
            per_response.append(sum(values) / len(values))
    return sum(per_response) / len(per_response)


def session_centered_rewards(rewards, mask, uids, sessions):
    """docs/contract.md section 3.7: C_i = R_i - b_g, where b_g is the mean over the sessions of
    group g of R_s, the mean of R over the session's responses; each session counts once.

    Rows without any valid token are in no session and no group: C = 0.
    """
    r, m = _rows(rewards), _mask_rows(mask)
    totals = [sum(v for v, ok in zip(row_r, row_m, strict=True) if ok) for row_r, row_m in zip(r, m, strict=True)]
    session_rewards: dict = {}
    session_uid: dict = {}
    for i, (uid, session) in enumerate(zip(uids, sessions, strict=True)):
        if any(m[i]):
            session_rewards.setdefault(session, []).append(totals[i])
            session_uid[session] = uid
    group_means: dict = {}
    for session, values in session_rewards.items():
        group_means.setdefault(session_uid[session], []).append(sum(values) / len(values))
    return [totals[i] - sum(group_means[uid]) / len(group_means[uid]) if any(m[i]) else 0.0
            for i, uid in enumerate(uids)]


def session_baseline(rewards, mask, uids, sessions):
    """REINFORCE++-baseline over sessions (section 3.7), normalized over every output's tokens (section 4)."""
    m = _mask_rows(mask)
    c = session_centered_rewards(rewards, mask, uids, sessions)
    raw = torch.tensor([[c[i] if ok else 0.0 for ok in row] for i, row in enumerate(m)],
                       dtype=torch.float64).reshape(len(m), -1)
    return normalize(raw, mask), raw

"""Random step batches with the shapes verl produces (docs/contract.md section 1; verl 0.9.1 conventions)."""

from __future__ import annotations

import numpy as np
import torch


def make_batch(seed, *, prompts=5, max_samples=6, length=24, dtype=torch.float32, holes=True,
               padding_rows=2, kl_scale=0.05):
    """Right-padded responses with variable lengths, interior holes, uneven and singleton groups,
    v1-style padding rows (all-zero mask, zero reward, one shared uid) at the end."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, max_samples + 1, (prompts,), generator=g).tolist()
    sizes[0] = 1  # always one singleton group
    uids = [f"uid-{p}" for p, k in enumerate(sizes) for _ in range(k)]
    order = torch.randperm(len(uids), generator=g).tolist()
    uids = [uids[i] for i in order] + ["pad"] * padding_rows
    batch = len(uids)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    lengths[batch - padding_rows:] = 0
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    if holes:
        hole = (torch.rand(batch, length, generator=g) < 0.15) & (torch.arange(length)[None, :] < lengths[:, None] - 1)
        mask[hole] = 0.0
    rewards = kl_scale * torch.randn(batch, length, generator=g, dtype=torch.float64) * mask
    outcome = torch.randn(batch, generator=g, dtype=torch.float64)
    for i in range(batch):
        if lengths[i] > 0:
            rewards[i, lengths[i] - 1] += outcome[i]
    return rewards.to(dtype), mask, np.array(uids, dtype=object)

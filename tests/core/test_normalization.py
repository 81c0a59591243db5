"""Global masked normalization (docs/contract.md section 4): reference, edge cases, real gloo groups."""

from __future__ import annotations

import math
import pickle
import time

import pytest
import torch
import torch.multiprocessing as mp
from support import distributed_worker, reference
from support.batches import make_batch

from verl_rfpp import VARIANCE_FLOOR, EmptyPopulationError, masked_global_normalize
from verl_rfpp.core.normalization import normalize_rows

pytestmark = pytest.mark.usefixtures("passes_implementation")


def _values(seed, rows=17, length=13, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    values = (3.0 + 2.0 * torch.randn(rows, length, generator=g, dtype=torch.float64)).to(dtype)
    mask = (torch.rand(rows, length, generator=g) < 0.6).float()
    mask[0] = 0.0
    return values, mask


@pytest.mark.parametrize("seed", range(5))
def test_matches_reference_and_reports_moments(seed, device):
    values, mask = _values(seed)
    normalized, stats = masked_global_normalize(values.to(device), mask.to(device))
    expected = reference.normalize(values, mask)
    mu, var, n = reference.moments(values, mask)
    assert (normalized.cpu() - expected).abs().max().item() <= 1e-12
    assert stats.valid_token_count.item() == n
    assert abs(stats.raw_mean.item() - mu) <= 1e-12 * abs(mu)
    assert abs(stats.raw_std.item() - math.sqrt(var)) <= 1e-12 * math.sqrt(var)
    assert abs(stats.normalized_mean.item()) <= 1e-12
    assert abs(stats.normalized_std.item() - 1.0) <= 1e-12
    assert stats.variance_floored.item() == 0.0


def test_variance_floor_is_a_floor_not_an_epsilon(device):
    values = torch.tensor([[0.0, 2e-5]], dtype=torch.float64, device=device)  # var = 1e-10 < floor
    normalized, stats = masked_global_normalize(values, torch.ones(1, 2, device=device))
    assert normalized[0].tolist() == pytest.approx([-1e-5 / 1e-4, 1e-5 / 1e-4], rel=1e-12)
    assert stats.variance_floored.item() == 1.0
    values = torch.tensor([[0.0, 2e-3]], dtype=torch.float64, device=device)  # var = 1e-6 > floor: no epsilon
    normalized, _ = masked_global_normalize(values, torch.ones(1, 2, device=device))
    assert normalized.tolist() == [[-1.0, 1.0]]
    assert VARIANCE_FLOOR == 1e-8


def test_output_is_exact_zero_and_dtype_follows_input(device):
    values, mask = _values(1, dtype=torch.bfloat16)
    values, mask = values.to(device), mask.to(device)
    normalized, _ = masked_global_normalize(values, mask)
    assert normalized.dtype == torch.bfloat16
    zeros = normalized[mask == 0]
    assert torch.equal(zeros, torch.zeros_like(zeros)) and not torch.signbit(zeros).any()


def test_empty_population_raises():
    with pytest.raises(EmptyPopulationError):
        masked_global_normalize(torch.randn(3, 4), torch.zeros(3, 4))
    with pytest.raises(EmptyPopulationError):
        normalize_rows(torch.randn(3), torch.zeros(3, dtype=torch.int64))


@pytest.mark.parametrize("seed", range(4))
def test_row_constant_normalization_counts_every_valid_token(seed, device):
    _, mask = _values(seed)
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(mask.shape[0], generator=g, dtype=torch.float64)
    rows[0] = float("nan")  # row 0 has no valid token: ignored whatever it holds
    broadcast = torch.where(mask.bool(), rows[:, None], 0.0)
    normalized, stats = distributed_worker.row_constant(rows.to(device), mask.bool().to(device))
    normalized = normalized.cpu()
    expected = reference.normalize(broadcast, mask)
    mu, var, n = reference.moments(broadcast, mask)
    assert (normalized - expected).abs().max().item() <= 1e-12
    assert torch.equal(normalized[mask == 0], torch.zeros(int((mask == 0).sum()), dtype=torch.float64))
    assert stats.valid_token_count.item() == n
    assert abs(stats.raw_mean.item() - mu) <= 1e-12 and abs(stats.raw_std.item() ** 2 - var) <= 1e-12
    assert abs(stats.normalized_std.item() - 1.0) <= 1e-12


@pytest.mark.parametrize("spread,expected_std", [(0.0, 0.0), (1e-5, 0.1)])
def test_floored_variance_reports_the_normalized_std_below_one(spread, expected_std, device):
    """docs/contract.md sections 4.3 and 7: when the floor replaces the variance (var < 1e-8) the
    output's std is ``sqrt(var / 1e-8)``, below 1 (0 for equal values): the statistics say so (a
    mutant that clamped the measured std at 1 survived the suite)."""
    values = torch.tensor([[1.0 - spread, 1.0 + spread, 7.0]], dtype=torch.float64, device=device)
    mask = torch.tensor([[1.0, 1.0, 0.0]], device=device)
    _, stats = masked_global_normalize(values, mask)
    assert stats.variance_floored.item() == 1.0
    assert abs(stats.normalized_std.item() - expected_std) <= 1e-9


def test_row_constant_mean_is_corrected_to_the_last_bit():
    """The two-pass mean of docs/contract.md section 4.4: ``raw_mean`` is within one ulp of the
    exact token-weighted mean (rational arithmetic) on 3000 rows whose float64 total rounds many
    times; a mutant that subtracted the second pass's correction instead of adding it was 38 ulp off."""
    from fractions import Fraction

    from verl_rfpp.core.normalization import normalize_rows

    g = torch.Generator().manual_seed(0)
    values = (1.0 + 0.1 * torch.randn(3000, generator=g, dtype=torch.float64)) * 1e3
    lengths = torch.randint(1, 9, (3000,), generator=g)
    _, stats = normalize_rows(values, lengths)
    exact = sum(Fraction(v) * n for v, n in zip(values.tolist(), lengths.tolist(), strict=True)) / int(lengths.sum())
    assert abs(Fraction(stats.raw_mean.item()) - exact) <= math.ulp(float(exact))


def test_a_refused_input_joins_the_collective_on_the_inputs_device(device, tmp_path):
    """docs/contract.md section 4.5, one rank in this process (gloo on the CPU, NCCL on cuda): the
    refusing rank all-reduces its flag on the device its inputs live on (the good ranks reduce
    there), then raises its own error naming its rank."""
    import torch.distributed as dist

    from verl_rfpp import RfppInputError

    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        values = torch.ones(2, 3, dtype=torch.float64, device=device)
        with pytest.raises(RfppInputError, match=r"response_mask.*\[rank 0 of the 1 in the process group"):
            masked_global_normalize(values, torch.ones(2, 4, device=device), process_group=dist.group.WORLD)
    finally:
        dist.destroy_process_group()


# --- real torch.distributed gloo groups ---------------------------------------------------------

def _split_rows(values, mask, bounds):
    cuts = [0, *bounds, len(values)]
    return (
        [values[a:b] for a, b in zip(cuts, cuts[1:], strict=False)],
        [mask[a:b] for a, b in zip(cuts, cuts[1:], strict=False)],
    )


def _scenarios(world_size):
    values, mask, _ = make_batch(21, prompts=6, length=16, dtype=torch.float64)
    rows = len(values)
    scenarios = []
    uneven = [1, 5] if world_size == 3 else [3]
    scenarios.append(("uneven-rows", *_split_rows(values, mask, uneven)))
    starved = mask.clone()
    starved[: rows // 2] = 0.0  # rank 0 holds rows but no valid token
    three = world_size == 3
    scenarios.append(("rank-without-valid-token",
                      *_split_rows(values, starved, [rows // 2] + ([rows - 2] if three else []))))
    scenarios.append(("rank-with-zero-rows", *_split_rows(values, mask, [0] + ([rows // 3] if three else []))))
    scenarios.append(("globally-empty", *_split_rows(values, torch.zeros_like(mask), [2] + ([4] if three else []))))
    rows = values[:, 0].clone()  # a row-constant advantage, as the baseline's C_i
    scenarios.append(("row-constant", *_split_rows(rows, mask, uneven)))
    return scenarios


def _run_group(world_size, scenarios, tmp_path, timeout=120.0, target=distributed_worker.run):
    """Start one spawned process per rank, join every one (bounded), then read their result files.

    Nothing is read while a worker may still be running, so no result can depend on a live sender.
    """
    context = mp.get_context("spawn")
    result_files = [tmp_path / f"rank{rank}.pkl" for rank in range(world_size)]
    processes = [
        context.Process(
            target=target,
            args=(rank, world_size, str(tmp_path / "rendezvous"), scenarios, str(result_files[rank])),
        )
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [rank for rank, process in enumerate(processes) if process.is_alive()]
    for rank in hung:
        processes[rank].kill()
        processes[rank].join(timeout=30)
    if hung:
        pytest.fail(f"distributed normalization hung: ranks {hung} still running after {timeout}s")
    received = []
    for rank, (process, result_file) in enumerate(zip(processes, result_files, strict=True)):
        assert process.exitcode == 0, f"rank {rank} exited with {process.exitcode}"
        with open(result_file, "rb") as handle:
            status, payload = pickle.load(handle)
        assert status == "ok", f"rank {rank} crashed:\n{payload}"
        received.extend((rank, *item) for item in payload)
    return received


@pytest.mark.slow  # real gloo groups: spawned processes
@pytest.mark.parametrize("world_size", [2, 3])
def test_sharded_population_equals_single_process(world_size, tmp_path):
    scenarios = _scenarios(world_size)
    received = _run_group(world_size, scenarios, tmp_path)
    by_name = {}
    for rank, name, status, payload, stats in received:
        by_name.setdefault(name, {})[rank] = (status, payload, stats)
    for name, values_shards, mask_shards in scenarios:
        outcomes = by_name[name]
        assert sorted(outcomes) == list(range(world_size))
        values, mask = torch.cat(values_shards), torch.cat(mask_shards)
        if name == "globally-empty":
            assert all(status == "empty" for status, _, _ in outcomes.values())
            continue
        if values.dim() == 1:
            single, single_stats = distributed_worker.row_constant(values, mask.bool())
            values = torch.where(mask.bool(), values[:, None], 0.0)
        else:
            single, single_stats = masked_global_normalize(values, mask)
        sharded = torch.cat([torch.from_numpy(outcomes[rank][1]) for rank in range(world_size)])
        assert sharded.shape == single.shape
        assert (sharded - single).abs().max().item() <= 1e-12, name
        assert (sharded - reference.normalize(values, mask)).abs().max().item() <= 1e-12, name
        for rank in range(world_size):
            for got, want in zip(outcomes[rank][2], single_stats, strict=True):
                assert abs(got - want.item()) <= 1e-12 * max(1.0, abs(want.item())), name


def _refusal_scenarios():
    """Two ranks; rank 1's input is bad in one way per scenario, rank 0's is fine."""
    values, mask, uids = make_batch(4, prompts=4, length=8, dtype=torch.float64)
    good = (values[:6], mask[:6], None)
    nan_mask = mask[6:].clone()
    nan_mask[0, 0] = math.nan
    bad = {
        "shape": ("normalize", (values[6:], mask[6:, :-1], None)),
        "dtype": ("normalize", (values[6:].to(torch.float8_e5m2), mask[6:], None)),
        "nan-mask": ("rfpp", (values[6:], nan_mask, None)),
        "gamma": ("rfpp", (values[6:], mask[6:], {"gamma": "abc"})),
        "missing-uid": ("baseline", (values[6:], mask[6:], [None] * len(values[6:]))),
    }
    scenarios = []
    for name, (estimator, shard) in bad.items():
        first = good if estimator != "baseline" else (values[:6], mask[:6], list(uids[:6]))
        scenarios.append((name, estimator, [first, shard]))
    return scenarios


@pytest.mark.slow  # real gloo groups: spawned processes
def test_a_bad_input_on_one_rank_makes_every_rank_raise(tmp_path):
    """docs/contract.md section 4.5: the rank with the bad input raises its own error naming
    itself; the others raise too, naming it, instead of waiting in a collective for the group's
    timeout (which they did: the bad rank raised before the first all-reduce)."""
    scenarios = _refusal_scenarios()
    received = _run_group(2, scenarios, tmp_path, target=distributed_worker.run_refusals)
    outcomes = {(rank, name): (kind, message) for rank, name, kind, message in received}
    for name, _, _ in scenarios:
        bad_kind, bad_message = outcomes[(1, name)]
        good_kind, good_message = outcomes.get((0, name), ("missing", ""))
        assert bad_kind in ("RfppInputError", "NonFiniteError"), (name, bad_kind, bad_message)
        assert "rank 1 of the 2 in the process group" in bad_message, (name, bad_message)
        assert good_kind == "RfppInputError", (name, good_kind, good_message)
        assert "rank(s) [1] of the process group refused their input" in good_message, (name, good_message)

"""Both estimators against the independent float64 reference (docs/contract.md sections 1-4, 9)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from support import reference
from support.batches import make_batch

from verl_rfpp import (
    EmptyPopulationError,
    RfppError,
    RfppInputError,
    compute_reinforce_plus_plus_advantage,
    compute_reinforce_plus_plus_baseline_advantage,
    discounted_returns,
    group_centered_rewards,
    masked_global_normalize,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
)
from verl_rfpp.errors import NonFiniteError

pytestmark = pytest.mark.usefixtures("passes_implementation")

TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-12}


def relative_error(actual, expected):
    """Max error relative to the reference's scale; ``actual`` may live on any device."""
    expected = expected.cpu()
    scale = max(expected.abs().max().item(), 1e-30)
    return (actual.cpu().to(torch.float64) - expected).abs().max().item() / scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("seed", range(8))
def test_reinforce_plus_plus_matches_reference(seed, gamma, dtype, device):
    rewards, mask, _ = make_batch(seed, dtype=dtype)
    rewards, mask = rewards.to(device), mask.to(device)
    result = reinforce_plus_plus(rewards, mask, {"gamma": gamma})
    expected_advantages, expected_returns = reference.reinforce_plus_plus(rewards, mask, gamma)
    assert result.advantages.dtype == dtype and result.returns.dtype == dtype
    assert relative_error(result.returns, expected_returns) <= TOLERANCE[dtype]
    assert relative_error(result.advantages, expected_advantages) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(8))
def test_baseline_matches_reference(seed, dtype, device):
    rewards, mask, uids = make_batch(seed, dtype=dtype)
    rewards, mask = rewards.to(device), mask.to(device)
    result = reinforce_plus_plus_baseline(rewards, mask, uids)
    expected_advantages, expected_raw = reference.reinforce_plus_plus_baseline(rewards, mask, list(uids))
    assert relative_error(result.returns, expected_raw) <= TOLERANCE[dtype]
    assert relative_error(result.advantages, expected_advantages) <= TOLERANCE[dtype]


def test_long_gamma_below_one_spans_several_chunks(device):
    rewards, mask, _ = make_batch(3, prompts=2, max_samples=2, length=300, dtype=torch.float64, padding_rows=1)
    rewards, mask = rewards.to(device), mask.to(device)
    result = reinforce_plus_plus(rewards, mask, {"gamma": 0.99})
    _, expected_returns = reference.reinforce_plus_plus(rewards, mask, 0.99)
    assert relative_error(result.returns, expected_returns) <= 1e-12


def test_gamma_zero_keeps_only_the_token_reward(device):
    rewards, mask, _ = make_batch(4, dtype=torch.float64)
    result = reinforce_plus_plus(rewards.to(device), mask.to(device), {"gamma": 0.0})
    assert torch.equal(result.returns.cpu(), torch.where(mask.bool(), rewards, 0.0))


def test_discount_is_by_position_across_an_interior_hole(device):
    rewards = torch.tensor([[0.0, 5.0, 0.0, 1.0]], dtype=torch.float64, device=device)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]], device=device)
    result = reinforce_plus_plus(rewards, mask, {"gamma": 0.5})
    # t=0: 0 + 0.5*5 + 0.25*0 (hole) + 0.125*1 ; t=1: 5 + 0.25*1 ; hole: 0 ; t=3: 1
    assert result.returns.tolist() == [[2.625, 5.25, 0.0, 1.0]]


def test_singleton_groups_and_padding_rows_get_zero_advantage(device):
    rewards = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 4.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64,
                           device=device)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]], device=device)
    uids = np.array(["solo", "pair", "pair", "pad", "pad"], dtype=object)
    result = reinforce_plus_plus_baseline(rewards, mask, uids)
    assert result.returns.tolist() == [[0.0, 0.0], [-1.0, -1.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]


def test_group_mean_is_inclusive_not_leave_one_out(device):
    rewards = torch.tensor([[1.0], [0.0], [0.0]], dtype=torch.float64, device=device)
    result = reinforce_plus_plus_baseline(rewards, torch.ones(3, 1, device=device), ["a", "a", "a"])
    expected = torch.tensor([2 / 3, -1 / 3, -1 / 3], dtype=torch.float64)
    assert torch.allclose(result.returns[:, 0].cpu(), expected, atol=0, rtol=1e-15)


def test_baseline_reward_sums_valid_positions_only(device):
    rewards = torch.tensor([[7.0, 1.0, 100.0], [0.0, 3.0, -50.0]], dtype=torch.float64, device=device)
    mask = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]], device=device)
    result = reinforce_plus_plus_baseline(rewards, mask, ["g", "g"])
    assert result.returns.tolist() == [[0.0, -1.0, 0.0], [1.0, 1.0, 0.0]]


@pytest.mark.parametrize(
    "uids",
    [
        np.array([3, 3, 7, 7]),
        [("p", 1), ("p", 1), ("q", 2), ("q", 2)],
        np.array(["x", "x", 5, 5], dtype=object),
        torch.tensor([1, 1, 2, 2]),
    ],
    ids=["int-array", "tuples", "mixed-types", "tensor"],
)
def test_any_hashable_uids_form_groups(uids, device):
    rewards = torch.tensor([[1.0], [3.0], [10.0], [20.0]], dtype=torch.float64, device=device)
    result = reinforce_plus_plus_baseline(rewards, torch.ones(4, 1, device=device), uids)
    assert result.returns[:, 0].tolist() == [-1.0, 1.0, -5.0, 5.0]


# --- docs/contract.md section 4 edge cases, each with its exact value -----------------------------

def test_zero_variance_gives_exact_zeros(device):
    rewards = torch.full((3, 4), 0.1, device=device)
    mask = torch.ones(3, 4, device=device)
    result = reinforce_plus_plus(rewards, mask, {"gamma": 0.0})
    assert torch.equal(result.advantages.cpu(), torch.zeros(3, 4))
    assert result.stats.variance_floored.item() == 1.0


def test_one_valid_token_gives_exact_zeros(device):
    rewards = torch.tensor([[0.0, 3.0], [9.0, 9.0]], device=device)
    mask = torch.tensor([[0.0, 1.0], [0.0, 0.0]], device=device)
    result = reinforce_plus_plus(rewards, mask)
    assert torch.equal(result.advantages.cpu(), torch.zeros(2, 2))
    assert result.returns.tolist() == [[0.0, 3.0], [0.0, 0.0]]
    assert result.stats.valid_token_count.item() == 1.0


def test_fully_masked_rows_are_zero_and_do_not_move_the_moments(device):
    rewards, mask, uids = make_batch(11, dtype=torch.float64, padding_rows=0)
    padded_rewards = torch.cat([rewards, torch.full((3, rewards.shape[1]), 1e30, dtype=torch.float64)])
    padded_mask = torch.cat([mask, torch.zeros(3, mask.shape[1])])
    plain = reinforce_plus_plus(rewards.to(device), mask.to(device))
    padded = reinforce_plus_plus(padded_rewards.to(device), padded_mask.to(device))
    assert torch.equal(padded.advantages[: len(rewards)], plain.advantages)
    assert torch.equal(padded.advantages[len(rewards):].cpu(), torch.zeros(3, mask.shape[1], dtype=torch.float64))


def test_all_zero_baseline_batch_gives_zeros(device):
    rewards = torch.zeros(6, 5, device=device)
    mask = torch.ones(6, 5, device=device)
    result = reinforce_plus_plus_baseline(rewards, mask, ["a"] * 3 + ["b"] * 3)
    assert torch.equal(result.advantages.cpu(), torch.zeros(6, 5))
    assert torch.equal(result.returns.cpu(), torch.zeros(6, 5))


def test_all_zero_reward_with_kl_gives_finite_returns(device):
    kl = torch.tensor([[0.2, -0.1, 0.3], [0.1, 0.1, 0.0]], dtype=torch.float64, device=device)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], device=device)
    result = reinforce_plus_plus(-0.01 * kl, mask)
    expected_returns = torch.tensor([[-0.004, -0.002, -0.003], [-0.002, -0.001, 0.0]], dtype=torch.float64)
    assert torch.allclose(result.returns.cpu(), expected_returns, rtol=0, atol=1e-15)
    assert torch.isfinite(result.advantages).all()
    expected, _ = reference.reinforce_plus_plus(-0.01 * kl, mask)
    assert relative_error(result.advantages, expected) <= 1e-12


def test_empty_population_raises():
    with pytest.raises(EmptyPopulationError, match="empty"):
        reinforce_plus_plus(torch.ones(2, 3), torch.zeros(2, 3))
    with pytest.raises(EmptyPopulationError, match="empty"):
        reinforce_plus_plus_baseline(torch.ones(0, 3), torch.zeros(0, 3), [])


# --- masked garbage never leaks (docs/contract.md section 1) --------------------------------------

GARBAGE = st.sampled_from([math.nan, math.inf, -math.inf, 1e30, -1e30])


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    garbage=st.lists(GARBAGE, min_size=1, max_size=4),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    mask_dtype=st.sampled_from([torch.float32, torch.int64, torch.bool]),
    baseline=st.booleans(),
)
def test_garbage_in_masked_positions_changes_nothing(seed, garbage, dtype, mask_dtype, baseline, device):
    rewards, mask, uids = make_batch(seed, prompts=3, length=12, dtype=dtype)
    mask = mask.to(mask_dtype)
    dirty = rewards.clone()
    masked = torch.nonzero(~mask.bool())
    g = torch.Generator().manual_seed(seed)
    picks = masked[torch.randperm(len(masked), generator=g)[: 4 * len(garbage)]]
    for k, (i, t) in enumerate(picks.tolist()):
        dirty[i, t] = garbage[k % len(garbage)]
    rewards, dirty, mask = rewards.to(device), dirty.to(device), mask.to(device)

    def run(r):
        if baseline:
            return reinforce_plus_plus_baseline(r, mask, uids)
        return reinforce_plus_plus(r, mask, {"gamma": 1.0})

    clean, polluted = run(rewards), run(dirty)
    for a, b in [(clean.advantages, polluted.advantages), (clean.returns, polluted.returns)]:
        assert torch.equal(a, b) and torch.isfinite(b).all()
        assert b.dtype == dtype
    for a, b in zip(clean.stats, polluted.stats, strict=True):
        assert torch.equal(a, b) and torch.isfinite(b)
    assert (polluted.advantages[~mask.bool()] == 0).all() and (polluted.returns[~mask.bool()] == 0).all()


@pytest.mark.parametrize("length", [24, 300], ids=["one-chunk", "three-chunks"])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_nan_in_a_masked_slot_of_every_returns_path(gamma, length, passes_implementation, device):
    """Deterministic: NaN in an interior hole, in the padding after a response and in a padding row,
    on each path of the returns (numba kernel or torch; the reversed cumulative sum for gamma = 1,
    the blocked recurrence for gamma < 1, over one chunk or several): the returns equal the
    reference's, and the bits of the same batch with zeros there."""
    rewards, mask, _ = make_batch(21, prompts=3, max_samples=3, length=length, dtype=torch.float64)
    row = int(mask.sum(dim=1).argmax())
    last = int(mask[row].nonzero().max())
    mask[row, last // 2] = 0.0  # an interior hole
    dirty = torch.where(mask.bool(), rewards, 0.0)
    dirty[row, last // 2] = math.nan
    if last + 1 < length:
        dirty[row, last + 1:] = math.nan
    dirty[-1] = math.nan  # a padding row
    clean = torch.where(mask.bool(), rewards, 0.0)
    rewards, dirty, mask = clean.to(device), dirty.to(device), mask.to(device)
    ours = discounted_returns(dirty, mask, gamma)
    assert torch.isfinite(ours).all()
    assert torch.equal(ours, discounted_returns(rewards, mask, gamma))
    assert relative_error(ours, reference.returns_by_recurrence(clean, mask.cpu(), gamma)) <= 1e-12
    assert torch.equal(reinforce_plus_plus(dirty, mask, {"gamma": gamma}).returns, ours)


LAYOUTS = st.sampled_from(["contiguous", "transposed", "strided"])


def _laid_out(tensor, layout):
    """The same values as a non-contiguous view: a transposed copy's transpose, or every other
    column of a wider tensor."""
    if layout == "transposed":
        return tensor.t().contiguous().t()
    if layout == "strided":
        wide = torch.zeros(tensor.shape[0], 2 * tensor.shape[1], dtype=tensor.dtype, device=tensor.device)
        wide[:, ::2] = tensor
        return wide[:, ::2]
    return tensor


@settings(max_examples=150, deadline=None)
@given(
    rows=st.integers(1, 9),
    length=st.integers(1, 33),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
    layout=LAYOUTS,
    mask_dtype=st.sampled_from([torch.bool, torch.uint8, torch.int32, torch.float64, torch.bfloat16]),
    gamma=st.sampled_from([1.0, 0.7]),
)
def test_any_shape_layout_and_mask_dtype_matches_reference(rows, length, density, seed, layout, mask_dtype, gamma,
                                                           device):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(rows, length, generator=g, dtype=torch.float64)
    mask = (torch.rand(rows, length, generator=g) < density).to(mask_dtype)
    rewards, mask = _laid_out(rewards.to(device), layout), _laid_out(mask.to(device), layout)
    uids = [i % 3 for i in range(rows)]
    if not mask.bool().any():
        if device.type == "cpu":  # elsewhere a device-side assert (section 4.6), which ends the CUDA context
            with pytest.raises(EmptyPopulationError):
                reinforce_plus_plus(rewards, mask, {"gamma": gamma})
        return
    result = reinforce_plus_plus(rewards, mask, {"gamma": gamma})
    expected_advantages, expected_returns = reference.reinforce_plus_plus(rewards, mask, gamma)
    assert relative_error(result.returns, expected_returns) <= 1e-12
    assert relative_error(result.advantages, expected_advantages) <= 1e-12
    baseline = reinforce_plus_plus_baseline(rewards, mask, uids)
    expected_advantages, expected_raw = reference.reinforce_plus_plus_baseline(rewards, mask, uids)
    assert relative_error(baseline.returns, expected_raw) <= 1e-12
    assert relative_error(baseline.advantages, expected_advantages) <= 1e-12


def test_row_blocks_on_threads_give_identical_bits(passes_implementation, monkeypatch):
    from verl_rfpp.core import kernels

    rewards, mask, uids = make_batch(9, prompts=12, length=40)
    single = [reinforce_plus_plus(rewards, mask), reinforce_plus_plus_baseline(rewards, mask, uids)]
    monkeypatch.setattr(kernels, "MIN_ELEMENTS_PER_THREAD", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)  # three uneven row blocks, whatever this machine has
    try:
        split = [reinforce_plus_plus(rewards, mask), reinforce_plus_plus_baseline(rewards, mask, uids)]
    finally:
        torch.set_num_threads(threads)
    expected = [reference.reinforce_plus_plus(rewards, mask, 1.0),
                reference.reinforce_plus_plus_baseline(rewards, mask, list(uids))]
    for one, other, (expected_advantages, expected_raw) in zip(single, split, expected, strict=True):
        assert relative_error(other.advantages, expected_advantages) <= TOLERANCE[torch.float32]
        assert relative_error(other.returns, expected_raw) <= TOLERANCE[torch.float32]
        for a, b in zip([one.advantages, one.returns, *one.stats], [other.advantages, other.returns, *other.stats],
                        strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_repeated_calls_on_hundreds_of_rows_give_identical_bits(gamma, device):
    """docs/contract.md section 3.8: no output depends on the order a device accumulates in (CUDA's
    ``index_add_`` atomics did, above a few rows); every output and statistic, five calls in a row."""
    rewards, mask, uids = make_batch(11, prompts=120, max_samples=7, length=48, padding_rows=6)
    assert len(uids) >= 300
    sessions = [f"{uid}-{row % 2}" for row, uid in enumerate(uids)]
    rewards, mask = rewards.to(device), mask.to(device)
    calls = [lambda: reinforce_plus_plus(rewards, mask, {"gamma": gamma}),
             lambda: reinforce_plus_plus_baseline(rewards, mask, uids),
             lambda: reinforce_plus_plus_baseline(rewards, mask, uids, session=sessions)]
    for call in calls:
        first = call()
        for _ in range(4):
            again = call()
            for a, b in zip([first.advantages, first.returns, *first.stats],
                            [again.advantages, again.returns, *again.stats], strict=True):
                assert torch.equal(a, b)


def test_group_centered_rewards_of_float32_scores_are_float64(device):
    """``group_centered_rewards`` widens its scores to float64 before the group means (contract 3.2,
    4.4): float32 scores give the float64 result of their exact values."""
    scores = torch.tensor([1.0, 1e-4, 3.0, 1e8, 1e8 + 8.0, 7.0], dtype=torch.float32)
    lengths = torch.tensor([3, 1, 2, 4, 5, 0])
    uids = ["a", "a", "a", "b", "b", "b"]
    centered = group_centered_rewards(scores.to(device), lengths.to(device), uids)
    assert centered.dtype == torch.float64
    wide = scores.double().tolist()
    mean_a, mean_b = sum(wide[:3]) / 3, (wide[3] + wide[4]) / 2
    assert centered.cpu().tolist() == [wide[0] - mean_a, wide[1] - mean_a, wide[2] - mean_a,
                                       wide[3] - mean_b, wide[4] - mean_b, 0.0]


def test_sessions_with_padding_rows_of_their_own_uid_last(device):
    """Padding rows under a uid of their own, placed last and without a session label, form a group
    with no session: the group sums still have one entry per group (a mutant that sized them by the
    largest code present failed with an IndexError) and the result is the reference's."""
    rewards, mask, uids = make_batch(13, prompts=4, padding_rows=3, dtype=torch.float64)
    sessions = [None if uid == "pad" else f"{uid}-{row % 2}" for row, uid in enumerate(uids)]
    result = reinforce_plus_plus_baseline(rewards.to(device), mask.to(device), uids, session=sessions)
    expected_advantages, expected_raw = reference.session_baseline(rewards, mask, list(uids), sessions)
    assert relative_error(result.returns, expected_raw) <= 1e-12
    assert relative_error(result.advantages, expected_advantages) <= 1e-12


def test_group_sums_run_in_row_order(device):
    """docs/contract.md section 3.8: ``C_i`` is ``R_i`` minus the group total summed in row order
    (a float64 left-to-right sum, the same bits as Python's) over the group's size, on every device.
    The rows are shuffled and span magnitudes, so another order of addition changes the last bits."""
    g = torch.Generator().manual_seed(5)
    rows = 400
    scores = torch.randn(rows, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-8, 9, (rows,), generator=g)
    lengths = torch.randint(0, 3, (rows,), generator=g)
    uids = torch.randint(0, 23, (rows,), generator=g).tolist()
    members: dict = {}
    for row, uid in enumerate(uids):
        if lengths[row] > 0:
            members.setdefault(uid, []).append(float(scores[row]))
    expected = [float(scores[row]) - sum(members[uid]) / len(members[uid])
                if lengths[row] > 0 and len(members[uid]) > 1 else 0.0 for row, uid in enumerate(uids)]
    centered = group_centered_rewards(scores.to(device), lengths.to(device), uids)
    assert centered.cpu().tolist() == expected


# --- precision ----------------------------------------------------------------------------------

def test_float32_moments_are_stable_near_one(device):
    g = torch.Generator().manual_seed(0)
    batch, length = 256, 4608  # 1.18M tokens
    values = (1.0 + 1e-3 * torch.randn(batch, length, generator=g)).float()
    mask = torch.ones(batch, length)
    result = reinforce_plus_plus(values.to(device), mask.to(device), {"gamma": 0.0})
    valid = result.advantages.cpu().to(torch.float64)
    assert abs(valid.std(correction=0).item() - 1.0) <= 1e-3
    assert abs(result.stats.normalized_std.item() - 1.0) <= 1e-3
    # The one-pass E[x^2] - E[x]^2 form in float32 misses badly on the same data: this test can fail.
    one_pass_var = (values.square().mean() - values.mean().square()).item()
    exact_var = values.to(torch.float64).var(correction=0).item()
    assert abs(math.sqrt(max(one_pass_var, 0.0) / exact_var) - 1.0) > 1e-2


def _elementwise_relative_error(actual, expected):
    valid = expected != 0
    return ((actual.cpu().to(torch.float64) - expected).abs()[valid] / expected.abs()[valid]).max().item()


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.5])
def test_recurrence_reference_equals_the_definition(gamma):
    rewards, mask, _ = make_batch(6, dtype=torch.float64)
    assert torch.allclose(reference.returns_by_recurrence(rewards, mask, gamma),
                          reference.returns(rewards, mask, gamma), rtol=1e-13, atol=1e-15)


# float32 returns rounded once from an exact sum are within half an ulp: 2^-24 relative. Every
# path must store that (the kernels sum in float64); 2^-23 leaves room for float64 rounding only.
ONE_ULP = 2.0 ** -23


def test_float32_returns_after_a_large_reward_keep_every_digit(device):
    """The issue-16 reproducer: a float32 prefix difference gave 0.002991, 0.002014, 0.000977."""
    rewards = torch.tensor([[1000.1, 0.001, 0.001, 0.001]])
    result = reinforce_plus_plus(rewards.to(device), torch.ones(1, 4, device=device))
    expected = reference.returns(rewards, torch.ones(1, 4), 1.0)
    assert _elementwise_relative_error(result.returns, expected) <= ONE_ULP
    assert result.returns[0, 1:].tolist() == torch.tensor([0.003, 0.002, 0.001]).tolist()


@pytest.mark.parametrize("gamma", [1.0, 0.999, 0.9])
def test_float32_returns_of_long_dense_rows_are_rounded_once(gamma, device):
    """T = 8192 dense positive rewards behind a large one: each stored return is its exact sum
    rounded to float32 (the tail, 1e-3 of the head, is where a float32 scan loses digits)."""
    g = torch.Generator().manual_seed(16)
    rewards = 0.001 * torch.rand(3, 8192, generator=g) + 1e-6
    rewards[:, 0] = 1000.1
    mask = torch.ones(3, 8192, dtype=torch.int64)
    mask[2, 5000:] = 0  # a shorter response
    mask[1, 100:200] = 0  # an interior hole
    result = reinforce_plus_plus(rewards.to(device), mask.to(device), {"gamma": gamma})
    expected = reference.returns_by_recurrence(rewards, mask, gamma)
    assert _elementwise_relative_error(result.returns, expected) <= ONE_ULP
    assert relative_error(result.advantages, reference.normalize(expected, mask)) <= TOLERANCE[torch.float32]


def test_bfloat16_is_computed_in_float32(device):
    rewards, mask, uids = make_batch(5, dtype=torch.bfloat16)
    result = reinforce_plus_plus_baseline(rewards.to(device), mask.to(device), uids)
    expected, _ = reference.reinforce_plus_plus_baseline(rewards, mask, list(uids))
    assert result.advantages.dtype == torch.bfloat16
    assert relative_error(result.advantages, expected) <= 1e-2  # bf16 output rounding only


# --- call interface (docs/contract.md section 9) --------------------------------------------------

@pytest.mark.parametrize(
    "config",
    [
        None,
        {"gamma": 1.0},
        OmegaConf.create({"gamma": 1.0, "kl_ctrl": {"kl_coef": 0.01}}),
        SimpleNamespace(gamma=1.0),
        pytest.param("algoconfig", id="AlgoConfig"),
    ],
)
def test_config_forms_give_the_same_result(config):
    if config == "algoconfig":
        from verl.trainer.config import AlgoConfig

        config = AlgoConfig(gamma=1.0)
    rewards, mask, uids = make_batch(2, dtype=torch.float64)
    advantages, returns = compute_reinforce_plus_plus_advantage(
        token_level_rewards=rewards, response_mask=mask, config=config, index=uids, unknown_kwarg=1
    )
    expected, expected_returns = reference.reinforce_plus_plus(rewards, mask, 1.0)
    assert relative_error(advantages, expected) <= 1e-12
    assert relative_error(returns, expected_returns) <= 1e-12
    baseline, _ = compute_reinforce_plus_plus_baseline_advantage(
        token_level_rewards=rewards, response_mask=mask, config=config, index=uids, reward_baselines=None
    )
    assert relative_error(baseline, reference.reinforce_plus_plus_baseline(rewards, mask, list(uids))[0]) <= 1e-12


def test_bad_inputs_are_refused_with_a_fix():
    rewards, mask, uids = make_batch(1)
    with pytest.raises(RfppInputError, match="response_mask has shape"):
        reinforce_plus_plus(rewards, mask[:, :-1])
    with pytest.raises(RfppInputError, match=r"outside \[0, 1\]"):
        reinforce_plus_plus(rewards, mask, {"gamma": 1.5})
    with pytest.raises(RfppInputError, match="needs `index`"):
        reinforce_plus_plus_baseline(rewards, mask, None)
    with pytest.raises(RfppInputError, match="one uid per row"):
        reinforce_plus_plus_baseline(rewards, mask, uids[:-1])
    with pytest.raises(RfppInputError, match="floating point"):
        reinforce_plus_plus(rewards.long(), mask)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("baseline", [False, True], ids=["rfpp", "baseline"])
def test_nonfinite_value_at_a_valid_position_is_an_error(value, baseline):
    rewards, mask, uids = make_batch(1)
    rewards[0, 0] = value
    mask[0, 0] = 1.0
    with pytest.raises(NonFiniteError, match="NaN or Inf") as raised:
        reinforce_plus_plus_baseline(rewards, mask, uids) if baseline else reinforce_plus_plus(rewards, mask)
    assert isinstance(raised.value, RfppError)


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("baseline", [False, True], ids=["rfpp", "baseline"])
def test_nan_in_the_mask_is_refused_naming_its_position(mask_dtype, baseline):
    rewards, mask, uids = make_batch(2)
    mask = mask.to(mask_dtype)
    mask[2, 1] = math.nan
    mask[3, 0] = math.nan
    with pytest.raises(RfppInputError, match=r"response_mask holds NaN \(first at row 2, position 1\)"):
        reinforce_plus_plus_baseline(rewards, mask, uids) if baseline else reinforce_plus_plus(rewards, mask)
    with pytest.raises(RfppInputError, match="response_mask holds NaN"):
        masked_global_normalize(rewards, mask)


@pytest.mark.parametrize("missing", [None, math.nan, np.float64("nan")], ids=["None", "nan", "np.nan"])
@pytest.mark.parametrize("container", ["list", "object-array"])
def test_missing_uid_of_a_response_is_refused_naming_the_row(missing, container):
    rewards = torch.tensor([[1.0], [3.0], [10.0], [20.0], [0.0]], dtype=torch.float64)
    mask = torch.tensor([[1], [1], [1], [1], [0]])
    uids = ["a", "a", missing, missing, missing]
    index = uids if container == "list" else np.array(uids, dtype=object)
    with pytest.raises(RfppInputError, match=r"no uid \(None or NaN\) for row 2, .*\(2 such rows in all\)"):
        reinforce_plus_plus_baseline(rewards, mask, index)
    # a padding row (no valid token) joins no group: its uid is never read
    uids[2:4] = ["b", "b"]
    index = uids if container == "list" else np.array(uids, dtype=object)
    assert reinforce_plus_plus_baseline(rewards, mask, index).returns[:, 0].tolist() == [-1.0, 1.0, -5.0, 5.0, 0.0]


def test_missing_uid_in_a_float_index_is_refused():
    rewards, mask, _ = make_batch(1)
    index = np.arange(rewards.shape[0], dtype=np.float64) // 2
    index[1] = np.nan
    with pytest.raises(RfppInputError, match="for row 1,"):
        reinforce_plus_plus_baseline(rewards, torch.ones_like(mask), index)


@pytest.mark.parametrize("dtype,reward", [(torch.float16, 60000.0), (torch.bfloat16, 3.0e38), (torch.float32, 3.0e38)])
@pytest.mark.parametrize("baseline", [False, True], ids=["rfpp", "baseline"])
def test_raw_advantage_overflowing_its_dtype_is_an_error_for_both(dtype, reward, baseline):
    """Two valid rewards that each fit the dtype, whose sum (G at t=0, or C_i) does not."""
    rewards = torch.zeros(4, 3, dtype=dtype)
    rewards[1, 0] = reward
    rewards[1, 2] = reward
    mask = torch.ones(4, 3, dtype=torch.int64)
    uids = np.array(["a", "b", "b", "b"], dtype=object)  # C_1 = (2/3) * 2 * reward
    with pytest.raises(NonFiniteError) as raised:
        reinforce_plus_plus_baseline(rewards, mask, uids) if baseline else reinforce_plus_plus(rewards, mask)
    message = str(raised.value)
    # float32 working sums (REINFORCE++, the torch operations) may overflow before the output does
    assert f"in row 1 overflows {dtype}" in message or (reward > 1e38 and "values so large" in message)


def test_cpu_tensors_take_the_kernels_unless_switched_off(passes_implementation, monkeypatch):
    from verl_rfpp.core import passes

    rewards, mask, _ = make_batch(1)
    assert passes.uses_cpu_kernels(rewards, mask) == (passes_implementation == "kernels")
    monkeypatch.setenv(passes.CPU_KERNELS_VARIABLE, "yes")
    with pytest.raises(RfppInputError, match="VERL_RFPP_CPU_KERNELS='yes'; use 1"):
        reinforce_plus_plus(rewards, mask)

"""Time and memory of verl-rfpp's estimators against verl 0.9.1's built-ins, in one run.

Per batch size, dtype and estimator, one row: our median time, verl's, the ratio, our time in
units of one ``clone()`` of the reward tensor (the memory-bandwidth floor: read and write it
once), our peak extra memory in B x T float32 tensors (beyond inputs and the two outputs, from
the process's peak RSS, reset through /proc/self/clear_refs), and the max error against a float64
computation relative to the output scale. Asserts nothing about time.

On ``--device cuda`` the inputs are CUDA tensors (both implementations run there), every timing
synchronizes the device, and the peak extra memory is the CUDA allocator's peak.

    python benchmarks/bench_estimators.py                  # full grid, up to 8192 x 8192
    python benchmarks/bench_estimators.py --quick          # seconds
    python benchmarks/bench_estimators.py --sizes 1024x4096,4096x8192   # some sizes of the full grid
    python benchmarks/bench_estimators.py --device cuda    # on the GPU
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import time

import numba
import numpy as np
import torch
import verl  # noqa: F401  (loads the plugin)
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from verl_rfpp import reinforce_plus_plus, reinforce_plus_plus_baseline
from verl_rfpp.core import passes
from verl_rfpp.core.groups import Segments

SAMPLES_PER_PROMPT = 8
GAMMA = 0.99  # the discounted REINFORCE++ row: the gamma < 1 path (docs/contract.md section 2)
DISCOUNTED = f"reinforce_plus_plus g={GAMMA}"


def make_inputs(batch: int, length: int, dtype: torch.dtype, seed: int = 0):
    """Right-padded responses, lengths uniform in [length/4, length], k1-shaped outcome rewards,
    and an int64 mask (verl's ``response_mask`` is a slice of the int64 attention mask)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, length // 4), length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    rewards = -0.01 * 0.05 * torch.randn(batch, length, generator=g) * mask
    rewards[torch.arange(batch), lengths - 1] += torch.randint(0, 2, (batch,), generator=g).float()
    uids = np.array([f"prompt-{i // SAMPLES_PER_PROMPT}" for i in range(batch)], dtype=object)
    return rewards.to(dtype), mask, uids


def float64_truth(name: str, rewards: torch.Tensor, mask: torch.Tensor, uids) -> torch.Tensor:
    """Normalized advantages in float64, vectorized independently of the package's code."""
    r = torch.where(mask.bool(), rewards.double(), 0.0)
    if name == "reinforce_plus_plus":
        raw = r.flip(1).cumsum(1).flip(1) * mask
    elif name == DISCOUNTED:
        raw = torch.empty_like(r)
        running = torch.zeros_like(r[:, 0])
        for t in range(r.shape[1] - 1, -1, -1):  # G_t = r_t + gamma * G_(t+1), by position
            running = r[:, t] + GAMMA * running
            raw[:, t] = running
        raw = raw * mask
    else:
        _, codes = np.unique(uids, return_inverse=True)
        codes = torch.from_numpy(codes).to(r.device)
        scores = r.sum(1)
        totals = torch.zeros(int(codes.max()) + 1, dtype=torch.float64, device=r.device).index_add_(0, codes, scores)
        counts = torch.bincount(codes).double()
        centered = scores - (totals / counts)[codes]
        centered = torch.where(counts[codes] > 1, centered, 0.0)
        raw = centered[:, None] * mask
    valid = raw[mask.bool()]
    mu, var = valid.mean(), valid.var(correction=0)
    return torch.where(mask.bool(), (raw - mu) / var.clamp(min=1e-8).sqrt(), 0.0)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_time(fn, repeats: int, device: torch.device) -> float:
    fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(field)


def _release_free_heap() -> bool:
    """Give the heap's free pages back to the kernel (glibc ``malloc_trim``), so that what ``fn``
    allocates shows in the RSS: without it, buffers freed by the previous call (glibc keeps large
    freed chunks once its mmap threshold has grown) are reused without raising the RSS, and the
    growth minus the returned outputs came out negative."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: no way to release them
        return False
    return True


def peak_extra_bytes(fn, device: torch.device) -> float:
    """Peak memory growth during ``fn`` minus what it returns: the process's RSS on the CPU (NaN
    where its peak cannot be reset or the heap's free pages released), the CUDA allocator's peak on a GPU."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        outputs = fn()
        synchronize(device)
        returned = sum(t.numel() * t.element_size() for t in outputs)
        return float(torch.cuda.max_memory_allocated(device) - before - returned)
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            if not _release_free_heap():
                return float("nan")
            clear.write("5")
    except OSError:
        return float("nan")
    before = _rss_kib("VmRSS:")
    outputs = fn()
    peak = _rss_kib("VmHWM:")
    returned = sum(t.numel() * t.element_size() for t in outputs)
    return (peak - before) * 1024.0 - returned


def run(grid, dtypes, repeats, device: torch.device):
    ours = {
        "reinforce_plus_plus": lambda r, m, u: reinforce_plus_plus(r, m, {"gamma": 1.0})[:2],
        DISCOUNTED: lambda r, m, u: reinforce_plus_plus(r, m, {"gamma": GAMMA})[:2],
        "reinforce_plus_plus_baseline": lambda r, m, u: reinforce_plus_plus_baseline(r, m, u)[:2],
    }
    verls = {
        "reinforce_plus_plus": lambda r, m, u: core_algos.compute_reinforce_plus_plus_outcome_advantage(
            token_level_rewards=r, response_mask=m, config=OmegaConf.create({"gamma": 1.0})),
        DISCOUNTED: lambda r, m, u: core_algos.compute_reinforce_plus_plus_outcome_advantage(
            token_level_rewards=r, response_mask=m, config=OmegaConf.create({"gamma": GAMMA})),
        "reinforce_plus_plus_baseline": lambda r, m, u: (
            core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
                token_level_rewards=r, response_mask=m, index=u)),
    }
    probe = torch.empty(0, device=device)
    kernels = f"numba {numba.__version__} CPU kernels" if passes.uses_cpu_kernels(probe) else "torch operations"
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, verl {verl.__version__}, device: {where}, ours: {kernels}")
    header = (f"{'B x T':>12} {'dtype':>9} {'estimator':>32} {'ours ms':>9} {'verl ms':>9} "
              f"{'verl/ours':>9} {'clone-units':>11} {'peak extra (BxT f32)':>20} {'max rel err':>11}")
    print(header)
    print("-" * len(header))
    for batch, length in grid:
        for dtype in dtypes:
            rewards, mask, uids = make_inputs(batch, length, dtype)
            rewards, mask = rewards.to(device), mask.to(device)
            unit = batch * length * 4
            clone = median_time(lambda: rewards.clone(), repeats, device)  # noqa: B023 (timed within this iteration)
            for name in ours:
                ours_time = median_time(lambda: ours[name](rewards, mask, uids), repeats, device)  # noqa: B023 (timed within this iteration)
                # Before verl's run, whose many small frees would let the heap absorb our buffers.
                extra = peak_extra_bytes(lambda: ours[name](rewards, mask, uids), device) / unit  # noqa: B023 (timed within this iteration)
                verl_time = median_time(lambda: verls[name](rewards, mask, uids), max(1, repeats // 2), device)  # noqa: B023 (timed within this iteration)
                advantages = ours[name](rewards, mask, uids)[0]
                truth = float64_truth(name, rewards, mask, uids)
                error = (advantages.double() - truth).abs().max().item() / truth.abs().max().item()
                del advantages, truth
                print(f"{f'{batch} x {length}':>12} {str(dtype).replace('torch.', ''):>9} {name:>32} "
                      f"{ours_time * 1e3:9.1f} {verl_time * 1e3:9.1f} {verl_time / ours_time:9.1f} "
                      f"{ours_time / clone:11.1f} {extra:20.2f} {error:11.1e}", flush=True)


def group_sums(batches, repeats, device: torch.device) -> None:
    """The baseline's group sums (docs/contract.md section 3.8), one line per batch size: ours (rows
    sorted by group on the host, then ``segment_reduce``: the same bits on every call and device)
    against ``index_add_`` (atomics on CUDA: order-dependent last bits), both for the two float64
    sums the baseline takes per group, in one run."""
    for batch in batches:
        g = torch.Generator().manual_seed(batch)
        codes = torch.randperm(batch, generator=g) // SAMPLES_PER_PROMPT
        groups = -(-batch // SAMPLES_PER_PROMPT)
        first, second = torch.randn(2, batch, generator=g, dtype=torch.float64).to(device)
        on_device = codes.to(device)

        def atomics(groups=groups, codes=on_device, first=first, second=second):
            zeros = torch.zeros(groups, dtype=torch.float64, device=device)
            return zeros.index_add(0, codes, first), zeros.index_add(0, codes, second)

        segment = median_time(lambda: Segments.of(codes, groups, device).sums(first, second), repeats, device)  # noqa: B023
        atomic = median_time(atomics, repeats, device)
        print(f"group sums, {batch} rows in {groups} groups, float64 x 2: segment sums {segment * 1e3:.3f} ms, "
              f"index_add_ {atomic * 1e3:.3f} ms, segment/index_add_ {segment / atomic:.1f}", flush=True)


def _sizes(text: str) -> list[tuple[int, int]]:
    """``--sizes``: ``BxT`` pairs of positive integers, comma-separated."""
    try:
        sizes = [tuple(int(n) for n in item.lower().split("x")) for item in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(len(size) != 2 or min(size) < 1 for size in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: expected BxT pairs of positive integers, e.g. 1024x4096,4096x8192")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small grid that runs in seconds")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="where the tensors live: cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--sizes", type=_sizes, default=None, metavar="BxT[,BxT...]",
                        help="sizes B x T instead of the full grid's four, e.g. 1024x4096,4096x8192")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device on this machine")
    if args.quick:
        grid, dtypes, repeats = [(64, 256), (256, 512)], [torch.float32, torch.bfloat16], 2
    else:
        grid = args.sizes or [(1024, 4096), (4096, 8192), (8192, 8192), (256, 32768)]
        dtypes, repeats = [torch.float32, torch.bfloat16], args.repeats
    run(grid, dtypes, repeats, device)
    group_sums(sorted({batch for batch, _ in grid}), max(repeats, 20), device)


if __name__ == "__main__":
    main()

"""CPU kernels for the passes over ``(bs, T)`` arrays: numba, compiled on first use, cached on disk.

verl computes advantages in its driver process, on the CPU. There, every eager torch operation is
one more trip through memory; these kernels fuse each pass of docs/contract.md sections 2-4 into a single
read of its inputs (and a single write of its outputs), so the two estimators cost about what
reading the rewards and writing the two outputs cost (docs/performance.md).

Every kernel handles the rows ``[lo, hi)`` of numpy arrays (``run`` splits the rows over threads;
the kernels release the GIL). Selection is a branch-free ``x if keep else 0.0``: a masked position
is never read into arithmetic, so NaN/Inf stored there cannot leak (docs/contract.md section 1). Sums
accumulate in float64 (docs/contract.md section 4); a value is rounded to the output dtype once, when it is
stored. Per-row results go to ``(bs,)`` float64 / int64 arrays; the caller adds the rows up.

numba's disk cache is an optimization, never a requirement: with no writable cache location, or
with unreadable cache files (truncated, garbage, another numba's), the same kernels compile in
memory, and one WARNING on logger ``verl_rfpp`` names the problem and the fix (``NUMBA_CACHE_DIR``);
a ``NUMBA_CACHE_DIR`` numba cannot write to (it then caches elsewhere without a word) is reported
the same way. ``cache_problem`` and ``cache_directory`` (where the kernels are really cached)
are kept for ``verl-rfpp doctor``.
"""

from __future__ import annotations

import functools
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

import numba
import numpy as np

logger = logging.getLogger("verl_rfpp")

_JIT = {"nogil": True, "boundscheck": False}
# Reassociating float64 sums lets LLVM vectorize the reductions; results stay deterministic on a
# machine (the order depends only on the vector width). No other fast-math flag: NaN and Inf at a
# valid position must survive to the caller's finiteness check.
_REDUCTION_JIT = {**_JIT, "fastmath": {"reassoc"}}

cache_problem: Optional[str] = None  # why the disk cache is not used as asked in this process
cache_directory: Optional[str] = None  # where numba really caches the kernels (None: in memory)

IN_MEMORY = "they are compiled in memory instead (about 1 s per process, same results)"


def _cache_failed(problem: str, consequence: str = IN_MEMORY) -> None:
    """Record the first cache problem of this process and log it once, with the fix."""
    global cache_problem
    if cache_problem is not None:
        return
    target = os.environ.get("NUMBA_CACHE_DIR")
    where = f"NUMBA_CACHE_DIR={target!r}" if target else "no NUMBA_CACHE_DIR set"
    cache_problem = (
        f"numba cannot use its disk cache for the verl_rfpp CPU kernels ({problem}; {where}); "
        f"{consequence}. Fix: set NUMBA_CACHE_DIR to a writable directory (or delete the unreadable "
        "cache files)."
    )
    logger.warning("verl_rfpp: %s", cache_problem)


def _check_location(cache: Any) -> None:
    """Record where ``cache`` (numba's FunctionCache) writes. numba skips a ``NUMBA_CACHE_DIR`` it
    cannot write to and silently caches elsewhere; that is a cache problem of its own."""
    global cache_directory
    path = getattr(cache, "_cache_path", None)
    if path is None:
        return
    cache_directory = path
    target = os.environ.get("NUMBA_CACHE_DIR")
    if target and os.path.commonpath([os.path.abspath(target), os.path.abspath(path)]) != os.path.abspath(target):
        _cache_failed("NUMBA_CACHE_DIR is not a writable directory",
                      f"numba caches them in {path} instead")


def _guard(method: Callable[..., Any], action: str, cleanup: Callable[[], None]) -> Callable[..., Any]:
    """A cache method whose failure is a cache miss (load) or a skipped save, never an error."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 (pickle, EOF, OS and numba errors alike)
            _cache_failed(f"{action} failed with {type(error).__name__}: {error}")
            cleanup()
            return None

    return guarded


def _remove_index(cache: Any) -> None:
    """Drop an unreadable index file, so this process's save writes a fresh one (self-repair)."""
    index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    try:
        if index:
            os.remove(index)
    except OSError:
        pass


def _njit(options: dict[str, Any]) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)`` that falls back to an in-memory cache.

    numba raises at decoration when no cache location is writable ("no locator available"), and
    at the first call when a cache file cannot be read. Both become one WARNING (``_cache_failed``)
    and in-memory compilation of the same function with the same options.
    """

    def decorate(function: Callable[..., Any]) -> Any:
        try:
            dispatcher = numba.njit(cache=True, **options)(function)
        except RuntimeError as error:  # "cannot cache function ...: no locator available ..."
            _cache_failed(str(error))
            return numba.njit(cache=False, **options)(function)
        cache = getattr(dispatcher, "_cache", None)  # numba's FunctionCache (private, numba >= 0.60)
        _check_location(cache)
        if cache is not None and hasattr(cache, "load_overload") and hasattr(cache, "save_overload"):
            cache.load_overload = _guard(cache.load_overload, "reading a cache file",
                                         functools.partial(_remove_index, cache))
            cache.save_overload = _guard(cache.save_overload, "writing a cache file", lambda: None)
        return dispatcher

    return decorate

MIN_ELEMENTS_PER_THREAD = 1 << 18


@_njit(_REDUCTION_JIT)
def row_sums_of_selected(values, mask, store_valid, valid, row_sum, row_count, lo, hi):
    """``row_sum[i] = sum_t select(m, values)``, ``row_count[i] = L_i``; ``valid = (mask != 0)``
    is stored as uint8 when ``store_valid`` (otherwise ``valid`` is not touched)."""
    length = values.shape[1]
    for i in range(lo, hi):
        total = 0.0
        count = 0
        for t in range(length):
            keep = mask[i, t] != 0
            if store_valid:
                valid[i, t] = keep
            total += values[i, t] if keep else 0.0
            count += keep
        row_sum[i] = total
        row_count[i] = count


@_njit(_JIT)
def suffix_sums(rewards, mask, gamma, store_valid, valid, returns, row_sum, row_count, lo, hi):
    """``returns[i,t] = m * sum_{u>=t} gamma^(u-t) * select(m, r)[i,u]`` (docs/contract.md section 2).

    One backward sweep per row, ``acc = select(m, r)[t] + gamma * acc`` in float64: it runs
    through interior holes (zero reward, the discount still applies) and never resets. Also
    ``row_sum[i] = sum_t returns[i,t]`` (of the stored values), ``row_count[i] = L_i`` and, when
    ``store_valid``, the uint8 ``valid`` mask. ``gamma == 1`` has a loop of its own, without the
    multiply: the backward sum is a dependency chain, and its latency is the cost (measured: a
    shared loop, even with FMA, is 1.6x slower).
    """
    length = rewards.shape[1]
    for i in range(lo, hi):
        acc = 0.0
        total = 0.0
        count = 0
        if gamma == 1.0:
            for t in range(length - 1, -1, -1):
                keep = mask[i, t] != 0
                if store_valid:
                    valid[i, t] = keep
                acc += rewards[i, t] if keep else 0.0
                returns[i, t] = acc if keep else 0.0
                total += returns[i, t]
                count += keep
        else:
            for t in range(length - 1, -1, -1):
                keep = mask[i, t] != 0
                if store_valid:
                    valid[i, t] = keep
                acc = (rewards[i, t] if keep else 0.0) + gamma * acc
                returns[i, t] = acc if keep else 0.0
                total += returns[i, t]
                count += keep
        row_sum[i] = total
        row_count[i] = count


@_njit(_REDUCTION_JIT)
def centered_row_sums(values, valid, mean, row_sum, row_squares, lo, hi):
    """``sum_t c`` and ``sum_t c^2`` with ``c = values - mean`` (float64) on valid positions."""
    length = values.shape[1]
    for i in range(lo, hi):
        total = 0.0
        squares = 0.0
        for t in range(length):
            centered = values[i, t] - mean if valid[i, t] else 0.0
            total += centered
            squares += centered * centered
        row_sum[i] = total
        row_squares[i] = squares


@_njit(_REDUCTION_JIT)
def normalize(values, valid, mean, scale, out, row_sum, row_squares, lo, hi):
    """``out = where(m, (values - mean) * scale, 0)``; the sums of the stored ``out`` and of its
    squares per row (the output metrics of docs/contract.md section 7)."""
    length = values.shape[1]
    for i in range(lo, hi):
        total = 0.0
        squares = 0.0
        for t in range(length):
            out[i, t] = (values[i, t] - mean) * scale if valid[i, t] else 0.0
            stored = np.float64(out[i, t])
            total += stored
            squares += stored * stored
        row_sum[i] = total
        row_squares[i] = squares


@_njit(_JIT)
def broadcast_row_values(valid, first_rows, second_rows, first_out, second_out, lo, hi):
    """``first_out[i,t] = where(m, first_rows[i], 0)`` and the same for ``second``: the two
    row-constant outputs of the baseline (docs/contract.md section 3) in one pass over the mask."""
    length = valid.shape[1]
    for i in range(lo, hi):
        first = first_rows[i]
        second = second_rows[i]
        for t in range(length):
            keep = valid[i, t] != 0
            first_out[i, t] = first if keep else 0.0
            second_out[i, t] = second if keep else 0.0


def run_parallel(kernel, shape: tuple[int, int], threads: int, *arrays) -> None:
    """Call ``kernel(*arrays, lo, hi)`` on contiguous row blocks, one per thread.

    At most ``threads`` blocks (the trip count never grows with the batch), each of at least
    ``MIN_ELEMENTS_PER_THREAD`` elements; small arrays run on the calling thread.
    """
    rows, length = shape
    blocks = max(1, min(threads, rows, rows * length // MIN_ELEMENTS_PER_THREAD))
    if blocks == 1:
        kernel(*arrays, 0, rows)
        return
    bounds = np.linspace(0, rows, blocks + 1).astype(np.int64).tolist()
    with ThreadPoolExecutor(max_workers=blocks, thread_name_prefix="verl_rfpp") as pool:
        futures = [pool.submit(kernel, *arrays, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]
        for future in futures:
            future.result()

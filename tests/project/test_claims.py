"""Every speed and time figure of the README is one a committed table measured (issue 30): the
speed-ups are the range of docs/performance.md's benchmark table, per estimator, with its
conditions (and the CHANGELOG states no other range); each duration is a row of docs/timings.md,
which names the command, the machine and its load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()

BENCHMARK_ROW = re.compile(r"(?m)^ *(\d+) x (\d+) +(\w+) +(\w+) +([\d.]+) +([\d.]+) +([\d.]+) ")
ESTIMATOR_WORDS = {"reinforce_plus_plus": "REINFORCE++", "reinforce_plus_plus_baseline": "the baseline"}
DURATION = re.compile(r"\b\d[\d.,]*(?:-\d[\d.,]*)? ?(?:ms|s|min|minutes|seconds|hours?)\b")


def benchmark_rows(performance: str) -> list[dict]:
    """The rows of the benchmark table (the code block that opens with its ``machine:`` line)."""
    (block,) = re.findall(r"(?ms)^```\n(machine:.*?)^```", performance)
    rows = []
    for batch, length, dtype, estimator, ours, verl, ratio in BENCHMARK_ROW.findall(block):
        # A column moved if verl/ours is not verl ms / ours ms (to the table's rounding).
        assert float(ratio) == pytest.approx(float(verl) / float(ours), abs=0.06, rel=0.01), (batch, length, estimator)
        rows.append({"shape": (int(batch), int(length)), "dtype": dtype, "estimator": estimator,
                     "speedup": float(ratio)})
    assert rows, "docs/performance.md has no benchmark table"
    return rows


def speed_claims(performance: str) -> tuple[list[str], list[str]]:
    """What the README must say: each estimator's whole range of speed-ups, the machine, the
    dtypes, the smallest and largest shape and the command that measured them; and the ranges."""
    rows = benchmark_rows(performance)
    (machine,) = re.findall(r"(?m)^machine: [^,]+, (\d+ cores?),", performance)
    claims, ranges = [machine, "python benchmarks/bench_estimators.py"], []
    for estimator, words in ESTIMATOR_WORDS.items():
        speedups = [row["speedup"] for row in rows if row["estimator"] == estimator]
        ranges.append(f"{min(speedups):.1f}-{max(speedups):.1f}")
        claims.append(f"{words} {ranges[-1]}x")
    claims += sorted({row["dtype"] for row in rows})
    tokens = sorted({row["shape"] for row in rows}, key=lambda shape: shape[0] * shape[1])
    claims += [f"{tokens[0][0]} x {tokens[0][1]}", f"{tokens[-1][0]} x {tokens[-1][1]}"]
    return claims, ranges


def timing_rows(timings: str) -> dict[str, str]:
    """``{command: measured}`` from docs/timings.md's table (first column a command in backticks;
    benchmarks/timings.py writes it, tests/project/test_timings.py reads what it writes with this)."""
    rows = dict(re.findall(r"(?m)^\| `([^`]+)` \| ([^|]+?) \|", timings))
    assert rows, "docs/timings.md has no table of commands"
    return rows


def gpu_check_limits(script: str) -> str:
    """A figure the code enforces rather than measures: benchmarks/gpu_check.sh's time limits, in
    all, as the README words them."""
    limits = [*map(int, re.findall(r"(?m)^limits=\(([\d ]+)\)", script)[0].split()),
              *(int(re.findall(rf"(?m)^{name}=(\d+)$", script)[0]) for name in ("rank_limit", "bench_limit"))]
    return f"the time limits add up to {sum(limits) / 60:g} minutes"


def durations_without_a_measurement(readme: str, figures: list[str]) -> list[str]:
    """Durations ``readme`` states that are none of ``figures``."""
    for figure in figures:
        readme = readme.replace(figure, "")
    return DURATION.findall(readme)


def stale_ranges(readme: str, ranges: list[str]) -> list[str]:
    """Speed-up ranges (``A-Bx``) ``readme`` states that are none of ``ranges``."""
    return [found for found in re.findall(r"(\d[\d.]*-\d[\d.]*)x\b", readme) if found not in ranges]


def test_the_readmes_speedups_are_the_whole_range_of_the_benchmark_table() -> None:
    claims, ranges = speed_claims((ROOT / "docs" / "performance.md").read_text())
    missing = [claim for claim in claims if claim not in README]
    assert missing == [], f"README should state {missing} (docs/performance.md's table)"
    assert stale_ranges(README + (ROOT / "CHANGELOG.md").read_text(), ranges) == []


def test_every_duration_in_the_readme_is_a_measured_row_of_docs_timings() -> None:
    rows = timing_rows((ROOT / "docs" / "timings.md").read_text())
    limits = gpu_check_limits((ROOT / "benchmarks" / "gpu_check.sh").read_text())
    assert limits in README
    assert durations_without_a_measurement(README, [*rows.values(), limits]) == []
    for command, figure in rows.items():
        if figure in README:
            assert command in README, f"README states {figure!r} but not its command {command!r}"


# --- self-tests: the readers find what they are meant to find --------------------------------


def test_readers_catch_a_narrowed_range_and_an_unmeasured_duration() -> None:
    table = ("```\nmachine: x86_64, 2 cores, torch\n  B x T dtype estimator ours verl verl/ours\n"
             " 4 x 8 float32 reinforce_plus_plus 10.0 200.0 20.0 1.0\n"
             " 4 x 8 float32 reinforce_plus_plus_baseline 10.0 47.0 4.7 1.0\n"
             " 2 x 64 bfloat16 reinforce_plus_plus_baseline 10.0 104.0 10.4 1.0\n```\n")
    rows = benchmark_rows(table)
    assert [row["speedup"] for row in rows] == [20.0, 4.7, 10.4]
    assert rows[2]["shape"] == (2, 64)
    with pytest.raises(AssertionError):
        benchmark_rows(table.replace(" 47.0 4.7", " 47.0 9.9"))  # a ratio that is not verl / ours
    measured = timing_rows("| command | measured |\n| --- | --- |\n| `verl-rfpp demo` | 96-118 s |\n")
    assert measured == {"verl-rfpp demo": "96-118 s"}
    limits = gpu_check_limits("x=1\nlimits=(270 60 120)  # per module\nrank_limit=45\nbench_limit=75\n"
                              "limits=(1 1)\nrank_limit=9\n")  # the first of each: the real check's
    assert limits == "the time limits add up to 9.5 minutes"
    readme = "the demo (96-118 s), about 80 s, 20 minutes, the time limits add up to 9.5 minutes"
    assert durations_without_a_measurement(readme, [*measured.values(), limits]) == ["80 s", "20 minutes"]
    assert stale_ranges("REINFORCE++ 10.8-30.3x, 10-30x faster", ["10.8-30.3"]) == ["10-30"]

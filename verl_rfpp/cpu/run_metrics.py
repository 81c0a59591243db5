"""verl's metrics of one CPU run, as the launcher reads and keeps them: a step's console line
(``parse_step_line``), verl's ``file`` logger output split into what the seed decides
(``METRICS``) and what the clock or the machine decides (``TIMING``, ``is_clock_metric``), and the
weights' digests the run trace records (``weight_digests``). No process is started here."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Optional, Sequence

METRICS = "metrics.jsonl"  # every step's metrics that the seed decides, one JSON line per step
TIMING = "timing.jsonl"  # every step's metrics that the clock or the machine decides
VERL_METRICS = "verl-metrics.jsonl"  # verl's ``file`` logger: one run's lines, before the split


def parse_step_line(line: str) -> Optional[tuple[int, dict[str, float]]]:
    """verl's console logger line ``step:N - key:value - ...`` as ``(N, {key: value})``."""
    match = re.search(r"step:(\d+) - (.*)$", line)
    if not match:
        return None
    metrics = {}
    for part in match.group(2).split(" - "):
        key, _, raw = part.partition(":")
        raw = re.sub(r"np\.\w+\((.*)\)", r"\1", raw.strip())  # the legacy trainer logs np.float64(x)
        number = re.search(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", raw)
        if key and number:
            metrics[key.strip()] = float(number.group(0))
    return int(match.group(1)), metrics


# The metrics the clock or the machine decides (wall-clock times, throughputs, MFU, memory): they
# differ between two runs of one seed; every other key verl logs is decided by the seed (measured:
# docs/cpu-backend.md, "Same seed, same run").
CLOCK_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/")
SEED_PERF_METRICS = {"perf/total_num_tokens"}  # a token count, under perf/


def is_clock_metric(key: str) -> bool:
    return (key.startswith(CLOCK_PREFIXES) or "/perf/" in key) and key not in SEED_PERF_METRICS


def weight_digests(trace_lines: Sequence[str]) -> dict[int, str]:
    """``{global_steps: sha256}`` of the weights each rollout server received (the trace's
    ``weights`` lines); where the servers of several ranks received different weights, the value
    says so: ``differ: <digest>, <digest>`` (the ranks' copies of the actor diverged)."""
    seen: dict[int, list[str]] = {}
    for line in trace_lines:
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        if line.startswith("weights ") and "sha256" in fields:
            digests = seen.setdefault(int(fields["global_steps"]), [])
            if fields["sha256"] not in digests:
                digests.append(fields["sha256"])
    return {step: digests[0] if len(digests) == 1 else "differ: " + ", ".join(digests)
            for step, digests in seen.items()}


def write_metrics(out_dir: Path, resumed: bool = False) -> dict[int, dict]:
    """Split verl's ``file`` logger output (``VERL_METRICS``, this run's steps) into ``METRICS``
    (what the seed decides) and ``TIMING`` (``is_clock_metric``), one line ``{"step": N, ...}``
    per step, keys sorted, floats at full precision (JSON's shortest round trip). A resumed run
    keeps the lines of the earlier run before its own first step (those of a killed run too:
    ``launch._run`` splits its ``VERL_METRICS`` before the resumed trainer starts; a line cut short by
    the kill is left out). Returns METRICS' lines by step."""
    raw = out_dir / VERL_METRICS
    if not raw.exists():
        return {}
    steps = {int(record["step"]): record["data"] for record in _complete_lines(raw)}
    if resumed and not steps:  # a resumed run killed before its first step: the earlier lines stay
        return {}
    result = {}
    for name, keep in ((METRICS, lambda key: not is_clock_metric(key)), (TIMING, is_clock_metric)):
        path = out_dir / name
        earlier = {}
        if resumed and path.exists() and steps:
            earlier = {line["step"]: line for line in _complete_lines(path) if line["step"] < min(steps)}
        lines = {**earlier, **{step: {"step": step, **{key: data[key] for key in sorted(data) if keep(key)}}
                               for step, data in steps.items()}}
        partial = path.with_name(path.name + ".partial")  # replaced in one step: a kill leaves the old file or the new
        partial.write_text("".join(json.dumps(lines[step]) + "\n" for step in sorted(lines)))
        os.replace(partial, path)
        if name == METRICS:
            result = lines
    return result


def _complete_lines(path: Path) -> list[dict]:
    """The JSON objects of ``path``, one per line, without a line a kill cut short (verl's logger
    writes a line at a time; so did this module before it replaced its files in one step)."""
    lines = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            lines.append(record)
    return lines

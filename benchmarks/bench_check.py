"""What ``verl-rfpp check`` and ``doctor`` cost a user: wall and CPU time of fresh processes, as a
user runs them, beside ``python -c "import verl"`` measured in the same run (the ratio tells what
the machine's load does not). Asserts nothing about time.

    python benchmarks/bench_check.py              # 5 processes each
    python benchmarks/bench_check.py --runs 9
    python benchmarks/bench_check.py --tree ../other-checkout   # another checkout's verl_rfpp (before/after)

The cases: ``check OVERRIDES`` (the baseline's name alone: refused, with its Fix), ``check SCRIPT``
on three of verl's example scripts switched to our estimator (tests/tools/scripts/verl/), and
``doctor``, then what each of doctor's checks costs in CPU (importing verl, which loads the plugin;
the hook checks, which import every verl module a patch waits for; the CPU kernels). Each median is
printed with the load average before the run (``os.getloadavg``)."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "tools" / "scripts" / "verl"
NAME = "algorithm.adv_estimator=reinforce_plus_plus_baseline"
CLI = [sys.executable, "-m", "verl_rfpp.cli"]
CASES = {
    "check OVERRIDES": [*CLI, "check", NAME],
    "check SCRIPT grpo_trainer/run_deepseek7b_llm.sh": [*CLI, "check", str(EXAMPLES / "grpo_trainer" /
                                                                          "run_deepseek7b_llm.sh"), NAME],
    "check SCRIPT gpg_trainer/run_qwen2-7b_math.sh": [*CLI, "check", str(EXAMPLES / "gpg_trainer" /
                                                                        "run_qwen2-7b_math.sh"), NAME],
    "check SCRIPT gmpo_trainer/test_dapo_7b_math.sh": [*CLI, "check", str(EXAMPLES / "gmpo_trainer" /
                                                                         "test_dapo_7b_math.sh"), NAME],
    "doctor": [*CLI, "doctor"],
    "python -c 'import verl' (reference)": [sys.executable, "-c", "import verl"],
}

# doctor's checks one by one, in one fresh process: CPU seconds of each (``time.process_time``)
DOCTOR_PARTS = """
import time
start = time.process_time()
import verl
verl_done = time.process_time()
from verl_rfpp import plugin
plugin.hooks_status()
hooks_done = time.process_time()
from verl_rfpp.cli import doctor
doctor.cpu_kernels_checks()
print(verl_done - start, hooks_done - verl_done, time.process_time() - hooks_done)
"""


def timed(argv: list[str], env: dict, cwd: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds (user + system, of the child and its children) of one fresh process, and
    its exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per case (default 5)")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose verl_rfpp runs (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-check-") as scratch:
        path = os.pathsep.join(filter(None, [str(args.tree.resolve()), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "TMPDIR": scratch}
        print(f"verl_rfpp from {args.tree.resolve()}; load average before: {os.getloadavg()[0]:.2f} (1 min), "
              f"{os.cpu_count()} CPUs")
        tree = args.tree.resolve()  # also the cwd: ``python -m`` puts it first on sys.path
        timed(CASES["python -c 'import verl' (reference)"], env, tree)  # warm the file cache; not counted
        results = {name: [] for name in CASES}
        for _ in range(args.runs):  # interleaved: load changes hit every case alike
            for name, argv in CASES.items():
                results[name].append(timed(argv, env, tree))
        reference = statistics.median(cpu for _, cpu, _ in results["python -c 'import verl' (reference)"])
        print(f"{'case':<52} {'exit':>4} {'wall s':>7} {'CPU s':>7} {'CPU / import verl':>18}")
        for name, found in results.items():
            wall = statistics.median(w for w, _, _ in found)
            cpu = statistics.median(c for _, c, _ in found)
            codes = ",".join(sorted({str(code) for _, _, code in found}))
            print(f"{name:<52} {codes:>4} {wall:7.2f} {cpu:7.2f} {cpu / reference:18.2f}")
        parts = [subprocess.run([sys.executable, "-c", DOCTOR_PARTS], env=env, cwd=tree, capture_output=True,
                                text=True, timeout=600).stdout.split()[-3:] for _ in range(args.runs)]
        for index, label in enumerate(("import verl (loads the plugin)", "hook checks (verl's patched modules)",
                                       "CPU kernels (numba)")):
            print(f"doctor's {label:<45} CPU {statistics.median(float(p[index]) for p in parts):6.2f} s")
        print(f"load average after: {os.getloadavg()[0]:.2f} (1 min); medians of {args.runs} fresh processes each")


if __name__ == "__main__":
    main()

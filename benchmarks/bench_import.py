"""What the plugin adds to ``import verl``: fresh processes with and without it, side by side.

The ``verl.plugins`` entry point makes every process that imports verl import ``verl_rfpp.plugin``.
This script starts ``python -c "import verl"`` in fresh processes, alternating the plugin on
(``VERL_USE_EXTERNAL_PLUGINS=auto``) and off (``none``) so that load on the machine hits both
alike, and prints the median wall time and CPU time (user + system, of the child: less sensitive
to other load on the machine) of each and the differences. Asserts nothing about time.

    python benchmarks/bench_import.py            # 9 processes each
    python benchmarks/bench_import.py --runs 21
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

# What verl does for the plugin, timed inside one process that imported verl without it: the
# entry-point discovery and ``ep.load()`` (less noisy than the difference of two process times).
IN_PROCESS = """
import time, verl
from importlib.metadata import entry_points
start = time.perf_counter()
for ep in entry_points(group="verl.plugins"):
    ep.load()
print(time.perf_counter() - start)
"""
CODE = "import verl, sys; sys.exit(0 if ('verl_rfpp.plugin' in sys.modules) == {expected} else 3)"


def import_time(policy: str) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh ``import verl`` with ``VERL_USE_EXTERNAL_PLUGINS=policy``."""
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": policy}
    code = CODE.format(expected=policy != "none")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def plugin_load_time() -> float:
    """Seconds verl spends discovering and importing the plugin, measured inside the process."""
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
    result = subprocess.run([sys.executable, "-c", IN_PROCESS], env=env, check=True, timeout=600,
                            capture_output=True, text=True)
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh processes per setting (default 9)")
    args = parser.parse_args()
    import_time("none")  # warm the file cache once; not counted
    times: dict[str, list[tuple[float, float]]] = {"auto": [], "none": []}
    loads = []
    for _ in range(args.runs):
        for policy in times:
            times[policy].append(import_time(policy))
        loads.append(plugin_load_time())
    medians = {policy: [statistics.median(run[i] for run in runs) * 1000 for i in (0, 1)]
               for policy, runs in times.items()}
    print(f"python -c 'import verl', median of {args.runs} fresh processes each ({os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f})")
    print(f"{'':57s}{'wall ms':>9s}{'CPU ms':>9s}")
    for policy, label in (("auto", "with verl_rfpp.plugin (VERL_USE_EXTERNAL_PLUGINS=auto)"),
                          ("none", "without it            (VERL_USE_EXTERNAL_PLUGINS=none)")):
        print(f"  {label}: {medians[policy][0]:8.0f} {medians[policy][1]:8.0f}")
    print(f"  added by the plugin:                                    "
          f"{medians['auto'][0] - medians['none'][0]:8.0f} {medians['auto'][1] - medians['none'][1]:8.0f}")
    print(f"  in-process: entry-point discovery + import of the plugin: {statistics.median(loads) * 1000:6.0f} ms wall")


if __name__ == "__main__":
    main()

"""What the plugin adds to ``import verl``: fresh processes with and without it, side by side.

The ``verl.plugins`` entry point makes every process that imports verl import ``verl_rfpp.plugin``.
This script starts ``python -c "import verl"`` in fresh processes, alternating the plugin on
(``VERL_USE_EXTERNAL_PLUGINS=auto``) and off (``none``) so that load on the machine hits both
alike, and prints the median wall time of each and the difference. Asserts nothing about time.

    python benchmarks/bench_import.py            # 9 processes each
    python benchmarks/bench_import.py --runs 21
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CODE = "import verl, sys; sys.exit(0 if ('verl_rfpp.plugin' in sys.modules) == {expected} else 3)"


def import_time(policy: str) -> float:
    """Wall seconds of one fresh ``import verl`` with ``VERL_USE_EXTERNAL_PLUGINS=policy``."""
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": policy}
    code = CODE.format(expected=policy != "none")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=600)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh processes per setting (default 9)")
    args = parser.parse_args()
    import_time("none")  # warm the file cache once; not counted
    times: dict[str, list[float]] = {"auto": [], "none": []}
    for _ in range(args.runs):
        for policy in times:
            times[policy].append(import_time(policy))
    with_plugin = statistics.median(times["auto"])
    without = statistics.median(times["none"])
    print(f"python -c 'import verl', median of {args.runs} fresh processes each ({os.cpu_count()} cores)")
    print(f"  with verl_rfpp.plugin (VERL_USE_EXTERNAL_PLUGINS=auto): {with_plugin * 1000:8.0f} ms")
    print(f"  without it            (VERL_USE_EXTERNAL_PLUGINS=none): {without * 1000:8.0f} ms")
    print(f"  added by the plugin:                                     {(with_plugin - without) * 1000:8.0f} ms")


if __name__ == "__main__":
    main()

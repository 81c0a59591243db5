"""A driver on a Ray cluster (``python tests/worker_check_driver.py ADDRESS``): one actor per alive
node that imports verl as verl's workers do, then the plugin's worker check over them; prints one
JSON line: ``{"ok": true, "reports": [...]}`` or ``{"ok": false, "error": "..."}``."""

from __future__ import annotations

import json
import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import verl  # noqa: F401  (loads the plugin in this driver, as in verl's TaskRunner)
from verl_rfpp.plugin import workers


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self) -> None:
        import verl  # noqa: F401  (loads the plugin where the node's environment allows it)

    def ready(self) -> bool:
        return True


def main(address: str) -> None:
    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    nodes = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeID"])
    actors = [(f"WorkerDict_{i}:0", Worker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote()) for i, n in enumerate(nodes)]
    ray.get([actor.ready.remote() for _, actor in actors], timeout=300)
    try:
        print(json.dumps({"ok": True, "reports": workers.check_workers(actors)}))
    except workers.WorkerPluginError as error:
        print(json.dumps({"ok": False, "error": str(error)}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])

"""A driver on a Ray cluster (``python tests/worker_check_driver.py ADDRESS [--job-env]``; with
``--job-env`` it joins with the runtime_env ``main_ppo`` would pass for our recipe): one actor per alive
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


def _job_runtime_env() -> dict:
    """The job environment ``main_ppo`` gives ``ray.init`` for our recipe (verl's own function,
    through the plugin's hook)."""
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    from verl_rfpp import validation
    from verl_rfpp.plugin.compose import compose_verl_config

    return get_ppo_ray_runtime_env(compose_verl_config(list(validation.RECIPES[validation.BASELINE])))


def main(address: str, job_env: bool = False) -> None:
    runtime_env = _job_runtime_env() if job_env else None
    ray.init(address=address, log_to_driver=False, logging_level="ERROR", runtime_env=runtime_env)
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
    main(sys.argv[1], job_env="--job-env" in sys.argv[2:])

"""A driver on a Ray cluster (``python tests/support/worker_check_driver.py ADDRESS [--job-env]
[--trainer=ESTIMATOR]``; with ``--job-env`` it joins with the runtime_env ``main_ppo`` would pass for
our recipe): one actor per alive node that imports verl as verl's workers do, then the plugin's
worker check over them; prints one JSON line: ``{"ok": true, "reports": [...]}`` or
``{"ok": false, "error": "..."}``. With ``--trainer`` the check is not called directly: verl's own v1
``PPOTrainer.init`` runs (as patched) for a trainer of that estimator whose set-up step puts these
actors in its actor worker group."""

from __future__ import annotations

import json
import sys

import ray
import verl  # noqa: F401  (loads the plugin in this driver, as in verl's TaskRunner)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from verl_rfpp import catalog
from verl_rfpp.adapter import workers


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self) -> None:
        import verl  # noqa: F401, F811  (in the actor's process: loads the plugin where the node's environment allows it)

    def ready(self) -> bool:
        return True


def _job_runtime_env() -> dict:
    """The job environment ``main_ppo`` gives ``ray.init`` for our recipe (verl's own function,
    through the plugin's hook)."""
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    from verl_rfpp.adapter.compose import compose_verl_config

    return get_ppo_ray_runtime_env(compose_verl_config(list(catalog.REINFORCE_PLUS_PLUS_BASELINE.recipe)))


class _Group:
    """What the worker check reads of a trainer's ``RayWorkerGroup``."""

    def __init__(self, actors: list) -> None:
        self.worker_names = [name for name, _ in actors]
        self.workers = [actor for _, actor in actors]


def _init_trainer(estimator: str, actors: list) -> None:
    """verl's v1 ``PPOTrainer.init`` for a config of ``estimator``, its set-up giving ``actors``."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from verl_rfpp.adapter.compose import compose_verl_config

    class Trainer(PPOTrainer):
        def _setup(self) -> None:
            self.actor_rollout_wg = _Group(actors)

        def on_init_end(self) -> None:
            pass

        def on_sample_end(self, *args, **kwargs) -> None:
            pass

        def on_step_end(self, *args, **kwargs) -> None:
            pass

    trainer = Trainer.__new__(Trainer)
    trainer.config = compose_verl_config([f"algorithm.adv_estimator={estimator}"])
    trainer.init()


def main(address: str, job_env: bool = False, trainer: str = "") -> None:
    runtime_env = _job_runtime_env() if job_env else None
    ray.init(address=address, log_to_driver=False, logging_level="ERROR", runtime_env=runtime_env)
    nodes = sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeID"])
    actors = [(f"WorkerDict_{i}:0", Worker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote()) for i, n in enumerate(nodes)]
    ray.get([actor.ready.remote() for _, actor in actors], timeout=300)
    try:
        if trainer:
            _init_trainer(trainer, actors)
            print(json.dumps({"ok": True, "reports": []}))
        else:
            print(json.dumps({"ok": True, "reports": workers.check_workers(actors)}))
    except workers.WorkerPluginError as error:
        print(json.dumps({"ok": False, "error": str(error)}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    options = sys.argv[2:]
    main(sys.argv[1], job_env="--job-env" in options,
         trainer=next((option.split("=", 1)[1] for option in options if option.startswith("--trainer=")), ""))

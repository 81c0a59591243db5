"""verl's worker groups: before the first rollout, the driver asks every training worker whether
it runs this plugin, and which version (docs/contract.md section 8.4).

The estimators run in the driver, which has the plugin; a worker process on a node where
verl-rfpp is missing, excluded (``VERL_USE_EXTERNAL_PLUGINS``) or of another version surfaces only
when verl looks up the ``rfpp`` policy loss at the first update (a ``KeyError`` after the first
rollout), or never, training with other code. So right after the trainer has created and
initialised its workers (legacy ``RayPPOTrainer.init_workers``, v1 ``PPOTrainer.init``; both
before any rollout), each worker actor runs a probe (``__ray_call__``) that imports nothing of
ours, so it answers where verl-rfpp is absent; any worker that differs stops the run with one
``WorkerPluginError`` naming its node, the worker and the fix.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional

from verl_rfpp import validation
from verl_rfpp.adapter.patching import Internal, marked
from verl_rfpp.adapter.state import logger
from verl_rfpp.errors import RfppError

LEGACY_TRAINER = "verl.trainer.ppo.ray_trainer"  # RayPPOTrainer.init_workers
V1_TRAINER = "verl.trainer.ppo.v1.trainer_base"  # PPOTrainer.init
WORKER_GROUP = "verl.single_controller.ray.base"
# What ``worker_actors`` reads of a trainer's worker groups (both trainers' groups are RayWorkerGroups).
GROUP_INTERNALS = (Internal(WORKER_GROUP, "RayWorkerGroup.workers", kind=property),
                   Internal(WORKER_GROUP, "RayWorkerGroup.worker_names", kind=property))
LEGACY_INTERNALS = (Internal(LEGACY_TRAINER, "RayPPOTrainer.init_workers", ("self",)), *GROUP_INTERNALS)
V1_INTERNALS = (Internal(V1_TRAINER, "PPOTrainer.init", ("self",)), *GROUP_INTERNALS)
WORKER_GROUPS = ("actor_rollout_wg", "ref_policy_wg", "critic_wg")
PROBE_TIMEOUT_S = 120
TRACE_ENV = "VERL_RFPP_TRACE"

# Built from source so cloudpickle sends it by value: its module is not importable in the worker.
_PROBE_SOURCE = '''
def probe(actor=None):
    import os, sys
    plugin = sys.modules.get("verl_rfpp.plugin")
    version = getattr(sys.modules.get("verl_rfpp"), "__version__", None)
    if version is None:
        try:
            from importlib import metadata
            version = metadata.version("verl-rfpp")
        except Exception:
            version = None
    node_id = node_ip = None
    try:
        import ray
        if ray.is_initialized():  # in a Ray worker; elsewhere the runtime context would start Ray
            node_id = ray.get_runtime_context().get_node_id()
            node_ip = ray.util.get_node_ip_address()
    except Exception:
        pass
    rank = world = backend = None
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank, world, backend = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
    except Exception:
        pass
    return {"pid": os.getpid(), "node_id": node_id, "node_ip": node_ip, "plugin_loaded": plugin is not None,
            "version": version, "plugins_env": os.environ.get("VERL_USE_EXTERNAL_PLUGINS"),
            "rank": rank, "world_size": world, "backend": backend}
'''


class WorkerPluginError(RfppError):
    """A worker process of the run does not run this plugin, or runs another version of it."""


def probe_function():
    """The probe a worker runs: ``probe(actor) -> dict`` (pid, Ray node, plugin loaded, version,
    ``VERL_USE_EXTERNAL_PLUGINS``, torch.distributed rank / world size / backend)."""
    namespace = {"__name__": "verl_rfpp_worker_probe"}
    exec(compile(_PROBE_SOURCE, "<verl-rfpp worker probe>", "exec"), namespace)
    return namespace["probe"]


def problem_of(report: dict, expected_version: str) -> Optional[str]:
    """Why the worker that sent ``report`` differs from the driver, with the fix (None: it does not)."""
    if not report["plugin_loaded"]:
        setting = report.get("plugins_env")
        if setting is not None and setting.strip().lower() != "auto":
            return (f"`import verl` did not load verl-rfpp there: VERL_USE_EXTERNAL_PLUGINS={setting} in that "
                    "node's environment excludes it. Fix: unset it (or list verl_rfpp in it) where that node's "
                    "`ray start` runs, and restart the node")
        if report.get("version") is None:
            return (f"verl-rfpp is not installed for that node's Python. Fix: pip install "
                    f"'verl-rfpp=={expected_version}' on that node and restart its `ray start`")
        return (f"verl-rfpp {report['version']} is installed but `import verl` did not load it. Fix: run "
                "`verl-rfpp doctor` on that node")
    if report.get("version") != expected_version:
        return (f"it runs verl-rfpp {report.get('version')}, the driver {expected_version}. Fix: pip install "
                f"'verl-rfpp=={expected_version}' on that node (one version on every node) and restart its "
                "`ray start`")
    return None


def describe_worker(name: str, report: dict) -> str:
    return (f"worker {name} (pid {report['pid']}) on Ray node {str(report.get('node_id'))[:12]} "
            f"({report.get('node_ip')})")


def worker_actors(trainer: Any) -> list[tuple[str, Any]]:
    """``(name, actor handle)`` of every worker of the trainer's worker groups, once each."""
    found, seen = [], set()
    for attribute in WORKER_GROUPS:
        group = getattr(trainer, attribute, None)
        if group is None:
            continue
        names = list(getattr(group, "worker_names", []) or [])
        for index, actor in enumerate(group.workers):
            key = actor._actor_id.hex()
            if key not in seen:
                seen.add(key)
                found.append((names[index] if index < len(names) else f"{attribute}[{index}]", actor))
    return found


def check_workers(actors: list[tuple[str, Any]], expected_version: Optional[str] = None) -> list[dict]:
    """Probe every actor; raise ``WorkerPluginError`` naming each one that differs. Returns the
    reports (each with its ``name``), also written to the run trace as ``worker`` lines."""
    import ray

    if expected_version is None:
        import verl_rfpp

        expected_version = verl_rfpp.__version__
    probe = probe_function()
    reports = ray.get([actor.__ray_call__.remote(probe) for _, actor in actors], timeout=PROBE_TIMEOUT_S)
    for (name, _), report in zip(actors, reports, strict=True):
        report["name"] = name
        _trace(report)
    bad = [(name, report, problem) for (name, _), report in zip(actors, reports, strict=True)
           for problem in [problem_of(report, expected_version)] if problem]
    if bad:
        lines = [f"- {describe_worker(name, report)}: {problem}" for name, report, problem in bad]
        raise WorkerPluginError(
            f"verl-rfpp {expected_version} runs in verl's driver, but {len(bad)} of {len(reports)} worker "
            "processes would train with other code; stopped before the first rollout:\n" + "\n".join(lines)
            + "\nCheck every node with `verl-rfpp doctor --ray auto`.")
    logger.info("verl_rfpp: all %d worker processes run verl-rfpp %s", len(reports), expected_version)
    return reports


def _trace(report: dict) -> None:
    path = os.environ.get(TRACE_ENV)
    if path:
        fields = " ".join(f"{key}={report[key]}" for key in ("name", "pid", "node_id", "node_ip", "plugin_loaded",
                                                              "version", "rank", "world_size", "backend"))
        with open(path, "a") as handle:
            handle.write(f"worker driver_pid={os.getpid()} {fields}\n")


def _checking_workers(original: Callable[..., Any]) -> Callable[..., Any]:
    """A trainer's worker set-up (legacy ``init_workers``, v1 ``init``) followed, for a run whose
    estimator is ours, by ``check_workers`` over its worker groups. Any other run is verl's set-up
    alone (docs/contract.md section 6.3): its workers are never asked anything."""

    @functools.wraps(original)
    def then_check_workers(self: Any, *args: Any, **kwargs: Any) -> Any:
        if validation.estimator_of(getattr(self, "config", None)) is None:
            return original(self, *args, **kwargs)
        result = original(self, *args, **kwargs)
        check_workers(worker_actors(self))
        return result

    return marked(then_check_workers)

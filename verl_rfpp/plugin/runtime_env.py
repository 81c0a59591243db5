"""verl's Ray job environment: every process of a run that selects our estimator loads this
plugin, at the driver's version (docs/contract.md section 8.6).

``main_ppo`` builds the job's ``runtime_env`` with ``constants_ppo.get_ppo_ray_runtime_env(config)``
in the Hydra process (which validated the config, so it has the plugin) and passes it to
``ray.init``; Ray hands its ``env_vars`` to every actor of the job on every node, the TaskRunner
that computes the advantages included, wherever Ray places it. For a run whose estimator is ours
the plugin adds ``VERL_USE_EXTERNAL_MODULES=verl_rfpp.plugin`` (verl imports the listed modules in
``import verl`` and lets their errors propagate) and ``VERL_RFPP_DRIVER_VERSION``. So a node where
verl-rfpp is excluded by ``VERL_USE_EXTERNAL_PLUGINS`` loads it anyway, a node without it fails
``import verl`` with ``No module named 'verl_rfpp'``, and a node with another version refuses to
activate (``check_driver_version``): nowhere does verl's own estimator run in its place.
"""

from __future__ import annotations

import functools
import os
import socket
from typing import Any, Callable

from verl_rfpp import validation
from verl_rfpp.patching import Internal, marked
from verl_rfpp.plugin.registries import ActivationError
from verl_rfpp.plugin.state import PUBLIC_MODULE

CONSTANTS = "verl.trainer.constants_ppo"
MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
DRIVER_VERSION_ENV = "VERL_RFPP_DRIVER_VERSION"
MAIN_PPO_IMPORTERS = ("verl.trainer.main_ppo",)  # binds the name at import

INTERNALS = (Internal(CONSTANTS, "get_ppo_ray_runtime_env", ("config",)),)


def _version() -> str:
    from verl_rfpp import __version__

    return __version__


def check_driver_version() -> None:
    """Refuse to activate in a Ray worker whose verl-rfpp differs from the driver's."""
    expected = os.environ.get(DRIVER_VERSION_ENV)
    if expected and expected != _version():
        host = socket.gethostname()
        raise ActivationError(
            f"verl_rfpp: this process (host {host}, pid {os.getpid()}) has verl-rfpp {_version()} but "
            f"the run's driver has {expected}: this worker would train with other code. Fix: install "
            f"verl-rfpp {expected} on host {host} (pip install verl-rfpp=={expected} or the driver's "
            "checkout), then check with: verl-rfpp doctor --ray auto"
        )


def job_env_vars(config: Any) -> dict[str, str]:
    """What a run of ``config`` adds to the job's ``env_vars``; nothing for other estimators."""
    if validation.estimator_of(config) is None:
        return {}
    modules = [name.strip() for name in os.environ.get(MODULES_ENV, "").split(",") if name.strip()]
    if PUBLIC_MODULE not in modules:
        modules.append(PUBLIC_MODULE)
    return {MODULES_ENV: ",".join(modules), DRIVER_VERSION_ENV: _version()}


def _requiring_plugin(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_ppo_ray_runtime_env(config: Any = None, *args: Any, **kwargs: Any) -> Any:
        runtime_env = original(config, *args, **kwargs)
        added = job_env_vars(config) if config is not None else {}
        if added:
            runtime_env.setdefault("env_vars", {}).update(added)
        return runtime_env

    return marked(get_ppo_ray_runtime_env)

"""verl's Ray job environment: every process of a run that selects our estimator loads this
plugin, at the driver's version (docs/contract.md section 8.6).

``main_ppo`` builds the job's ``runtime_env`` with ``constants_ppo.get_ppo_ray_runtime_env(config)``
in the Hydra process (which validated the config, so it has the plugin) and passes it to
``ray.init``; Ray hands its ``env_vars`` to every actor of the job on every node, the TaskRunner
that computes the advantages included, wherever Ray places it. For a run whose estimator is ours
the plugin adds ``VERL_USE_EXTERNAL_MODULES=verl_rfpp.plugin`` (verl imports the listed modules in
``import verl`` and lets their errors propagate) and ``VERL_RFPP_DRIVER_VERSION``; where the user's
``ray_kwargs.ray_init.runtime_env.env_vars`` sets either (``main_ppo`` merges it over this function's
result, the user's values winning), that value is merged first: the user's modules are kept and the
plugin appended, the version is always the driver's. So a node where
verl-rfpp is excluded by ``VERL_USE_EXTERNAL_PLUGINS`` loads it anyway, a node without it fails
``import verl`` with ``No module named 'verl_rfpp'``, and a node with another version refuses to
activate (``check_driver_version``): nowhere does verl's own estimator run in its place.
"""

from __future__ import annotations

import functools
import os
import socket
from typing import Any, Callable

from omegaconf import OmegaConf, open_dict, read_write

from verl_rfpp import validation
from verl_rfpp.adapter.patching import Internal, marked
from verl_rfpp.adapter.state import PUBLIC_MODULE, logger
from verl_rfpp.errors import ActivationError

CONSTANTS = "verl.trainer.constants_ppo"
MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
DRIVER_VERSION_ENV = "VERL_RFPP_DRIVER_VERSION"
PLUGINS_ENV = "VERL_USE_EXTERNAL_PLUGINS"
MAIN_PPO_IMPORTERS = ("verl.trainer.main_ppo",)  # binds the name at import
# main_ppo merges the user's ``ray_kwargs.ray_init.runtime_env`` over verl's (the user's values win)
USER_RUNTIME_ENV = "ray_kwargs.ray_init.runtime_env"
# runtime_env fields that give the job's workers another Python environment than the driver's
OTHER_PYTHON = ("conda", "pip", "uv", "container", "image_uri", "py_executable")

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


def _user_runtime_env(config: Any) -> dict[str, Any]:
    """The user's ``ray_kwargs.ray_init.runtime_env`` of ``config`` (empty when not set)."""
    node = OmegaConf.select(config, USER_RUNTIME_ENV, default=None)
    return OmegaConf.to_container(node, resolve=True) if node is not None else {}


def job_env_vars(config: Any) -> dict[str, str]:
    """What a run of ``config`` needs in the job's ``env_vars``; nothing for other estimators. The
    modules are the ones the job would list without the plugin (the user's runtime_env value, else
    the driver's environment), then ``verl_rfpp.plugin``; the driver version is always ours."""
    if validation.estimator_of(config) is None:
        return {}
    user = _user_runtime_env(config).get("env_vars") or {}
    listed = user[MODULES_ENV] if user.get(MODULES_ENV) is not None else os.environ.get(MODULES_ENV, "")
    modules = [name.strip() for name in str(listed).split(",") if name.strip()]
    if PUBLIC_MODULE not in modules:
        modules.append(PUBLIC_MODULE)
    return {MODULES_ENV: ",".join(modules), DRIVER_VERSION_ENV: _version()}


def config_notes(config: Any) -> list[str]:
    """What ``verl-rfpp check`` warns about a run of ours whose ``ray_kwargs.ray_init.runtime_env``
    touches what the plugin needs in the job (docs/contract.md section 8.6); ``[]`` for other runs."""
    if validation.estimator_of(config) is None:
        return []
    user = _user_runtime_env(config)
    env_vars, needed, notes = user.get("env_vars") or {}, job_env_vars(config), []
    if env_vars.get(MODULES_ENV) is not None and env_vars[MODULES_ENV] != needed[MODULES_ENV]:
        notes.append(f"{USER_RUNTIME_ENV}.env_vars.{MODULES_ENV}={env_vars[MODULES_ENV]}: the job gets "
                     f"{needed[MODULES_ENV]} (verl-rfpp keeps your modules and adds itself)")
    if env_vars.get(DRIVER_VERSION_ENV) is not None and str(env_vars[DRIVER_VERSION_ENV]) != _version():
        notes.append(f"{USER_RUNTIME_ENV}.env_vars.{DRIVER_VERSION_ENV}={env_vars[DRIVER_VERSION_ENV]} is "
                     f"verl-rfpp's own variable: the job gets the driver's version {_version()} instead. "
                     "Fix: remove that override")
    if env_vars.get(PLUGINS_ENV) is not None:
        notes.append(f"{USER_RUNTIME_ENV}.env_vars.{PLUGINS_ENV}={env_vars[PLUGINS_ENV]}: verl-rfpp is loaded "
                     f"in every process of the job anyway, through {MODULES_ENV}")
    for key in OTHER_PYTHON:
        if user.get(key):
            notes.append(f"{USER_RUNTIME_ENV}.{key} gives the job's workers another Python environment: "
                         f"verl-rfpp {_version()} must be installed there, or their `import verl` fails "
                         "(check with: verl-rfpp doctor --ray auto)")
    return notes


def _merge_into_user_runtime_env(config: Any, needed: dict[str, str]) -> None:
    """``main_ppo`` lets the user's runtime_env values win over the function's result: where the
    user set one of ``needed``, that value becomes the merged one (modules) or ours (version)."""
    node = OmegaConf.select(config, f"{USER_RUNTIME_ENV}.env_vars", default=None)
    if node is None:
        return
    for key, value in needed.items():
        if key in node and node[key] != value:
            if key == DRIVER_VERSION_ENV:
                logger.warning("verl_rfpp: %s.env_vars.%s=%s is verl-rfpp's own variable; the job gets the "
                               "driver's version %s instead", USER_RUNTIME_ENV, key, node[key], value)
            with read_write(node), open_dict(node):
                node[key] = value


def _requiring_plugin(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_ppo_ray_runtime_env(config: Any = None, *args: Any, **kwargs: Any) -> Any:
        runtime_env = original(config, *args, **kwargs)
        added = job_env_vars(config) if config is not None else {}
        if added:
            runtime_env.setdefault("env_vars", {}).update(added)
            _merge_into_user_runtime_env(config, added)
        return runtime_env

    return marked(get_ppo_ray_runtime_env)

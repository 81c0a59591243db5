"""A run of our estimator asks Ray to load the plugin in every process of the job, at the
driver's version (docs/contract.md section 8.6): verl's own ``get_ppo_ray_runtime_env``, which
``main_ppo`` passes to ``ray.init``, carries ``VERL_USE_EXTERNAL_MODULES=verl_rfpp.plugin`` and
``VERL_RFPP_DRIVER_VERSION``; other estimators' runs get verl's environment unchanged."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import verl_rfpp
from verl_rfpp import validation
from verl_rfpp.cli import compose_verl_config
from verl_rfpp.plugin import runtime_env


def _job_env(overrides):
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    return get_ppo_ray_runtime_env(compose_verl_config(overrides))


@pytest.mark.parametrize("estimator", validation.ESTIMATOR_NAMES)
def test_our_runs_ask_every_ray_process_for_the_plugin_at_the_drivers_version(estimator, monkeypatch):
    monkeypatch.setenv(runtime_env.MODULES_ENV, "someone.elses_module")
    env_vars = _job_env(list(validation.RECIPES[estimator]))["env_vars"]
    assert env_vars[runtime_env.MODULES_ENV] == "someone.elses_module,verl_rfpp.plugin"
    assert env_vars[runtime_env.DRIVER_VERSION_ENV] == verl_rfpp.__version__


def test_other_estimators_get_verls_runtime_env_unchanged():
    from verl.trainer import constants_ppo

    from verl_rfpp.plugin.table import RUNTIME_ENV

    config = compose_verl_config(["algorithm.adv_estimator=grpo"])
    assert constants_ppo.get_ppo_ray_runtime_env(config) == RUNTIME_ENV.original()(config)


def test_main_ppo_binds_the_hooked_function():
    import verl.trainer.main_ppo as main_ppo

    from verl_rfpp import plugin

    assert getattr(main_ppo.get_ppo_ray_runtime_env, plugin.MARKER, False)
    assert plugin.hooks_status()["Ray job loads the driver's plugin everywhere (runtime_env)"]


def _import_verl(**env):
    code = ("import verl; from verl.trainer.ppo import core_algos as c; "
            "print(c.get_adv_estimator_fn('reinforce_plus_plus_baseline').__module__)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=os.path.dirname(__file__))


def test_a_process_that_excludes_the_plugin_loads_it_through_the_job_environment():
    result = _import_verl(VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="verl_rfpp.plugin",
                          VERL_RFPP_DRIVER_VERSION=verl_rfpp.__version__)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "verl_rfpp.plugin"


def test_a_process_with_another_version_than_the_driver_fails_import_verl_naming_both():
    result = _import_verl(VERL_USE_EXTERNAL_MODULES="verl_rfpp.plugin", VERL_RFPP_DRIVER_VERSION="9.9.9")
    assert result.returncode != 0
    assert (f"has verl-rfpp {verl_rfpp.__version__} but the run's driver has 9.9.9" in result.stderr
            and "Fix: install verl-rfpp 9.9.9 on host" in result.stderr), result.stderr[-2000:]

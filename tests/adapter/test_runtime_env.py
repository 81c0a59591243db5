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
from verl_rfpp import catalog, validation
from verl_rfpp.adapter import runtime_env
from verl_rfpp.adapter.compose import compose_verl_config

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition


def _job_env(overrides):
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    return get_ppo_ray_runtime_env(compose_verl_config(overrides))


@pytest.mark.parametrize("estimator", catalog.names())
def test_our_runs_ask_every_ray_process_for_the_plugin_at_the_drivers_version(estimator, monkeypatch):
    import verl  # noqa: F401  (imported first: importing verl imports what the variable names, which is no module)

    monkeypatch.setenv(runtime_env.MODULES_ENV, "someone.elses_module")
    env_vars = _job_env(list(validation.RECIPES[estimator]))["env_vars"]
    assert env_vars[runtime_env.MODULES_ENV] == "someone.elses_module,verl_rfpp.plugin"
    assert env_vars[runtime_env.DRIVER_VERSION_ENV] == verl_rfpp.__version__


def test_other_estimators_get_verls_runtime_env_unchanged():
    from verl.trainer import constants_ppo

    from verl_rfpp.adapter.table import RUNTIME_ENV

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


@pytest.mark.slow
def test_a_process_that_excludes_the_plugin_loads_it_through_the_job_environment():
    result = _import_verl(VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="verl_rfpp.plugin",
                          VERL_RFPP_DRIVER_VERSION=verl_rfpp.__version__)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "verl_rfpp.adapter.registries"  # our GuardedEstimator


@pytest.mark.slow
def test_a_process_with_another_version_than_the_driver_fails_import_verl_naming_both():
    result = _import_verl(VERL_USE_EXTERNAL_MODULES="verl_rfpp.plugin", VERL_RFPP_DRIVER_VERSION="9.9.9")
    assert result.returncode != 0
    assert (f"has verl-rfpp {verl_rfpp.__version__} but the run's driver has 9.9.9" in result.stderr
            and "Fix: install verl-rfpp 9.9.9 on host" in result.stderr), result.stderr[-2000:]


USER_ENV = "+ray_kwargs.ray_init.runtime_env.env_vars"
# verl's real main_ppo.run_ppo: it builds the job's runtime_env (get_ppo_ray_runtime_env merged
# with the user's ray_kwargs.ray_init.runtime_env) and starts Ray with it; the TaskRunner given to
# it reports what its Ray process of the job sees. Ray stays on 127.0.0.1.
RUN_PPO = r'''
import json, os, sys
import verl
from verl.trainer import main_ppo
from verl_rfpp.adapter.compose import compose_verl_config

out, overrides = sys.argv[1], json.loads(sys.argv[2])
namespace = {}
exec(compile("""
import json, os
class EnvProbe:
    def run(self, config):
        keys = ("VERL_USE_EXTERNAL_MODULES", "VERL_RFPP_DRIVER_VERSION", "MY_ORG_SETTING")
        with open(%r, "w") as handle:
            json.dump({key: os.environ.get(key) for key in keys}, handle)
""" % out, "<probe>", "exec"), namespace)
import ray
config = compose_verl_config(overrides + ["+ray_kwargs.ray_init._node_ip_address=127.0.0.1",
                                          "+ray_kwargs.ray_init.include_dashboard=false",
                                          "ray_kwargs.ray_init.num_cpus=1"])
try:
    main_ppo.run_ppo(config, task_runner_class=ray.remote(num_cpus=0)(namespace["EnvProbe"]))
finally:
    ray.shutdown()
'''


def _job_sees(tmp_path, overrides):
    import json
    import shutil
    import tempfile

    from verl_rfpp.cpu import cluster

    script, out = tmp_path / "run_ppo.py", tmp_path / "job_env.json"
    script.write_text(RUN_PPO)
    # Ray's session files in a short folder of their own under /tmp (a socket path has at most 107 bytes;
    # cpu/cluster.py's LocalCluster does the same), removed after, and a token of its own: nothing left
    # in TMPDIR or ~/.ray (Ray keeps a session's folder)
    ray_folder = tempfile.mkdtemp(prefix="rfpp-ray-", dir="/tmp")
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ADDRESS": "", "RAY_TMPDIR": ray_folder}
    for name in cluster.AUTH_VARIABLES:
        env.pop(name, None)
    cluster.private_auth_token(ray_folder, env)
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    try:
        run = subprocess.run([sys.executable, str(script), str(out), json.dumps(overrides)], capture_output=True,
                             text=True, timeout=600, env=env, cwd=tmp_path)
    finally:
        shutil.rmtree(ray_folder, ignore_errors=True)
    assert run.returncode == 0 and out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text()), run


@pytest.mark.slow
def test_a_users_runtime_env_is_merged_with_the_plugins_in_main_ppos_real_job(tmp_path):
    """The user's modules stay and ``verl_rfpp.plugin`` joins them; the user's other variables
    stay; a user-set driver version is replaced by the driver's real one, with a WARNING."""
    overrides = list(catalog.REINFORCE_PLUS_PLUS_BASELINE.recipe) + [
        f"{USER_ENV}.{runtime_env.MODULES_ENV}=my_org.verl_plugin", f"{USER_ENV}.MY_ORG_SETTING=kept",
        f"{USER_ENV}.{runtime_env.DRIVER_VERSION_ENV}=0.0.1"]
    seen, run = _job_sees(tmp_path, overrides)
    assert seen == {runtime_env.MODULES_ENV: "my_org.verl_plugin,verl_rfpp.plugin",
                    runtime_env.DRIVER_VERSION_ENV: verl_rfpp.__version__, "MY_ORG_SETTING": "kept"}
    assert "VERL_RFPP_DRIVER_VERSION=0.0.1 is verl-rfpp's own variable" in run.stderr


def test_config_notes_name_what_a_users_runtime_env_changes():
    config = compose_verl_config(list(catalog.REINFORCE_PLUS_PLUS_BASELINE.recipe) + [
        f"{USER_ENV}.{runtime_env.MODULES_ENV}=my_org.verl_plugin",
        f"{USER_ENV}.{runtime_env.DRIVER_VERSION_ENV}=0.0.1", f"{USER_ENV}.{runtime_env.PLUGINS_ENV}=none",
        "+ray_kwargs.ray_init.runtime_env.conda=my_env"])
    notes = runtime_env.config_notes(config)
    assert len(notes) == 4, notes
    assert "the job gets my_org.verl_plugin,verl_rfpp.plugin" in notes[0]
    assert "VERL_RFPP_DRIVER_VERSION=0.0.1 is verl-rfpp's own variable" in notes[1] and "Fix: remove" in notes[1]
    assert "loaded in every process of the job anyway" in notes[2]
    assert "runtime_env.conda gives the job's workers another Python environment" in notes[3]
    assert runtime_env.config_notes(compose_verl_config(list(catalog.REINFORCE_PLUS_PLUS_BASELINE.recipe))) == []


def test_a_grpo_run_keeps_its_runtime_env_and_config_untouched():
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    config = compose_verl_config(["algorithm.adv_estimator=grpo", f"{USER_ENV}.{runtime_env.MODULES_ENV}=my_org.x",
                                  f"{USER_ENV}.{runtime_env.DRIVER_VERSION_ENV}=0.0.1"])
    before = repr(config)
    assert runtime_env.DRIVER_VERSION_ENV not in get_ppo_ray_runtime_env(config)["env_vars"]
    assert repr(config) == before and runtime_env.config_notes(config) == []

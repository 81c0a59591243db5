"""A real Ray cluster of several nodes on this machine (``verl_rfpp.cluster.LocalCluster``: one
raylet per node, loopback only): ``verl-rfpp doctor --ray`` on every node, and the driver's check of
every worker process (``verl_rfpp.plugin.workers``) on real actors, one per node. One cluster for
the module (starting a node takes 10-60 s on a busy machine); a node whose raylet runs with
``VERL_USE_EXTERNAL_PLUGINS=none`` joins it for the FAIL cases and leaves after each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import verl_rfpp
from verl_rfpp import cluster as ray_cluster
from verl_rfpp.plugin import workers

DRIVER = Path(__file__).with_name("worker_check_driver.py")


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster.LocalCluster(nodes=2, num_cpus=1) as started:
        yield started


@pytest.fixture
def excluded_node(cluster):
    node_id = cluster.add_node({"VERL_USE_EXTERNAL_PLUGINS": "none"})
    yield node_id
    cluster.remove_node(node_id)


def _run(*argv: str) -> subprocess.CompletedProcess:
    # loopback_environment: this process's, with the cluster's RAY_TMPDIR (so `auto` finds it)
    return subprocess.run([sys.executable, *argv], env=ray_cluster.loopback_environment(), capture_output=True,
                          text=True, timeout=900)


def _node_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(("OK  ", "FAIL"))]


def test_the_cluster_has_its_own_raylets_on_loopback(cluster):
    nodes = [node for node in cluster.nodes() if node.alive]
    assert len(nodes) == 2 and [node.is_head for node in nodes] == [True, False]
    assert all(node.alive and node.address.startswith("127.0.0.1:") for node in nodes)
    assert len({node.address for node in nodes}) == 2  # two raylets, each its own port
    assert all(node.resources["CPU"] == 1 for node in nodes)


def test_doctor_ray_auto_reports_every_node_ok(cluster):
    result = _run("-m", "verl_rfpp.cli", "doctor", "--ray", "auto")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = _node_lines(result.stdout)
    assert len(lines) == 2 and all(line.startswith("OK") for line in lines), result.stdout
    for node, line in zip([node for node in cluster.nodes() if node.alive], lines):
        assert f"node {node.short_id} ({node.address}" in line
        assert f"verl-rfpp {verl_rfpp.__version__}, verl " in line and "plugin loaded" in line
    assert "head" in lines[0] and "active on all 2 nodes" in result.stdout


def test_doctor_ray_fails_naming_the_node_that_excludes_the_plugin(cluster, excluded_node):
    result = _run("-m", "verl_rfpp.cli", "doctor", "--ray", cluster.address)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = _node_lines(result.stdout)
    assert len(lines) == 3, result.stdout
    failed = [line for line in lines if line.startswith("FAIL")]
    assert len(failed) == 1 and f"node {excluded_node[:12]}" in failed[0], result.stdout
    assert "VERL_USE_EXTERNAL_PLUGINS=none" in result.stdout and "fix: unset it" in result.stdout
    assert f"NOT active the same way on every node: node {excluded_node[:12]}" in result.stdout


def test_worker_check_passes_on_every_node(cluster):
    result = _run(str(DRIVER), cluster.address)
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["ok"], answer
    alive = [node.node_id for node in cluster.nodes() if node.alive]  # Ray keeps removed nodes, dead
    assert len(alive) == 2 and sorted(r["node_id"] for r in answer["reports"]) == sorted(alive)
    assert {(r["plugin_loaded"], r["version"]) for r in answer["reports"]} == {(True, verl_rfpp.__version__)}


def test_worker_check_stops_naming_the_excluded_node_and_worker(cluster, excluded_node):
    result = _run(str(DRIVER), cluster.address)
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert not answer["ok"], answer
    error = answer["error"]
    assert "1 of 3 worker processes" in error and "before the first rollout" in error
    bad = [line for line in error.splitlines() if line.startswith("- ")]
    assert len(bad) == 1 and f"on Ray node {excluded_node[:12]} (127.0.0.1)" in bad[0]
    assert bad[0].startswith("- worker WorkerDict_") and "VERL_USE_EXTERNAL_PLUGINS=none" in bad[0]
    assert "Fix: unset it" in bad[0] and "verl-rfpp doctor --ray auto" in error


def test_a_run_of_our_recipe_loads_the_plugin_on_the_excluded_node_too(cluster, excluded_node):
    """verl's driver (the TaskRunner that computes the advantages) may land on any node: with the
    job environment main_ppo builds for our recipe, every worker process loads the plugin, also on
    a node whose raylet excludes it, so verl's own estimator never runs in its place."""
    result = _run(str(DRIVER), cluster.address, "--job-env")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["ok"], answer
    alive = [node.node_id for node in cluster.nodes() if node.alive]
    assert excluded_node in alive and sorted(r["node_id"] for r in answer["reports"]) == sorted(alive)
    assert {(r["plugin_loaded"], r["version"]) for r in answer["reports"]} == {(True, verl_rfpp.__version__)}


def _report(**changes):
    return {"pid": 1, "node_id": "n" * 56, "node_ip": "127.0.0.1", "plugin_loaded": True, "version": "0.1.0",
            "plugins_env": None, **changes}


@pytest.mark.parametrize("report,expected", [
    (_report(), None),
    (_report(version="0.0.9"), "it runs verl-rfpp 0.0.9, the driver 0.1.0. Fix: pip install 'verl-rfpp==0.1.0'"),
    (_report(plugin_loaded=False, version=None), "verl-rfpp is not installed for that node's Python. Fix: pip "
                                                 "install 'verl-rfpp==0.1.0'"),
    (_report(plugin_loaded=False, plugins_env="other_plugin"), "VERL_USE_EXTERNAL_PLUGINS=other_plugin in that "
                                                               "node's environment excludes it"),
], ids=["same", "other-version", "missing", "excluded-by-list"])
def test_worker_problem_names_the_cause_and_fix(report, expected):
    problem = workers.problem_of(report, "0.1.0")
    assert problem is None if expected is None else expected in problem, problem


def test_worker_probe_is_sent_by_value():
    import cloudpickle

    probe = workers.probe_function()
    assert b"verl_rfpp.plugin.workers" not in cloudpickle.dumps(probe)
    assert probe()["plugin_loaded"] in (True, False)


def test_both_trainers_worker_setup_is_wrapped_when_verl_imports_them_and_unwrapped_by_deactivate():
    code = (
        "import verl\n"
        "from verl_rfpp import plugin\n"
        "from verl_rfpp.plugin.state import is_ours\n"
        "assert plugin.hooks_status()['worker plugin check (trainer init_workers)']\n"
        "import verl.trainer.ppo.v1.trainer_base as v1, verl.trainer.ppo.ray_trainer as legacy\n"
        "print(is_ours(v1.PPOTrainer.init), is_ours(legacy.RayPPOTrainer.init_workers))\n"
        "plugin.deactivate()\n"
        "print(is_ours(v1.PPOTrainer.init), is_ours(legacy.RayPPOTrainer.init_workers))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "False", "False"], result.stdout + result.stderr
    assert "could not patch" not in result.stderr

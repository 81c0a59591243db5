"""A real Ray cluster of several nodes on this machine (``verl_rfpp.cpu.cluster.LocalCluster``: one
raylet per node, loopback only): ``verl-rfpp doctor --ray`` on every node, and the driver's check of
every worker process (``verl_rfpp.adapter.workers``) on real actors, one per node. One cluster for
the module (starting a node takes 10-60 s on a busy machine), its address in Ray's address file as
`ray start` leaves it (so ``auto`` finds this cluster, not another one on the machine). The tests
that read the two healthy nodes come first; then a node whose raylet runs with
``VERL_USE_EXTERNAL_PLUGINS=none`` joins, once, for every FAIL case after them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.users_cluster import users_cluster

import verl_rfpp
from verl_rfpp.adapter import workers
from verl_rfpp.cpu import cluster as ray_cluster

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).resolve().parents[1] / "support" / "worker_check_driver.py"
ADDRESS_VERDICT_S = 30  # doctor --ray on an address with no cluster: a verdict within this, CLI start included


@pytest.fixture(scope="module")
def cluster():
    with users_cluster(nodes=2) as started:
        yield started


@pytest.fixture(scope="module")
def excluded_node(cluster):
    """Joins for the rest of the module: every test that needs it follows the healthy-cluster tests."""
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
    for node, line in zip([node for node in cluster.nodes() if node.alive], lines, strict=True):
        assert f"node {node.short_id} ({node.address}" in line
        assert f"verl-rfpp {verl_rfpp.__version__}, verl " in line and "plugin loaded" in line
    assert "head" in lines[0] and "active on all 2 nodes" in result.stdout


def test_worker_check_passes_on_every_node(cluster):
    result = _run(str(DRIVER), cluster.address)
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["ok"], answer
    alive = [node.node_id for node in cluster.nodes() if node.alive]  # Ray keeps removed nodes, dead
    assert len(alive) == 2 and sorted(r["node_id"] for r in answer["reports"]) == sorted(alive)
    assert {(r["plugin_loaded"], r["version"]) for r in answer["reports"]} == {(True, verl_rfpp.__version__)}


# The dying node's Python runs this ``sitecustomize`` (its PYTHONPATH): the node's doctor process
# (``python -m verl_rfpp.cli doctor``, started by the node check) says it started, then blocks
# until the test removes its node (and kills it by pid). Every other process goes on unchanged.
HANGING_DOCTOR = """import os, pathlib, sys, time
if sys.orig_argv[1:3] == ["-m", "verl_rfpp.cli"]:
    pathlib.Path({started!r}).write_text(str(os.getpid()))
    time.sleep(600)
"""


def test_doctor_ray_fails_naming_the_excluded_node_and_the_node_that_died_and_reports_the_others(
        cluster, excluded_node, tmp_path):
    """One run, four nodes: two healthy, one that excludes the plugin, one removed while its check
    runs (the doctor used to end in a NodeDiedError traceback and lose every node's report)."""
    shadow, started = tmp_path / "shadow", tmp_path / "started"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text(HANGING_DOCTOR.format(started=str(started)))
    dying = cluster.add_node({"PYTHONPATH": os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])})
    doctor = subprocess.Popen([sys.executable, "-m", "verl_rfpp.cli", "doctor", "--ray", cluster.address],
                              env=ray_cluster.loopback_environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not started.exists() and doctor.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert started.exists(), "the dying node's check never started"
        cluster.remove_node(dying)
        stdout, stderr = doctor.communicate(timeout=900)
    finally:
        if doctor.poll() is None:
            doctor.kill()
            doctor.wait()
        if started.exists():
            try:
                os.kill(int(started.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert doctor.returncode == 1, stdout + stderr
    assert "Traceback" not in stderr, stderr
    lines = _node_lines(stdout)
    assert len(lines) == 4, stdout
    failed = {line.split()[2]: line for line in lines if line.startswith("FAIL")}
    assert sorted(failed) == sorted([excluded_node[:12], dying[:12]]), stdout
    assert sum(line.startswith("OK  ") for line in lines) == 2 and lines[0].startswith("OK") and "head" in lines[0]
    assert "VERL_USE_EXTERNAL_PLUGINS=none" in stdout and "fix: unset it" in stdout
    died = stdout.split(failed[dying[:12]], 1)[1].splitlines()[1]
    assert "its check did not finish: " in died and "Error" in died and "ray status" in died, stdout
    assert "NOT active the same way on every node: " in stdout
    assert f"node {excluded_node[:12]}" in stdout.splitlines()[-1] and f"node {dying[:12]}" in stdout.splitlines()[-1]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again on return: nothing listens there


@pytest.mark.parametrize("listening", [False, True], ids=["nothing-listens", "not-ray-listens"])
def test_doctor_ray_on_an_address_without_a_cluster_ends_within_30_s(listening):
    """Ray's own client retries such an address for minutes (> 300 s measured): one line, exit 2."""
    with socket.socket() as server:
        if listening:  # a TCP port that accepts connections but speaks no Ray
            server.bind(("127.0.0.1", 0))
            server.listen(8)
            port = server.getsockname()[1]
        else:
            port = _closed_port()
        started = time.monotonic()
        result = _run("-m", "verl_rfpp.cli", "doctor", "--ray", f"127.0.0.1:{port}")
        took = time.monotonic() - started
    assert result.returncode == 2, result.stdout + result.stderr
    assert took < ADDRESS_VERDICT_S, took
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"verl-rfpp doctor --ray '127.0.0.1:{port}': "), result.stdout
    assert ("no Ray cluster answered" if listening else "nothing accepts connections") in lines[0]
    assert "Fix: " in lines[0] and "Traceback" not in result.stderr


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
    assert b"verl_rfpp.adapter.workers" not in cloudpickle.dumps(probe)
    assert probe()["plugin_loaded"] in (True, False)


def test_both_trainers_worker_setup_is_wrapped_when_verl_imports_them_and_unwrapped_by_deactivate():
    code = (
        "import verl\n"
        "from verl_rfpp import plugin\n"
        "from verl_rfpp.adapter.state import is_ours\n"
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

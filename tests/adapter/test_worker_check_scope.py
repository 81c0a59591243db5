"""The worker check runs for runs of our estimators only (docs/contract.md sections 6.3, 8.4): on a
real Ray cluster (``verl_rfpp.cpu.cluster.LocalCluster``, loopback only) where one node's raylet
excludes the plugin (``VERL_USE_EXTERNAL_PLUGINS=none``), verl's own v1 ``PPOTrainer.init`` (as the
plugin patches it) with real worker actors on every node completes for a GRPO config, and stops
with ``WorkerPluginError`` naming that node for ours (tests/support/worker_check_driver.py ``--trainer``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl_rfpp.cpu import cluster as ray_cluster

pytestmark = pytest.mark.slow  # a two-node Ray cluster and its drivers

DRIVER = Path(__file__).resolve().parents[1] / "support" / "worker_check_driver.py"


@pytest.fixture(scope="module")
def cluster_with_an_excluding_node():
    with ray_cluster.LocalCluster(nodes=1, num_cpus=1) as started:
        node_id = started.add_node({"VERL_USE_EXTERNAL_PLUGINS": "none"})
        yield started, node_id


def _trainer_init(cluster, estimator: str) -> dict:
    result = subprocess.run([sys.executable, str(DRIVER), cluster.address, f"--trainer={estimator}"],
                            env=ray_cluster.loopback_environment(), capture_output=True, text=True, timeout=900)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(lines[-1])


def test_a_grpo_run_with_a_node_that_excludes_the_plugin_sets_up_its_workers(cluster_with_an_excluding_node):
    cluster, _ = cluster_with_an_excluding_node
    assert _trainer_init(cluster, "grpo") == {"ok": True, "reports": []}


def test_a_run_of_ours_with_that_node_stops_before_the_first_rollout(cluster_with_an_excluding_node):
    cluster, node_id = cluster_with_an_excluding_node
    answer = _trainer_init(cluster, "reinforce_plus_plus_baseline")
    assert not answer["ok"] and "1 of 2 worker processes would train with other code" in answer["error"], answer
    assert f"on Ray node {node_id[:12]}" in answer["error"] and "VERL_USE_EXTERNAL_PLUGINS=none" in answer["error"]

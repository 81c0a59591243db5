"""Activation in one place (docs/contract.md section 8.1, docs/layout.md): the ``verl.plugins``
entry point names ``verl_rfpp.plugin``, ``VERL_USE_EXTERNAL_MODULES`` names the CPU backend's
``verl_rfpp.cpu.backend``, and importing any other module of the package changes nothing in verl.
In a process where verl loads no plugin, every other module is imported; verl's estimator and
policy-loss registries, its platform, rollout, tool-parser and agent-loop registries and
``sys.meta_path`` hold what they held before, and no slot of any patch table of the package (the
plugin's, the CPU backend's, the advantage record's) holds ours. Then importing the backend does
change those registries: the comparison sees a change where there is one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

PLUGIN = "verl_rfpp.plugin"
CPU_BACKEND = "verl_rfpp.cpu.backend"

IMPORT_ALL_BUT_THE_ACTIVATING_ONES = r"""
import importlib, json, pkgutil, sys
import verl
from verl.experimental.agent_loop import agent_loop
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.plugin.platform.platform_manager import PlatformRegistry
from verl.trainer.ppo import core_algos
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry


def held():
    return {"ADV_ESTIMATOR_REGISTRY": dict(core_algos.ADV_ESTIMATOR_REGISTRY),
            "POLICY_LOSS_REGISTRY": dict(core_algos.POLICY_LOSS_REGISTRY),
            "platforms": dict(PlatformRegistry._platforms), "replicas": dict(RolloutReplicaRegistry._registry),
            "rollouts": dict(rollout_base._ROLLOUT_REGISTRY), "tool_parsers": dict(ToolParser._registry),
            "agent_loops": {key: dict(value) for key, value in agent_loop._agent_loop_registry.items()},
            "meta_path": list(sys.meta_path)}


def changed(before):
    after = held()
    return sorted(name for name in before if after[name] != before[name])


before = held()
import verl_rfpp
from verl_rfpp.adapter.patching import ABSENT, Patch, is_ours
excluded = set(sys.argv[1:])
names = sorted({info.name for info in pkgutil.walk_packages(verl_rfpp.__path__, "verl_rfpp.")} - excluded)
for name in names:
    importlib.import_module(name)
patches = {id(value): value for name in names for value in vars(sys.modules[name]).values()
           for value in (value if isinstance(value, tuple) else (value,)) if isinstance(value, Patch)}
ours = []
for patch in patches.values():
    module = sys.modules[patch.module] if patch.module == "sys" else importlib.import_module(patch.module)
    slot = patch.slot.get(module)
    if slot is not ABSENT and (is_ours(slot) or getattr(slot, "__module__", "").startswith("verl_rfpp")):
        ours.append(patch.name)
report = {"imported": names, "activating_loaded": sorted(excluded & set(sys.modules)), "patches": len(patches),
          "ours": ours, "changed": changed(before)}
importlib.import_module(sys.argv[2])  # the CPU backend: its import changes verl, and the comparison sees it
report["backend_changed"] = changed(before)
print(json.dumps(report))
"""


def test_the_entry_point_names_the_one_activating_module():
    (entry,) = [ep for ep in metadata.entry_points(group="verl.plugins") if ep.name == "verl_rfpp"]
    assert entry.value == PLUGIN


@pytest.mark.slow
def test_importing_every_other_module_changes_nothing_in_verl():
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
    for name in ("VERL_USE_EXTERNAL_MODULES", "VERL_RFPP_ADVANTAGE_DUMP"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", IMPORT_ALL_BUT_THE_ACTIVATING_ONES, PLUGIN, CPU_BACKEND],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"verl_rfpp.adapter.table", "verl_rfpp.adapter.registries", "verl_rfpp.cli.main",
            "verl_rfpp.estimators", "verl_rfpp.validation", "verl_rfpp.catalog", "verl_rfpp.cpu",
            "verl_rfpp.cpu.platform",
            "verl_rfpp.cpu.agent", "verl_rfpp.cpu.rollout", "verl_rfpp.cpu.patches",
            "verl_rfpp.cpu.advantage_dump"} <= set(report["imported"])
    assert report["patches"] >= 20  # the plugin's table, the CPU backend's, the advantage record
    assert report == {**report, "activating_loaded": [], "ours": [], "changed": []}
    assert {"platforms", "replicas", "rollouts", "tool_parsers", "agent_loops"} <= set(report["backend_changed"])

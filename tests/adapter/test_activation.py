"""Activation in one place (docs/contract.md section 8.1, docs/layout.md): the ``verl.plugins``
entry point names ``verl_rfpp.plugin``, and importing any other module of the package changes
nothing in verl. In a process where verl loads no plugin, every other module is imported; verl's
estimator and policy-loss registries and every slot of the patch table still hold verl's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

PLUGIN = "verl_rfpp.plugin"

IMPORT_ALL_BUT_THE_PLUGIN = r"""
import importlib, json, pkgutil, sys
import verl
from verl.trainer.ppo import core_algos

before = {name: dict(getattr(core_algos, name)) for name in ("ADV_ESTIMATOR_REGISTRY", "POLICY_LOSS_REGISTRY")}
import verl_rfpp
names = sorted({info.name for info in pkgutil.walk_packages(verl_rfpp.__path__, "verl_rfpp.")} - {sys.argv[1]})
for name in names:
    importlib.import_module(name)
from verl_rfpp.adapter.patching import ABSENT, is_ours
from verl_rfpp.adapter.table import TABLE

ours = []
for patch in TABLE:
    module = sys.modules[patch.module] if patch.module == "sys" else importlib.import_module(patch.module)
    held = patch.slot.get(module)
    if held is not ABSENT and (is_ours(held) or getattr(held, "__module__", "").startswith("verl_rfpp")):
        ours.append(patch.name)
after = {name: dict(getattr(core_algos, name)) for name in before}
print(json.dumps({"imported": names, "plugin_loaded": sys.argv[1] in sys.modules, "ours": ours,
                  "registries_unchanged": after == before}))
"""


def test_the_entry_point_names_the_one_activating_module():
    (entry,) = [ep for ep in metadata.entry_points(group="verl.plugins") if ep.name == "verl_rfpp"]
    assert entry.value == PLUGIN


@pytest.mark.slow
def test_importing_every_other_module_changes_nothing_in_verl():
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    result = subprocess.run([sys.executable, "-c", IMPORT_ALL_BUT_THE_PLUGIN, PLUGIN], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"verl_rfpp.adapter.table", "verl_rfpp.adapter.registries", "verl_rfpp.tools.cli",
            "verl_rfpp.estimators", "verl_rfpp.validation"} <= set(report["imported"])
    assert report == {**report, "plugin_loaded": False, "ours": [], "registries_unchanged": True}

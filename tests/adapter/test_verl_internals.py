"""A verl that moved something the plugin relies on fails loudly, never half-patched
(docs/contract.md section 8.5).

The cases derive from the patch table (``verl_rfpp.adapter.table.TABLE``): every internal a patch
declares is deleted, and replaced by another call shape (``reshape``) or kind (``retype``) where
the patch relies on one. Each case runs in this process: ``deactivate()`` (which restores every
binding, tests/adapter/test_patch_table.py), the internal broken, ``activate()``, the checks, then verl
restored and the plugin activated again. Then: ``hooks_status()`` (doctor's lines) shows each patch
that declares the internal as FAIL naming it, that patch changed nothing, every other patch is in,
an ERROR was logged, our estimator refuses to run, ``validate_config`` and ``verl-rfpp doctor``
refuse naming the internal. A few cases run in a fresh process through tests/support/verl_breaker.py,
which breaks the internal right after verl first imports its module, before the plugin's
post-import finder patches it: the lazy path, ``doctor`` on a trainer module imported or not.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
import verl  # noqa: F401  (loads the plugin through its entry point)

from verl_rfpp import plugin, validation
from verl_rfpp.adapter.compose import compose_verl_config
from verl_rfpp.adapter.patching import ABSENT, _resolve
from verl_rfpp.adapter.table import TABLE
from verl_rfpp.cli import main as cli

pytestmark = pytest.mark.slow  # three fresh processes, each importing verl's trainers

HERE = Path(__file__).resolve().parent
BREAKER = HERE.parent / "support" / "verl_breaker.py"


def _actions(internal) -> list[str]:
    actions = ["delete"]
    if internal.parameters:
        actions.append("reshape")
    if internal.kind is not None:
        actions.append("retype")
    return actions


# (module, path, action): every internal any patch declares, with each way it can move
CASES = sorted({(internal.module, internal.path, action) for patch in TABLE for internal in patch.internals
                for action in _actions(internal)})


def _declaring(module: str, path: str) -> set[str]:
    return {patch.name for patch in TABLE if any((i.module, i.path) == (module, path) for i in patch.internals)}


def test_every_patch_but_the_finder_declares_internals_and_every_internal_is_a_case():
    assert all(patch.internals for patch in TABLE if patch.module != "sys")
    assert {(module, path) for module, path, _ in CASES} == {
        (internal.module, internal.path) for patch in TABLE for internal in patch.internals}


@contextmanager
def _broken(module: str, path: str, action: str):
    """verl with ``module.path`` deleted/reshaped/retyped, the plugin activated over it."""
    import importlib

    parent, _, name = path.rpartition(".")
    owner = _resolve(importlib.import_module(module), parent) if parent else sys.modules[module]
    plugin.deactivate()
    before = vars(owner).get(name, ABSENT)  # verl's own, now
    try:
        assert before is not ABSENT, f"{module}.{path} is not defined where the case breaks it"
        if action == "delete":
            delattr(owner, name)
        else:
            setattr(owner, name, (lambda *args, **kwargs: None) if action == "reshape" else object())
        plugin.activate()
        yield
    finally:
        plugin.deactivate()
        setattr(owner, name, before)
        plugin.activate()
    assert all(plugin.hooks_status().values()), plugin.hooks_status()


def _estimator_call() -> str:
    try:
        plugin.entries()["reinforce_plus_plus_baseline"](
            token_level_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3),
            index=np.array(["a", "a"], dtype=object))
    except plugin.ActivationError as error:
        return "ActivationError: " + str(error)
    return "ran"


@pytest.fixture(scope="module")
def recipe_config():
    return compose_verl_config(list(validation.RECIPES["reinforce_plus_plus_baseline"]))


@pytest.mark.parametrize("module,path,action", CASES, ids=[f"{m}.{p}:{a}" for m, p, a in CASES])
def test_a_moved_internal_fails_its_patches_loudly_and_patches_nothing(module, path, action, recipe_config,
                                                                       caplog, capsys):
    name, failing = f"{module}.{path}", _declaring(module, path)
    with caplog.at_level(logging.ERROR, logger="verl_rfpp"), _broken(module, path, action):
        status = plugin.hooks_status()
        failed = {label.split(": ", 1)[0]: label for label, ok in status.items() if not ok}
        assert set(failed) == failing, status
        for patch in TABLE:
            assert patch.applied() is (patch.name not in failing), patch.name  # nothing of a failed one is in
        for label in failed.values():
            assert name in label, label
        for patch_name in failing:
            assert f"could not attach its {patch_name}" in caplog.text and name in caplog.text
        call = _estimator_call()
        assert call.startswith("ActivationError: ") and name in call, call
        import verl.utils.config as verl_config

        if plugin.table.VALIDATE_CONFIG.name not in failing:
            with pytest.raises(plugin.ActivationError, match=name.replace(".", r"\.")):
                verl_config.validate_config(recipe_config, use_reference_policy=True, use_critic=False)
        capsys.readouterr()
        assert cli.main(["doctor"]) == 1
        out = capsys.readouterr().out
        assert all(f"FAIL  {label}" in out for label in failed.values()), out
        assert "verl-rfpp is NOT fully active." in out


PROBE = r"""
import json, sys
import numpy as np, torch
import verl  # loads the plugin through its entry point
from verl_rfpp.cli import main as cli
from verl_rfpp import plugin
from verl_rfpp import validation
from verl_rfpp.adapter.compose import compose_verl_config
for module in sys.argv[1:]:
    __import__(module)
result = {"loaded": "verl_rfpp.plugin" in sys.modules, "status": plugin.hooks_status(),
          "patched": {patch.name: patch.applied() for patch in plugin.TABLE}}
try:
    plugin.entries()["reinforce_plus_plus_baseline"](
        token_level_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3),
        index=np.array(["a", "a"], dtype=object))
    result["call"] = "ran"
except plugin.ActivationError as error:
    result["call"] = "ActivationError: " + str(error)
import verl.utils.config as verl_config
config = compose_verl_config(list(validation.RECIPES["reinforce_plus_plus_baseline"]))
try:
    verl_config.validate_config(config, use_reference_policy=True, use_critic=False)
    result["validate"] = "passed"
except Exception as error:
    result["validate"] = type(error).__name__ + ": " + str(error)
print("RESULT " + json.dumps(result))
sys.exit(cli.main(["doctor"]))
"""

LEGACY = "verl.trainer.ppo.ray_trainer"
INIT_WORKERS = f"{LEGACY}.RayPPOTrainer.init_workers"
ENGINE_TRAIN_BATCH = "verl.workers.engine.base.BaseEngine.train_batch"


def _breaker(tmp_path: Path, breaks: str, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    return subprocess.run([sys.executable, str(BREAKER), breaks, "--script", str(script), *args],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "HYDRA_FULL_ERROR": "1"},
                          cwd=tmp_path)


def _result(run: subprocess.CompletedProcess) -> dict:
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_a_healthy_verl_is_active_in_a_fresh_process(tmp_path):
    run = _breaker(tmp_path, "-")
    result = _result(run)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert result["loaded"] and all(result["status"].values()), result["status"]
    assert all(result["patched"].values()) and result["call"] == "ran"
    assert not result["validate"].startswith("ActivationError"), result["validate"]  # verl's own verdict
    assert "verl-rfpp is active." in run.stdout


@pytest.mark.parametrize("preimported", [False, True], ids=["trainer-imported-by-doctor", "trainer-imported-first"])
def test_internals_moved_at_verls_import_fail_doctor_and_the_guard(tmp_path, preimported):
    """verl's own import of the module runs first, then the breaker, then the plugin's finder:
    what a newer verl looks like. ``doctor`` names each internal and exits 1 whether or not the
    trainer module was imported before it (issue 22: it printed ``ok`` or an AttributeError)."""
    breaks = f"{LEGACY}:RayPPOTrainer.init_workers:delete,verl.workers.engine.base:BaseEngine.train_batch:delete"
    run = _breaker(tmp_path, breaks, *([LEGACY] if preimported else []))
    result = _result(run)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert (f"FAIL  worker plugin check (trainer init_workers): {INIT_WORKERS} is missing") in run.stdout
    assert (f"FAIL  response-count denominator (engine train_batch): {ENGINE_TRAIN_BATCH} is missing") in run.stdout
    assert "verl-rfpp is NOT fully active." in run.stdout
    for name in (INIT_WORKERS, ENGINE_TRAIN_BATCH):
        assert name in result["call"] and name in result["validate"], result
    assert result["validate"].startswith("ActivationError: ")
    failed = {label.split(": ", 1)[0] for label, ok in result["status"].items() if not ok}
    assert failed == {"worker plugin check (trainer init_workers)", "response-count denominator (engine train_batch)"}
    assert all(ok for name, ok in result["patched"].items() if name not in failed)

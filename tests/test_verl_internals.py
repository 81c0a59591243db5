"""A verl that moved something the plugin relies on fails loudly, never half-patched
(docs/contract.md section 8.5).

Each case deletes one verl internal, or replaces it by another call shape or kind, right after
verl imports its module and before the plugin's hook sees it (tests/verl_breaker.py), in a fresh
process. Then: ``hooks_status()`` (doctor's lines) shows that hook as FAIL naming the internal,
the failed hook patched nothing, every unbroken hook is attached, our estimator refuses to run and
``validate_config`` raises ``ActivationError`` naming the internal. To keep the processes few, one
process breaks one internal of each of several hooks at once (``ROUNDS``): hooks attach
independently, so each hook's verdict is its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BREAKER = HERE / "verl_breaker.py"

PROBE = r"""
import json, sys
import numpy as np, torch
import verl  # loads the plugin through its entry point
from verl_rfpp import plugin, validation
from verl_rfpp.plugin.compose import compose_verl_config

result = {"loaded": "verl_rfpp.plugin" in sys.modules, "status": plugin.hooks_status(), "patched": {}}
for hook in plugin.HOOKS:
    try:
        result["patched"][hook.name] = bool(hook.attached())
    except Exception:  # an attached() that reads the missing internal: nothing of ours is there
        result["patched"][hook.name] = False
try:
    plugin.compute_reinforce_plus_plus_baseline_advantage(
        token_level_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3),
        index=np.array(["a", "a"], dtype=object))
    result["call"] = "ran"
except plugin.ActivationError as error:
    result["call"] = "ActivationError: " + str(error)
import verl.utils.config as verl_config
config = compose_verl_config(list(validation.RECIPES["reinforce_plus_plus_baseline"]))
validate = getattr(verl_config, "validate_config", None)
try:
    validate(config, use_reference_policy=True, use_critic=False)
    result["validate"] = "passed"
except plugin.ActivationError as error:
    result["validate"] = "ActivationError: " + str(error)
except Exception as error:
    result["validate"] = type(error).__name__ + ": " + str(error)
print("RESULT " + json.dumps(result))
"""

ENGINE = "verl.workers.engine.base"
CORE = "verl.trainer.ppo.core_algos"
PPO_LOSS_HOOK = "ppo_loss reads no masked slot (rfpp actor)"
RUNTIME_ENV_HOOK = "Ray job loads the driver's plugin everywhere (runtime_env)"
SESSIONS_MODULE = "verl.trainer.ppo.v1.trainer_base"
SESSIONS_HOOK = "baseline counts each agent session once (v1 trainer)"
# (module, attribute path, action, the hook that must fail); every internal the hooks declare,
# deleted, and the call shapes and kinds they rely on, changed. ``validate_config`` and
# ``get_device_id`` are replaced, not deleted: verl's own ``import verl`` imports them by name.
CASES = [
    ("verl.utils.config", "validate_config", "retype", "validate_config wrapper"),
    ("verl.utils.config", "validate_config", "reshape", "validate_config wrapper"),
    (CORE, "ADV_ESTIMATOR_REGISTRY", "delete", "estimator registry entries"),
    (CORE, "ADV_ESTIMATOR_REGISTRY", "retype", "estimator registry entries"),
    (CORE, "get_adv_estimator_fn", "delete", "estimator registry entries"),
    (CORE, "POLICY_LOSS_REGISTRY", "delete", "policy loss rfpp"),
    (CORE, "register_policy_loss", "delete", "policy loss rfpp"),
    (CORE, "get_policy_loss_fn", "delete", "policy loss rfpp"),
    ("verl.utils.tracking", "Tracking.log", "delete", "Tracking.log metrics hook"),
    ("verl.utils.tracking", "Tracking.log", "reshape", "Tracking.log metrics hook"),
    (ENGINE, "BaseEngine.train_batch", "delete", "response-count denominator (engine train_batch)"),
    (ENGINE, "BaseEngine.train_batch", "reshape", "response-count denominator (engine train_batch)"),
    (ENGINE, "BaseEngine.get_data_parallel_group", "delete", "response-count denominator (engine train_batch)"),
    ("verl.utils.tensordict_utils", "get_non_tensor_data", "delete", "response-count denominator (engine train_batch)"),
    ("verl.utils.tensordict_utils", "assign_non_tensor", "delete", "response-count denominator (engine train_batch)"),
    ("verl.utils.device", "get_device_id", "retype", "response-count denominator (engine train_batch)"),
    ("verl.workers.utils.losses", "ppo_loss", "delete", "response-count denominator (engine train_batch)"),
    ("verl.workers.utils.losses", "ppo_loss", "reshape", "response-count denominator (engine train_batch)"),
    ("verl.workers.utils.losses", "ppo_loss", "delete", PPO_LOSS_HOOK),
    ("verl.workers.utils.losses", "ppo_loss", "reshape", PPO_LOSS_HOOK),
    ("verl.utils.tensordict_utils", "get_non_tensor_data", "delete", PPO_LOSS_HOOK),
    ("verl.utils.tensordict_utils", "assign_non_tensor", "delete", PPO_LOSS_HOOK),
    ("verl.trainer.constants_ppo", "get_ppo_ray_runtime_env", "delete", RUNTIME_ENV_HOOK),
    ("verl.trainer.constants_ppo", "get_ppo_ray_runtime_env", "reshape", RUNTIME_ENV_HOOK),
    (SESSIONS_MODULE, "compute_advantage_for_multi_trajectories", "delete", SESSIONS_HOOK),
    (SESSIONS_MODULE, "compute_advantage_for_multi_trajectories", "reshape", SESSIONS_HOOK),
]


def _rounds() -> list[list[tuple[str, str, str, str]]]:
    """The cases, so that no process breaks two internals of the same hook."""
    by_hook: dict[str, list] = {}
    for case in CASES:
        by_hook.setdefault(case[3], []).append(case)
    depth = max(len(cases) for cases in by_hook.values())
    return [[cases[i] for cases in by_hook.values() if i < len(cases)] for i in range(depth)]


ROUNDS = _rounds()


def _probe(tmp_path: Path, breaks: str) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    result = subprocess.run(
        [sys.executable, str(BREAKER), breaks, "--script", str(script)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    return {**json.loads(lines[-1][len("RESULT "):]), "stderr": result.stderr}


def test_every_declared_internal_has_a_case():
    """The cases above cover every internal a hook declares (a new declaration needs its case)."""
    import verl  # noqa: F401

    from verl_rfpp import plugin

    declared = {(internal.module, internal.path, hook.name) for hook in plugin.HOOKS for internal in hook.internals}
    covered = {(module, path, hook) for module, path, _, hook in CASES}
    assert declared == covered


def test_the_probe_sees_a_healthy_verl_as_active(tmp_path):
    result = _probe(tmp_path, "-")
    assert result["loaded"] and all(result["status"].values()), result["status"]
    assert all(result["patched"].values()) and result["call"] == "ran"
    assert not result["validate"].startswith("ActivationError"), result["validate"]


@pytest.mark.parametrize("cases", ROUNDS, ids=[f"round{i}" for i in range(len(ROUNDS))])
def test_a_moved_internal_fails_its_hook_loudly_and_patches_nothing(tmp_path, cases):
    result = _probe(tmp_path, ",".join(f"{module}:{path}:{action}" for module, path, action, _ in cases))
    # every hook that declares a broken internal fails (some internals are shared by two hooks)
    sharing = {(module, path): sorted({hook for m, p, _, hook in CASES if (m, p) == (module, path)})
               for module, path, _, _ in cases}
    broken = {hook: f"{module}.{path}" for (module, path), hooks in sharing.items() for hook in hooks}
    failed = {label.split(": ", 1)[0]: label for label, ok in result["status"].items() if not ok}
    # a hook on a module that imports a broken internal by name (the v1 trainer) fails with it
    also = {hook for hook in set(failed) - set(broken) if "cannot be imported" in failed[hook]}
    assert set(failed) == set(broken) | also, result["status"]
    for hook, name in broken.items():
        # the internal's name, or its module failing to import because of another broken
        # internal of this round (verl's losses module imports from core_algos by name)
        assert name in failed[hook] or "cannot be imported" in failed[hook], failed[hook]
        named = name if name in failed[hook] else failed[hook].split(": ", 1)[1]  # what the failure names
        assert result["patched"][hook] is False  # nothing of this hook is in
        assert result["call"].startswith("ActivationError: ") and named in result["call"]
        assert f"could not attach its {hook}" in result["stderr"] and named in result["stderr"]  # logged at ERROR
    assert all(ok for other, ok in result["patched"].items() if other not in broken and other not in also), \
        result["patched"]
    if "validate_config wrapper" in broken:
        return  # verl's validate_config is gone or not wrappable: the estimator's refusal above is the guard
    assert result["validate"].startswith("ActivationError: "), result["validate"]
    for hook, name in broken.items():
        named = name if name in failed[hook] else failed[hook].split(": ", 1)[1]
        assert named in result["validate"], (named, result["validate"])


def test_doctor_fails_naming_the_moved_internal(tmp_path):
    result = subprocess.run(
        [sys.executable, str(BREAKER), f"{ENGINE}:BaseEngine.train_batch:delete", "--module", "verl_rfpp.cli", "doctor"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("FAIL  response-count denominator (engine train_batch): "
            f"{ENGINE}.BaseEngine.train_batch is missing") in result.stdout
    assert "verl-rfpp is NOT fully active." in result.stdout

"""The patch table (``verl_rfpp.adapter.table.TABLE``, docs/contract.md section 8.5) is every change
the plugin makes to verl, and each is undone and harmless to other runs:

- ``deactivate()`` restores every binding: in a process where verl never loaded the plugin, every
  attribute of every loaded verl module (the table's modules, the modules that bound a patched name
  with ``from ... import``, found by scanning, and everything else ``main_ppo`` and both trainers
  import), the patched classes, the registries and ``sys.meta_path`` are snapshotted; the plugin is
  activated over them (every binder rebound), deactivated, and everything compared by identity.
  The same after verl's own lazy path (entry point, post-import finder), compared by name with the
  first process's snapshot. Each binder found must be declared by its patch (``bound_by``).
- Nothing else changes (contract 6.3): every patched verl function, called with a GRPO run's cheap
  inputs with the plugin and after ``deactivate()``, gives bit for bit the same result.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import verl  # noqa: F401  (loads the plugin through its entry point)

from verl_rfpp import catalog, plugin
from verl_rfpp.adapter.compose import compose_verl_config
from verl_rfpp.adapter.table import TABLE

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition

SNAPSHOT = r"""
import importlib, json, sys
import verl
mode, spec = sys.argv[1], json.loads(sys.argv[2])  # spec: the modules to import, the patched classes and registries
if mode == "eager":  # verl has not loaded the plugin (VERL_USE_EXTERNAL_PLUGINS=none)
    assert "verl_rfpp.plugin" not in sys.modules
for name in spec["modules"]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
ABSENT = object()

def owners():
    found = {"sys.meta_path": {str(i): f for i, f in enumerate(sys.meta_path)}}
    for name, module in list(sys.modules.items()):
        if (name == "verl" or name.startswith("verl.")) and module is not None:
            found[name] = dict(vars(module))
    for module, path in spec["owners"]:
        if module in sys.modules:
            owner = sys.modules[module]
            for part in path.split("."):
                owner = getattr(owner, part)
            found[f"{module}:{path}"] = dict(vars(owner)) if not isinstance(owner, dict) else dict(owner)
    return found

def describe(value):
    return f"{type(value).__qualname__}:{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"

def names(found):
    return {owner: {key: describe(value) for key, value in attrs.items()} for owner, attrs in found.items()}

result = {}
if mode == "eager":
    before = owners()
    from verl_rfpp import plugin  # activates over the loaded modules: every binder must be rebound
    from verl_rfpp.adapter.patching import Attribute
    result["status"] = plugin.hooks_status()
    attributes = [patch for patch in plugin.TABLE if isinstance(patch.slot, Attribute)]
    # every verl module that held verl's object under the patched name (not where it is defined)
    result["binders"] = {patch.name: sorted(name for name, attrs in before.items() if name.startswith("verl")
                                             and name != patch.module and ":" not in name
                                             and attrs.get(patch.slot.name, ABSENT) is patch.original()
                                             and getattr(patch.original(), "__module__", None) != name)
                         for patch in attributes}
    result["declared"] = {patch.name: list(patch.bound_by) for patch in attributes}
    result["not_rebound"] = {patch.name: sorted(b for b in patch.bound_by if b in sys.modules
                                                and vars(sys.modules[b]).get(patch.slot.name) is patch.original())
                             for patch in attributes}
    plugin.deactivate()
    after = owners()
    result["changed"] = sorted(f"{owner}.{key}" for owner in set(before) | set(after)
                               for key in set(before.get(owner, {})) | set(after.get(owner, {}))
                               if before.get(owner, {}).get(key, ABSENT) is not after.get(owner, {}).get(key, ABSENT))
    result["names"] = names(before)
else:  # verl loaded the plugin at import; its modules were patched right after verl imported them
    from verl_rfpp import plugin
    from verl_rfpp.adapter.patching import is_ours
    result["status"] = plugin.hooks_status()
    plugin.deactivate()
    after = owners()
    result["ours_left"] = sorted(f"{owner}.{key}" for owner, attrs in after.items() for key, value in attrs.items()
                                 if is_ours(value) or describe(value).split(":", 1)[1].startswith("verl_rfpp.")
                                 or type(value).__name__ == "_AfterImport")
    result["names"] = names(after)
print("RESULT " + json.dumps(result))
"""


ENTRY_MODULES = ["verl.trainer.main_ppo", "verl.trainer.main_ppo_v0", "verl.experimental.one_step_off_policy.main_ppo",
                 "verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.trainer_base", "verl.workers.engine_workers",
                 "verl.trainer.distillation.losses", "verl.experimental.separation.ray_trainer"]


def _spec() -> str:
    """The modules each snapshot imports, and the classes and registries the table patches."""
    from verl_rfpp.adapter.patching import Attribute, Entry

    modules = ENTRY_MODULES + [name for patch in TABLE if patch.module != "sys"
                               for name in (patch.module, *patch.bound_by)]
    owners = sorted({(patch.module, patch.slot.path.rpartition(".")[0]) for patch in TABLE
                     if isinstance(patch.slot, Attribute) and "." in patch.slot.path}
                    | {(patch.module, patch.slot.registry) for patch in TABLE if isinstance(patch.slot, Entry)})
    return json.dumps({"modules": modules, "owners": owners})


def _snapshot(tmp_path, mode, **env):
    script = tmp_path / f"snapshot_{mode}.py"
    script.write_text(SNAPSHOT)
    run = subprocess.run([sys.executable, str(script), mode, _spec()], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **env}, cwd=tmp_path)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.slow
def test_deactivate_restores_every_binding_the_table_touches(tmp_path):
    eager = _snapshot(tmp_path, "eager", VERL_USE_EXTERNAL_PLUGINS="none")
    assert all(eager["status"].values()), eager["status"]
    for name, binders in eager["binders"].items():
        assert set(binders) <= set(eager["declared"][name]), (name, binders)  # the table declares every binder
        assert not eager["not_rebound"][name], (name, eager["not_rebound"][name])  # and activation rebound each
    assert eager["binders"]["ppo_loss reads no masked slot (rfpp actor)"]  # engine_workers & co. were there
    assert eager["binders"]["Ray job loads the driver's plugin everywhere (runtime_env)"] == ["verl.trainer.main_ppo"]
    assert eager["changed"] == []
    lazy = _snapshot(tmp_path, "lazy")
    assert all(lazy["status"].values()), lazy["status"]
    assert lazy["ours_left"] == []
    differing = sorted(f"{owner}.{key}" for owner, attrs in lazy["names"].items() for key, value in attrs.items()
                       if key in eager["names"].get(owner, {}) and eager["names"][owner][key] != value)
    assert differing == [], differing  # what both processes loaded is verl's own again


# --- nothing else changes: a GRPO run's calls of every patched verl function -------------------

SIZES = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "data.train_batch_size=8",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.use_dynamic_bsz=False"]


@functools.cache
def _grpo_config():
    return compose_verl_config(["algorithm.adv_estimator=grpo", *SIZES])


def _grpo_actor():
    from verl.utils.config import omega_conf_to_dataclass

    actor = omega_conf_to_dataclass(_grpo_config().actor_rollout_ref.actor)
    assert actor.policy_loss.loss_mode == "vanilla"
    return actor


def _loss_inputs():
    from test_losses import _batch, _verl_inputs

    b = _batch(seed=5)
    log_prob = b["log_prob"].clone().requires_grad_(True)
    data, model_output = _verl_inputs(b, log_prob)
    return data, model_output, log_prob


def _outcome(call):
    """What a call gives: its result, or the exception it raised (type and text)."""
    try:
        return ("returned", call())
    except Exception as error:  # noqa: BLE001 (an exception is a result to compare too)
        return ("raised", type(error).__name__, str(error))


def _validate_config():
    import verl.utils.config as verl_config

    return [_outcome(lambda: verl_config.validate_config(_grpo_config(), use_reference_policy=use_ref,  # noqa: B023 (called at once)
                                                         use_critic=False)) for use_ref in (False, True)]


def _advantages():
    """verl's registry for every name but ours, and GRPO's advantages through verl's dispatch."""
    from support.batches import make_batch
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask, uids = make_batch(11, dtype=torch.float32)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uids})
    out = compute_advantage(data, adv_estimator="grpo", num_repeat=1, config=_grpo_config().algorithm)
    functions = {name: core_algos.get_adv_estimator_fn(name) for name in core_algos.ADV_ESTIMATOR_REGISTRY
                 if name not in catalog.names()}
    return functions, out.batch["advantages"], out.batch["returns"]


def _policy_losses():
    from verl.trainer.ppo import core_algos

    return {name: core_algos.get_policy_loss_fn(name) for name in core_algos.POLICY_LOSS_REGISTRY if name != "rfpp"}


def _tracking_log():
    from verl.utils.tracking import Tracking

    from verl_rfpp.core.metrics import STEP_METRICS

    STEP_METRICS.drain()  # a GRPO process never ran our estimator: nothing is pending (earlier tests ran it)
    seen = []

    class Capture:
        def log(self, data, step):
            seen.append((data, step))

    tracking = Tracking("p", "e", default_backend=[])
    tracking.logger["capture"] = Capture()
    tracking.log({"critic/score/mean": 0.5, "actor/pg_loss": -1.0}, step=3)
    return seen


def _ppo_loss():
    from verl.workers.utils.losses import ppo_loss

    data, model_output, log_prob = _loss_inputs()
    loss, metrics = ppo_loss(_grpo_actor(), model_output, data)
    loss.backward()
    return loss, metrics, log_prob.grad


def _train_batch():
    """verl's ``BaseEngine.train_batch`` over an engine whose step is a real ``ppo_loss`` call."""
    import verl.utils.tensordict_utils as tu
    from verl.workers.engine.base import BaseEngine
    from verl.workers.utils.losses import ppo_loss

    data, model_output, log_prob = _loss_inputs()
    tu.assign_non_tensor(data, global_batch_size=8)  # verl's rows: two more than the batch holds

    class Engine:
        def optimizer_zero_grad(self):
            pass

        def forward_backward_batch(self, data, loss_function, forward_only=False):
            loss, metrics = loss_function(model_output=model_output, data=data)
            loss.backward()
            return {"metrics": dict(metrics), "loss": loss,
                    "global_batch_size": tu.get_non_tensor_data(data=data, key="global_batch_size", default=None)}

        def optimizer_step(self):
            return torch.tensor(1.5)

        def is_mp_src_rank_with_outputs(self):
            return True

        def get_data_parallel_group(self):
            return None

    outputs = BaseEngine.train_batch(Engine(), data, functools.partial(ppo_loss, config=_grpo_actor()))
    return outputs, log_prob.grad


def _runtime_env():
    import verl.trainer.main_ppo as main_ppo
    from verl.trainer import constants_ppo

    return constants_ppo.get_ppo_ray_runtime_env(_grpo_config()), main_ppo.get_ppo_ray_runtime_env(_grpo_config())


class _Stop(Exception):
    pass


def _legacy_init_workers():
    """The legacy set-up's first step stops it: a GRPO run's wrapper decides before calling verl."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    class Pools:
        def create_resource_pool(self):
            raise _Stop("verl's init_workers ran")

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.config, trainer.resource_pool_manager = _grpo_config(), Pools()
    return _outcome(trainer.init_workers)


def _v1_init():
    """verl's v1 ``PPOTrainer.init`` over a trainer whose set-up steps record themselves."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    calls = []

    class Trainer(PPOTrainer):
        def _setup(self):
            calls.append("setup")
            self.actor_rollout_wg = None

        def on_init_end(self):
            calls.append("init end")

        def on_sample_end(self, *args, **kwargs):
            pass

        def on_step_end(self, *args, **kwargs):
            pass

    trainer = Trainer.__new__(Trainer)
    trainer.config = _grpo_config()
    return _outcome(trainer.init), calls


def _v1_advantages():
    """GRPO's advantages through verl's v1 session-aware step (one output per session)."""
    from support.batches import make_batch
    from verl import DataProto
    from verl.trainer.ppo.v1 import trainer_base

    rewards, mask, uids = make_batch(13, dtype=torch.float32)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uids})
    keys = [f"{uid}_{row}_0" for row, uid in enumerate(uids)]
    out = trainer_base.compute_advantage_for_multi_trajectories(data, keys, "grpo", config=_grpo_config().algorithm)
    return out.batch["advantages"], out.batch["returns"]


# patch name -> a GRPO run's call of the verl function it patches (registry entries: every lookup)
GRPO_CALLS = {
    "validate_config wrapper": _validate_config,
    **{f"estimator {name}": _advantages for name in catalog.names()},  # one per record
    "policy loss rfpp": _policy_losses,
    "Tracking.log metrics hook": _tracking_log,
    "ppo_loss reads no masked slot (rfpp actor)": _ppo_loss,
    "response-count denominator (engine train_batch)": _train_batch,
    "Ray job loads the driver's plugin everywhere (runtime_env)": _runtime_env,
    "worker plugin check (trainer init_workers)": _legacy_init_workers,
    "worker plugin check (v1 trainer init)": _v1_init,
    f"{catalog.GROUP.name} family counts each agent session once (v1 trainer)": _v1_advantages,
}


def _bits(tensor):
    return tensor.detach().reshape(-1).contiguous().view(torch.uint8)


def _same(a, b) -> bool:
    """Bit for bit: tensors equal in dtype, shape and every bit (NaN included), the rest by ``==``."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return (torch.is_tensor(a) and torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(_bits(a), _bits(b)))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if type(a) is type(b) and hasattr(a, "__dict__") and not callable(a):  # verl's Metric values
        return _same(vars(a), vars(b))
    return a is b or a == b


def test_every_patch_has_a_grpo_call():
    assert set(GRPO_CALLS) == {patch.name for patch in TABLE if patch.module != "sys"}


@pytest.mark.parametrize("name", list(GRPO_CALLS))
def test_a_grpo_run_gets_bit_for_bit_what_verl_alone_gives(name):
    """With the plugin (its patch in place) and without it (``deactivate()``), the same call."""
    plugin.hooks_status()  # imports the verl modules patches wait for: every patch is in
    assert plugin.PATCHES[name].applied()
    call = GRPO_CALLS[name]
    ours = call()
    plugin.deactivate()
    try:
        assert not plugin.PATCHES[name].applied()
        verls = call()
    finally:
        plugin.activate()
    assert plugin.PATCHES[name].applied()
    assert _same(ours, verls), (name, ours, verls)

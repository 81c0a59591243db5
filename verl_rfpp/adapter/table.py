"""Every change the plugin makes to verl: one ``Patch`` each, in activation order
(docs/contract.md sections 8.3 and 8.5). Activation, ``deactivate()``, ``verl-rfpp doctor`` and
the activation guard loop over ``TABLE``; tests derive their cases from it.

Each record names the verl slot it changes, the modules that bind the name by ``from ... import``
(rebound with it), every verl internal it relies on (all checked before anything changes) and what
it does for a run that is not ours. The wrappers' bodies live in the module of their subsystem.
"""

from __future__ import annotations

from typing import Optional

from verl_rfpp.adapter import actor_loss, config, engine, registries, runtime_env, sessions, tracking, workers
from verl_rfpp.adapter.patching import FINDER, Attribute, Entry, MetaPathEntry, Patch, failures
from verl_rfpp.contract import validation

CORE_ALGOS = registries.CORE_ALGOS
UNCHANGED = "verl's own function, called with the same arguments; its result returned unchanged"

FINDER_PATCH = Patch(
    "post-import finder", "sys", MetaPathEntry(), lambda _: FINDER, (),
    "imports every module with verl's own loader; applies the patches below right after verl first "
    "imports their module (importing them at load would cost every verl process about 1 s)")
VALIDATE_CONFIG = Patch(
    "validate_config wrapper", config.VERL_CONFIG, Attribute("validate_config"), config._validating,
    config.INTERNALS, UNCHANGED + " (a misspelt name of ours, unknown to verl, is refused first)",
    config.VALIDATE_CONFIG_IMPORTERS)
ESTIMATOR_PATCHES = tuple(
    Patch(f"estimator {name}", CORE_ALGOS, Entry("ADV_ESTIMATOR_REGISTRY", name),
          lambda _, function=function: function, registries.INTERNALS,
          "nothing: every other name of verl's registry keeps verl's estimator")
    for name, function in registries.ESTIMATORS.items())
POLICY_LOSS = Patch(
    f"policy loss {validation.POLICY_LOSS_MODE}", CORE_ALGOS,
    Entry("POLICY_LOSS_REGISTRY", validation.POLICY_LOSS_MODE), lambda _: actor_loss.rfpp_policy_loss,
    actor_loss.INTERNALS, "nothing: a new name; every other policy loss stays verl's")
TRACKING = Patch(
    "Tracking.log metrics hook", tracking.TRACKING, Attribute("Tracking.log"), tracking._merging_metrics,
    tracking.INTERNALS, UNCHANGED + " (no rfpp/ metric is pending unless our estimator ran)")
PPO_LOSS = Patch(
    "ppo_loss reads no masked slot (rfpp actor)", actor_loss.LOSSES, Attribute("ppo_loss"),
    actor_loss._selecting_masked_inputs, actor_loss.PPO_LOSS_INTERNALS,
    UNCHANGED + " unless the actor's policy loss is rfpp", actor_loss.PPO_LOSS_IMPORTERS)
ENGINE = Patch(
    "response-count denominator (engine train_batch)", engine.ENGINE_BASE, Attribute("BaseEngine.train_batch"),
    engine._counting_responses, engine.INTERNALS, UNCHANGED + " unless the actor's policy loss is rfpp")
RUNTIME_ENV = Patch(
    "Ray job loads the driver's plugin everywhere (runtime_env)", runtime_env.CONSTANTS,
    Attribute("get_ppo_ray_runtime_env"), runtime_env._requiring_plugin, runtime_env.INTERNALS,
    UNCHANGED + " unless the estimator is ours", runtime_env.MAIN_PPO_IMPORTERS)
LEGACY_WORKERS = Patch(
    "worker plugin check (trainer init_workers)", workers.LEGACY_TRAINER, Attribute("RayPPOTrainer.init_workers"),
    workers._checking_workers, workers.LEGACY_INTERNALS, UNCHANGED + " unless the estimator is ours")
V1_WORKERS = Patch(
    "worker plugin check (v1 trainer init)", workers.V1_TRAINER, Attribute("PPOTrainer.init"),
    workers._checking_workers, workers.V1_INTERNALS, UNCHANGED + " unless the estimator is ours")
SESSIONS = Patch(
    "baseline counts each agent session once (v1 trainer)", sessions.V1_TRAINER, Attribute(sessions.FUNCTION),
    sessions._counting_sessions, sessions.INTERNALS,
    UNCHANGED + " unless the estimator is reinforce_plus_plus_baseline")

# The finder first (the others may wait for it), then the validation wrapper, so that a later
# failure is caught by its activation guard.
TABLE: tuple[Patch, ...] = (FINDER_PATCH, VALIDATE_CONFIG, *ESTIMATOR_PATCHES, POLICY_LOSS, TRACKING, PPO_LOSS,
                            ENGINE, RUNTIME_ENV, LEGACY_WORKERS, V1_WORKERS, SESSIONS)
PATCHES = {patch.name: patch for patch in TABLE}
assert len(PATCHES) == len(TABLE), "patch names are doctor's labels: one each"


def problem() -> Optional[str]:
    """Why the plugin cannot be active in this verl (every patch that could not be applied, with
    the internals it misses), or ``None``; first imports every verl module a patch waits for, so
    each has applied or failed. A patch undone or replaced later is the registry guard's and
    doctor's business, not this one's."""
    failed = failures(TABLE)
    if not failed:
        return None
    from verl_rfpp.adapter.versions import TESTED_VERL, verl_version

    details = "; ".join(f"{name}: {', '.join(problems)}" for name, problems in failed.items())
    return (f"verl {verl_version()} lacks what verl-rfpp relies on, so none of its runs start "
            f"({details}). Fix: use a tested verl ({', '.join(TESTED_VERL)}) or a verl-rfpp release "
            "that supports this verl")

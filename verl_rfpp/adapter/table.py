"""Every change the plugin makes to verl: one ``Patch`` each, in activation order
(docs/contract.md sections 8.3 and 8.5). Activation, ``deactivate()``, ``verl-rfpp doctor`` and
the activation guard (``patching.lacking`` of the installed patches) loop over ``TABLE``; tests derive
their cases from it.

Each record names the verl slot it changes, the modules that bind the name by ``from ... import``
(rebound with it), every verl internal it relies on (all checked before anything changes) and what
it does for a run that is not ours. The wrappers' bodies live in the module of their subsystem.
"""

from __future__ import annotations

from verl_rfpp import catalog, losses
from verl_rfpp.adapter import actor_loss, config, engine, registries, runtime_env, sessions, tracking, workers
from verl_rfpp.adapter.patching import FINDER, Attribute, Entry, MetaPathEntry, Patch
from verl_rfpp.catalog import POLICY_LOSS_MODE

CORE_ALGOS = registries.CORE_ALGOS
UNCHANGED = "verl's own function, called with the same arguments; its result returned unchanged"

FINDER_PATCH = Patch(
    name="post-import finder",
    module="sys",
    slot=MetaPathEntry(),
    replace=lambda _: FINDER,
    internals=(),
    others="imports every module with verl's own loader; applies the patches below right after verl first "
           "imports their module (importing them at load would cost every verl process about 1 s)",
)
VALIDATE_CONFIG = Patch(
    name="validate_config wrapper",
    module=config.VERL_CONFIG,
    slot=Attribute("validate_config"),
    replace=config._validating,
    internals=config.INTERNALS,
    others=UNCHANGED + " (a misspelt name of ours, unknown to verl, is refused first)",
    bound_by=config.VALIDATE_CONFIG_IMPORTERS,
)
def estimator_patches() -> tuple[Patch, ...]:
    """One registry patch per estimator record (``verl_rfpp.catalog``), its entry a ``GuardedEstimator``."""
    return tuple(
        Patch(
            name=f"estimator {name}",
            module=CORE_ALGOS,
            slot=Entry("ADV_ESTIMATOR_REGISTRY", name),
            replace=lambda _, entry=entry: entry,
            internals=registries.INTERNALS,
            others="nothing: every other name of verl's registry keeps verl's estimator",
        )
        for name, entry in registries.entries().items())


ESTIMATOR_PATCHES = estimator_patches()
POLICY_LOSS = Patch(
    name=f"policy loss {POLICY_LOSS_MODE}",
    module=CORE_ALGOS,
    slot=Entry("POLICY_LOSS_REGISTRY", POLICY_LOSS_MODE),
    replace=lambda _: losses.rfpp_policy_loss,
    internals=actor_loss.INTERNALS,
    others="nothing: a new name; every other policy loss stays verl's",
)
TRACKING = Patch(
    name="Tracking.log metrics hook",
    module=tracking.TRACKING,
    slot=Attribute("Tracking.log"),
    replace=tracking._merging_metrics,
    internals=tracking.INTERNALS,
    others=UNCHANGED + " (no rfpp/ metric is pending unless our estimator ran)",
)
PPO_LOSS = Patch(
    name="ppo_loss reads no masked slot (rfpp actor)",
    module=actor_loss.LOSSES,
    slot=Attribute("ppo_loss"),
    replace=actor_loss._selecting_masked_inputs,
    internals=actor_loss.PPO_LOSS_INTERNALS,
    others=UNCHANGED + " unless the actor's policy loss is rfpp",
    bound_by=actor_loss.PPO_LOSS_IMPORTERS,
)
ENGINE = Patch(
    name="response-count denominator (engine train_batch)",
    module=engine.ENGINE_BASE,
    slot=Attribute("BaseEngine.train_batch"),
    replace=engine._counting_responses,
    internals=engine.INTERNALS,
    others=UNCHANGED + " unless the actor's policy loss is rfpp",
)
RUNTIME_ENV = Patch(
    name="Ray job loads the driver's plugin everywhere (runtime_env)",
    module=runtime_env.CONSTANTS,
    slot=Attribute("get_ppo_ray_runtime_env"),
    replace=runtime_env._requiring_plugin,
    internals=runtime_env.INTERNALS,
    others=UNCHANGED + " unless the estimator is ours",
    bound_by=runtime_env.MAIN_PPO_IMPORTERS,
)
LEGACY_WORKERS = Patch(
    name="worker plugin check (trainer init_workers)",
    module=workers.LEGACY_TRAINER,
    slot=Attribute("RayPPOTrainer.init_workers"),
    replace=workers._checking_workers,
    internals=workers.LEGACY_INTERNALS,
    others=UNCHANGED + " unless the estimator is ours",
)
V1_WORKERS = Patch(
    name="worker plugin check (v1 trainer init)",
    module=workers.V1_TRAINER,
    slot=Attribute("PPOTrainer.init"),
    replace=workers._checking_workers,
    internals=workers.V1_INTERNALS,
    others=UNCHANGED + " unless the estimator is ours",
)
SESSIONS = Patch(
    name=f"{catalog.GROUP.name} family counts each agent session once (v1 trainer)",
    module=sessions.V1_TRAINER,
    slot=Attribute(sessions.FUNCTION),
    replace=sessions._counting_sessions,
    internals=sessions.INTERNALS,
    others=UNCHANGED + f" unless the estimator is of the {catalog.GROUP.name} family ("
                       + ", ".join(record.name for record in catalog.of_family(catalog.GROUP)) + ")",
)

# The finder first (the others may wait for it), then the validation wrapper, so that a later
# failure is caught by its activation guard.
TABLE: tuple[Patch, ...] = (FINDER_PATCH, VALIDATE_CONFIG, *ESTIMATOR_PATCHES, POLICY_LOSS, TRACKING, PPO_LOSS,
                            ENGINE, RUNTIME_ENV, LEGACY_WORKERS, V1_WORKERS, SESSIONS)
PATCHES = {patch.name: patch for patch in TABLE}
assert len(PATCHES) == len(TABLE), "patch names are doctor's labels: one each"


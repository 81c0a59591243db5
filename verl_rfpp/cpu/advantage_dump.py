"""Opt-in record of verl's v1 advantage step, for tests of the session semantics
(docs/contract.md section 3.7). Never imported by the CPU backend itself.

With ``VERL_USE_EXTERNAL_MODULES=verl_rfpp.cpu.backend,verl_rfpp.cpu.advantage_dump`` and
``VERL_RFPP_ADVANTAGE_DUMP=<dir>``, each call of the v1 trainer's
``compute_advantage_for_multi_trajectories`` (in the driver) saves what it was given (the rows'
TransferQueue keys, uids, rewards, mask, the estimator's name) and what it computed (advantages,
returns) to ``<dir>/advantages-<pid>-<n>.pt``. It observes only: no number changes. verl imports
the modules of ``VERL_USE_EXTERNAL_MODULES`` before its plugins, so the plugin's session hook
wraps this record.
"""

from __future__ import annotations

import functools
import itertools
import os
from pathlib import Path

from verl_rfpp.adapter.patching import Attribute, Internal, Patch

DUMP_ENV = "VERL_RFPP_ADVANTAGE_DUMP"
V1_TRAINER = "verl.trainer.ppo.v1.trainer_base"
FUNCTION = "compute_advantage_for_multi_trajectories"
_calls = itertools.count(1)


def _recording(original):
    @functools.wraps(original)
    def compute_advantage_for_multi_trajectories(data, batch_keys, adv_estimator, *args, **kwargs):
        import torch

        given = {
            "keys": [str(key) for key in batch_keys],
            "uid": [str(uid) for uid in data.non_tensor_batch["uid"]],
            "token_level_rewards": data.batch["token_level_rewards"].clone(),
            "response_mask": data.batch["response_mask"].clone(),
            "adv_estimator": str(adv_estimator),
        }
        result = original(data, batch_keys, adv_estimator, *args, **kwargs)
        given.update(advantages=result.batch["advantages"].clone(), returns=result.batch["returns"].clone())
        directory = Path(os.environ[DUMP_ENV])
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(given, directory / f"advantages-{os.getpid()}-{next(_calls)}.pt")
        return result

    return compute_advantage_for_multi_trajectories


RECORD = Patch(
    name="CPU backend: record of the v1 advantage step", module=V1_TRAINER, slot=Attribute(FUNCTION),
    replace=_recording, internals=(Internal(V1_TRAINER, FUNCTION, ("data", "batch_keys", "adv_estimator")),),
    others="observes only: it saves what every run's advantage step was given and computed",
)

if os.environ.get(DUMP_ENV):
    # right after verl first imports its v1 trainer (importing it here, inside ``import verl``, would
    # run verl's engine modules before the CPU platform exists), by the plugin's post-import finder
    RECORD.install()

"""verl's logger: ``Tracking.log`` merges the pending ``rfpp/`` metrics into every logged step
(docs/contract.md section 7)."""

from __future__ import annotations

import functools
from typing import Any

from verl_rfpp.metrics import STEP_METRICS
from verl_rfpp.plugin.hooks import Internal
from verl_rfpp.plugin.state import ORIGINALS, is_ours, marked

TRACKING = "verl.utils.tracking"
INTERNALS = (Internal(TRACKING, "Tracking.log", ("self", "data", "step")),)


def hook_tracking() -> None:
    """Make ``Tracking.log`` merge the pending ``rfpp/`` metrics into every logged step (idempotent)."""
    from verl.utils.tracking import Tracking

    current = Tracking.log
    if is_ours(current):
        return
    ORIGINALS["Tracking.log"] = current

    @functools.wraps(current)
    def log(self: Any, data: dict, step: int, *args: Any, **kwargs: Any) -> Any:
        return current(self, STEP_METRICS.merge_into(data), step, *args, **kwargs)

    Tracking.log = marked(log)


def unhook_tracking() -> None:
    from verl.utils.tracking import Tracking

    if "Tracking.log" in ORIGINALS:
        Tracking.log = ORIGINALS.pop("Tracking.log")


def tracking_hooked() -> bool:
    from verl.utils.tracking import Tracking

    return is_ours(Tracking.log)

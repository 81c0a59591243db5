"""verl's logger: ``Tracking.log`` merges the pending ``rfpp/`` metrics into every logged step
(docs/contract.md section 7)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from verl_rfpp.adapter.patching import Internal, marked
from verl_rfpp.core.metrics import STEP_METRICS

TRACKING = "verl.utils.tracking"
INTERNALS = (Internal(TRACKING, "Tracking.log", ("self", "data", "step")),)


def _merging_metrics(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Tracking.log`` that merges the pending ``rfpp/`` metrics into every logged step (none are
    pending unless one of our estimators ran in this process)."""

    @functools.wraps(original)
    def log(self: Any, data: dict, step: int, *args: Any, **kwargs: Any) -> Any:
        return original(self, STEP_METRICS.merge_into(data), step, *args, **kwargs)

    return marked(log)

"""verl's training engine: the ``rfpp`` actor loss divides by the mini-batch's responses, not by
verl's row count (docs/contract.md sections 5.2 and 8.3)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from verl_rfpp import losses
from verl_rfpp.adapter.actor_loss import is_rfpp_actor
from verl_rfpp.adapter.patching import Internal, marked
from verl_rfpp.adapter.state import logger

ENGINE_BASE = "verl.workers.engine.base"  # BaseEngine.train_batch: one optimizer step, every engine

# What ``_counting_responses`` relies on; ``ppo_loss`` is how it finds the actor config: verl's
# workers pass ``partial(ppo_loss, config=actor_config)`` as the loss function.
INTERNALS = (
    Internal(ENGINE_BASE, "BaseEngine.train_batch", ("self", "data", "loss_function")),
    Internal(ENGINE_BASE, "BaseEngine.get_data_parallel_group", ("self",)),
    Internal("verl.utils.tensordict_utils", "get_non_tensor_data", ("data", "key", "default")),
    Internal("verl.utils.tensordict_utils", "assign_non_tensor"),
    Internal("verl.utils.device", "get_device_id"),
    Internal("verl.workers.utils.losses", "ppo_loss", ("config", "model_output", "data")),
)

_logged_once: set[str] = set()


def rfpp_actor_config(loss_function: Any) -> Any:
    """The ``ActorConfig`` bound in verl's ``partial(ppo_loss, config=...)`` when its policy loss
    is ``rfpp``; ``None`` for anything else (critic, SFT, other policy losses stay verl's)."""
    config = (getattr(loss_function, "keywords", None) or {}).get("config")
    return config if is_rfpp_actor(config) else None


def _counting_responses(original: Callable[..., Any]) -> Callable[..., Any]:
    """``BaseEngine.train_batch`` whose response-mean denominator counts responses only.

    verl divides both loss terms of ``seq-mean-token-mean`` (our policy loss and the k2 loss in
    ``agg_loss``) by ``global_batch_size = ppo_mini_batch_size * rollout.n``, which counts rows
    with no valid token (v1's padding rows, empty or aborted responses): they add 0 to the sum,
    so every response's weight, and the whole step's gradient, shrink by ``N / G``. Here,
    for an ``rfpp`` actor loss only, ``global_batch_size`` becomes ``N``, the number of rows with
    a valid token in this mini-batch over all data-parallel ranks (one scalar all-reduce), which
    makes the accumulated gradient the contract's response mean (docs/contract.md section 5).
    A mini-batch without any response keeps a zero loss (``N`` floored at 1, not 0/0).
    """

    @functools.wraps(original)
    def train_batch(self: Any, data: Any, loss_function: Callable[..., Any]) -> Any:
        if rfpp_actor_config(loss_function) is not None:
            import verl.utils.tensordict_utils as tu
            from verl.utils.device import get_device_id

            count = losses.responses_with_valid_tokens(data["response_mask"]).to(get_device_id())
            if torch.distributed.is_initialized():
                group = self.get_data_parallel_group()
                torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.SUM, group=group)
            responses = max(int(count.item()), 1)
            rows = tu.get_non_tensor_data(data=data, key="global_batch_size", default=None)
            if rows is not None and responses != rows and "response count" not in _logged_once:
                _logged_once.add("response count")
                logger.info(
                    "verl_rfpp: this mini-batch holds %d responses in %s rows (rows without a valid "
                    "token: padding or empty responses); the rfpp actor loss divides by %d, not by "
                    "verl's global_batch_size=%s (docs/contract.md section 5)", responses, rows,
                    responses, rows)
            tu.assign_non_tensor(data, global_batch_size=responses)
        return original(self, data, loss_function)

    return marked(train_batch)

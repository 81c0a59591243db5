"""The ``verl-rfpp`` command line."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence


def _demo(args: argparse.Namespace) -> int:
    """Run both estimators through verl's registry on a generated batch and print the result."""
    import numpy as np
    import torch
    import verl  # noqa: F401  (loads the verl.plugins entry points, ours included)
    from verl.trainer.ppo import core_algos

    from verl_rfpp import plugin

    generator = torch.Generator().manual_seed(args.seed)
    prompts, samples, length = args.prompts, args.samples, args.length
    batch = prompts * samples
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    outcome = torch.randint(0, 2, (batch,), generator=generator).float()
    kl = 0.01 * torch.randn(batch, length, generator=generator) * mask
    rewards = -kl
    rewards[torch.arange(batch), lengths - 1] += outcome
    uids = np.array([f"prompt-{i // samples}" for i in range(batch)], dtype=object)

    print(f"verl {plugin.verl_version()}; batch {prompts} prompts x {samples} samples, "
          f"responses up to {length} tokens")
    for name in plugin.ESTIMATORS:
        function = core_algos.get_adv_estimator_fn(name)
        owner = "verl-rfpp" if plugin.registered_ours(name) else f"NOT verl-rfpp ({function.__module__})"
        advantages, returns = function(
            token_level_rewards=rewards, response_mask=mask, config={"gamma": 1.0}, index=uids
        )
        valid = mask.bool()
        print(f"\n{name}: resolved by verl's registry to {owner}")
        print(f"  raw advantage (returns): mean {returns[valid].mean():+.4f}  std {returns[valid].std(correction=0):.4f}")
        print(f"  advantage:               mean {advantages[valid].mean():+.4f}  std {advantages[valid].std(correction=0):.4f}")
        print(f"  masked positions exactly zero: {bool((advantages[~valid] == 0).all())}")
        if not plugin.registered_ours(name):
            return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verl-rfpp", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run both estimators through verl's registry")
    demo.add_argument("--prompts", type=int, default=4)
    demo.add_argument("--samples", type=int, default=8)
    demo.add_argument("--length", type=int, default=16)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())

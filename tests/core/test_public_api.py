"""The public API (``verl_rfpp.__all__``, docs/contract.md section 9): every name resolves, each
function is called, and one name is one function across the package."""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from omegaconf import OmegaConf

import verl_rfpp
from verl_rfpp.adapter import registries

REWARDS = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
INDEX = ["a", "a", "b", "b"]
PACKAGE = Path(verl_rfpp.__file__).parent


def test_every_public_name_resolves():
    assert "__version__" in verl_rfpp.__all__
    for name in verl_rfpp.__all__:
        assert getattr(verl_rfpp, name) is not None, name


def test_each_public_function_is_called():
    functions = {name for name in verl_rfpp.__all__ if callable(getattr(verl_rfpp, name))
                 and not isinstance(getattr(verl_rfpp, name), type)}
    assert functions == {"compute_reinforce_plus_plus_advantage", "compute_reinforce_plus_plus_baseline_advantage",
                         "discounted_returns", "group_centered_rewards", "masked_global_normalize",
                         "reinforce_plus_plus", "reinforce_plus_plus_baseline"}
    config = OmegaConf.create({"gamma": 1.0})
    advantages, returns = verl_rfpp.compute_reinforce_plus_plus_advantage(
        token_level_rewards=REWARDS, response_mask=MASK, config=config, index=INDEX)
    assert advantages.shape == returns.shape == REWARDS.shape
    advantages, returns = verl_rfpp.compute_reinforce_plus_plus_baseline_advantage(
        token_level_rewards=REWARDS, response_mask=MASK, config=config, index=INDEX, session=None)
    assert advantages.shape == returns.shape == REWARDS.shape
    result = verl_rfpp.reinforce_plus_plus(REWARDS, MASK, config)
    assert isinstance(result, verl_rfpp.EstimatorResult)
    assert isinstance(verl_rfpp.reinforce_plus_plus_baseline(REWARDS, MASK, INDEX), verl_rfpp.EstimatorResult)
    assert verl_rfpp.discounted_returns(REWARDS, MASK, 1.0).shape == REWARDS.shape
    scores, lengths = REWARDS.sum(dim=1).double(), MASK.sum(dim=1)
    assert verl_rfpp.group_centered_rewards(scores, lengths, INDEX).tolist() == [0.25, -0.25, -0.5, 0.5]
    normalized, stats = verl_rfpp.masked_global_normalize(returns.float(), MASK)
    assert normalized.shape == REWARDS.shape and isinstance(stats, verl_rfpp.NormalizationStats)


def test_one_name_one_function():
    """No two functions of the package share a public name (every module of verl_rfpp/, module
    level, read without importing), and verl's registries hold entries of ours that are not the pure
    functions of the public API (a ``GuardedEstimator`` per record)."""
    homes: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append(str(path.relative_to(PACKAGE.parent)))
    assert {name: files for name, files in homes.items() if len(files) > 1} == {}
    public = {getattr(verl_rfpp, name) for name in verl_rfpp.__all__}
    for name, entry in registries.entries().items():
        assert entry not in public and entry.estimator.name == name

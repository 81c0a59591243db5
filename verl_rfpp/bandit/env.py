"""A tabular softmax policy over prompts x answers, its sampler and its on-policy update."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from verl_rfpp import losses

EPS_CLIP = 0.2


class TabularBandit:
    """Prompts with a fixed true quality per answer; a sampled answer's reward is its quality
    plus Gaussian noise of standard deviation ``noise_std`` (a learned reward model's noise)."""

    def __init__(self, quality: torch.Tensor, noise_std: float = 0.0):
        self.quality = quality.to(torch.float64)
        self.noise_std = noise_std

    @property
    def prompts(self) -> int:
        return self.quality.shape[0]

    def rewards(self, prompt_ids: torch.Tensor, answers: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        clean = self.quality[prompt_ids, answers]
        if self.noise_std == 0.0:
            return clean
        return clean + self.noise_std * torch.randn(clean.shape, generator=generator, dtype=torch.float64)

    def expected_quality(self, logits: torch.Tensor) -> torch.Tensor:
        """``sum_a pi(a | prompt) * quality[prompt, a]`` per prompt."""
        return (torch.softmax(logits, dim=-1) * self.quality).sum(dim=-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Policy entropy per prompt, in nats."""
    log_pi = torch.log_softmax(logits, dim=-1)
    return -(log_pi.exp() * log_pi).sum(dim=-1)


def sample_answers(logits: torch.Tensor, prompt_ids: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: the first answer whose cumulative probability exceeds ``u``."""
    cdf = torch.softmax(logits[prompt_ids], dim=-1).cumsum(dim=-1)
    answers = torch.searchsorted(cdf, uniforms[:, None]).squeeze(-1)
    return answers.clamp(max=logits.shape[-1] - 1)


def draw_batch(logits, prompts_per_step, samples_per_prompt, generator):
    """``prompts_per_step`` distinct prompts, each sampled ``samples_per_prompt`` times."""
    chosen = torch.randperm(logits.shape[0], generator=generator)[:prompts_per_step]
    prompt_ids = chosen.repeat_interleave(samples_per_prompt)
    uniforms = torch.rand(prompt_ids.shape, generator=generator, dtype=torch.float64)
    return prompt_ids, sample_answers(logits, prompt_ids, uniforms)


def advantages_from(estimator: Callable[..., Any], rewards: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    """One advantage per sampled answer, from a verl registry estimator (one-token responses)."""
    token_rewards = rewards[:, None].to(torch.float32)
    mask = torch.ones_like(token_rewards)
    uids = np.array([f"prompt-{int(p)}" for p in prompt_ids], dtype=object)
    advantages, _ = estimator(
        token_level_rewards=token_rewards, response_mask=mask, index=uids, config={"gamma": 1.0}
    )
    return advantages[:, 0].to(torch.float64)


def surrogate_gradient(logits, prompt_ids, answers, advantages) -> torch.Tensor:
    """Gradient of the response-mean clipped surrogate (docs/contract.md section 5) at ratio 1."""
    logits = logits.detach().requires_grad_(True)
    log_prob = torch.log_softmax(logits[prompt_ids], dim=-1).gather(1, answers[:, None])
    mask = torch.ones_like(log_prob)
    loss_mat, _ = losses.clipped_surrogate(
        log_prob.detach(), log_prob, advantages[:, None].to(log_prob.dtype), mask, EPS_CLIP, EPS_CLIP
    )
    (gradient,) = torch.autograd.grad(losses.response_mean(loss_mat, mask), logits)
    return gradient


def sgd_step(logits, prompt_ids, answers, advantages, lr) -> torch.Tensor:
    """One on-policy gradient step on the surrogate: ``logits - lr * gradient``."""
    return logits - lr * surrogate_gradient(logits, prompt_ids, answers, advantages)

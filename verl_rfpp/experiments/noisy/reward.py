"""The noisy task's reward function, the module verl loads by its path
(``reward.custom_reward_function.path``; verl does not register such a module in
``sys.modules``, so it defines no dataclass): true quality plus reward-model noise drawn per
sample (``noisy.task``)."""

from __future__ import annotations

import json
import random

from verl_rfpp.experiments.noisy.task import NoisyTaskError, answer_of

_TRUTHS: dict[str, dict] = {}


def noise(seed: int, session: str) -> float:
    """The reward noise of one session: an N(0, 1) draw from a stream seeded by the run seed and the
    session's identity (``verl_rfpp.cpu.patches``: step, prompt index, sample, session), so a
    sample's noise does not depend on the order verl scores the samples in, and every method of one
    seed sees the same noise for the same sample."""
    return random.Random(f"noisy-reward:{seed}:{session}").gauss(0.0, 1.0)


def noisy_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl custom reward function: the answer's true quality plus ``noise_std * noise(seed, session)``,
    the session read from ``extra_info`` (the CPU backend puts it there)."""
    from verl_rfpp.cpu.patches import SESSION_KEY

    truth = _TRUTHS.get(ground_truth)
    if truth is None:
        truth = _TRUTHS[ground_truth] = json.loads(ground_truth)
    answer = answer_of(solution_str)
    if answer not in truth["quality"]:
        raise NoisyTaskError(f"noisy_score: answer {answer!r} (response {solution_str!r}) is not one of the "
                             f"task's answers {sorted(truth['quality'])}; the tokenizer and the data disagree")
    session = (extra_info or {}).get(SESSION_KEY)
    if session is None:
        raise NoisyTaskError(f"noisy_score: extra_info has no {SESSION_KEY!r} (got keys {sorted(extra_info or {})}); "
                             "the noisy task runs on the CPU backend, which puts each sample's session there")
    return truth["quality"][answer] + truth["noise_std"] * noise(truth["seed"], session)

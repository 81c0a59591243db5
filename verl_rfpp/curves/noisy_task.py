"""The noisy-reward task of ``verl-rfpp curves --task noisy``: a contextual bandit in verl's real
trainer, where the claim "per-group standardization presents reward-model noise as signal on
prompts with nothing to learn" can show.

Prompts ``iK`` (informative) and ``fK`` (flat), K = 0..PROMPTS_PER_KIND-1; the response is
one token, the answer. Every answer word ``a`` of prompt ``p`` has a true quality ``q_p(a)``:
N(0, 1) draws (seeded, fixed for the task) on informative prompts, 0 for every answer on flat
ones. The observed reward is ``q_p(a) + noise_std * N(0, 1)``, fresh noise per sample, like a
learned reward model's. The model is the CPU backend's tiny random Qwen2 with a word-level
vocabulary of VOCAB tokens (every token is an answer; special tokens decode to the empty answer).

``probe(batch)`` runs in verl's driver every step (``patches.PROBE_ENV``) and adds exact
functionals of the policy after the step's update, read from the rollout server's weights, to the
step's metrics, so they reach verl's tensorboard logger with everything else."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Optional

from verl_rfpp.errors import RfppError

DATA_SOURCE = "rfpp_noisy"
PROMPTS_PER_KIND = 8
ANSWERS = tuple("ABCDEFGHIJ")
# one character per word: transformers loads the tokenizer as Qwen2's byte-level BPE, which (with
# no merges) encodes single characters only
KINDS = {"i": "informative", "f": "flat"}
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
NEWLINE = "\n"  # one token: verl's Qwen chat-boundary builder requires it
TASK_ENV = "VERL_RFPP_NOISY_TASK"  # path of task.json, read by the probe in verl's driver
PREFIX = "noisy/"
METRICS = tuple(PREFIX + name for name in (
    "informative_true_reward", "informative_entropy", "flat_entropy", "flat_kl_from_start",
    "informative_kl_from_start", "flat_adv_rms", "informative_adv_rms", "noise_std_sampled", "probe_policy_step"))


class NoisyTaskError(RfppError):
    """The noisy task's data or probe met something it was not built for."""


def _words() -> list[str]:
    return [*SPECIALS, NEWLINE, *KINDS, *(str(k) for k in range(PROMPTS_PER_KIND)), *ANSWERS]


def build_tokenizer(directory: Path) -> None:
    """A word-level tokenizer over the task's words (specials, newline, ``i``/``f``, digits, A-J)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(_words())}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIALS[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_tokens([AddedToken(NEWLINE, normalized=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=SPECIALS[0], pad_token=SPECIALS[0],
                                   bos_token=None, unk_token=SPECIALS[0],
                                   additional_special_tokens=list(SPECIALS[1:]))
    fast.chat_template = (
        "{% for message in messages %}<|im_start|>{{ message['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>{% endif %}"
    )
    fast.save_pretrained(directory)


def answer_of(text: str) -> str:
    """The answer word of a decoded response: its first word, or ``""`` (a special token)."""
    words = text.split()
    return words[0] if words else ""


def prompts() -> list[tuple[str, str]]:
    """``[(text, kind)]``: the informative prompts, then the flat ones."""
    return [(f"{word}{k}", kind) for word, kind in KINDS.items() for k in range(PROMPTS_PER_KIND)]


def qualities(task_seed: int = 0) -> dict[str, dict[str, float]]:
    """``{prompt: {answer: true quality}}``: N(0, 1) on informative prompts, 0 on flat ones."""
    rng = random.Random(task_seed)
    answers = sorted({answer_of("" if word in SPECIALS else word) for word in _words()})
    return {text: {a: (rng.gauss(0.0, 1.0) if kind == "informative" else 0.0) for a in answers}
            for text, kind in prompts()}


def build_assets(root: Path, task_seed: int = 0) -> dict:
    """Tokenizer, model (``assets.build_model``, seed 0) and ``task.json`` under ``root``; reuses a
    finished build. task.json: the prompts' token ids as verl's chat template makes them, their
    kind, the true quality of every token id as an answer, and the initial policy's answer
    distribution per prompt (the probe's KL reference)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_rfpp.cpu import assets

    root = Path(root)
    spec_path = root / "task.json"
    if spec_path.exists():
        return json.loads(spec_path.read_text())
    model_dir = root / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    # the model's config first: with it, transformers loads the tokenizer as a Qwen2 one, as verl will
    assets.build_model(model_dir, vocab_size=len(_words()))
    build_tokenizer(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    table = qualities(task_seed)
    answers = [answer_of(tokenizer.decode([token], skip_special_tokens=True)) for token in range(len(tokenizer))]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    import torch

    rows = []
    for text, kind in prompts():
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        if tokenizer.convert_ids_to_tokens(ids) != ["<|im_start|>", text[:1], text[1:], "<|im_end|>", "<|im_start|>"]:
            raise NoisyTaskError(f"the tokenizer splits the prompt {text!r} into "
                                 f"{tokenizer.convert_ids_to_tokens(ids)}; "
                                 "expected <|im_start|>, the word, the digit, <|im_end|>, <|im_start|>")
        with torch.no_grad():
            start = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].double(), dim=-1).tolist()
        rows.append({"text": text, "kind": kind, "ids": ids, "quality": [table[text][a] for a in answers],
                     "start": start})
    spec = {"model": str(model_dir), "task_seed": task_seed, "answers": answers, "prompts": rows,
            "parameters": sum(p.numel() for p in model.parameters())}
    spec_path.write_text(json.dumps(spec))
    return spec


def build_data(directory: Path, seed: int, steps: int, noise_std: float, task_seed: int = 0,
               batch_prompts: int = 4) -> dict[str, Path]:
    """train/test parquet for one run seed: ``steps`` batches of ``batch_prompts`` rows in order (to
    be read with ``data.shuffle=False``), each half informative, half flat, drawn by ``seed``."""
    import pandas as pd

    if batch_prompts % 2:
        raise NoisyTaskError(f"batch_prompts must be even (half informative, half flat), got {batch_prompts}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    table = qualities(task_seed)
    kind_of = dict(prompts())
    by_kind = {kind: [text for text, k in prompts() if k == kind] for kind in KINDS.values()}
    rng = random.Random(1_000 + seed)

    def row(text: str, index: int, split: str) -> dict:
        truth = {"quality": table[text], "noise_std": noise_std, "seed": seed}
        return {"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": text}], "ability": "noisy",
                "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, sort_keys=True)},
                "extra_info": {"split": split, "index": index, "kind": kind_of[text]}}

    order = []
    for _ in range(steps):
        block = [*rng.sample(by_kind["informative"], batch_prompts // 2),
                 *rng.sample(by_kind["flat"], batch_prompts // 2)]
        rng.shuffle(block)
        order += block
    train = [row(text, index, "train") for index, text in enumerate(order)]
    test = [row(text, index, "test") for index, (text, _) in enumerate(prompts())]
    paths = {"train": directory / "train.parquet", "test": directory / "test.parquet"}
    pd.DataFrame(train).to_parquet(paths["train"])
    pd.DataFrame(test).to_parquet(paths["test"])
    return paths


_TRUTHS: dict[str, dict] = {}


def noise(seed: int, session: str) -> float:
    """The reward noise of one session: an N(0, 1) draw from a stream seeded by the run seed and the
    session's identity (``verl_rfpp.cpu.patches``: step, prompt index, sample, session), so a
    sample's noise does not depend on the order verl scores the samples in, and every method of one
    seed sees the same noise for the same sample."""
    return random.Random(f"noisy-reward:{seed}:{session}").gauss(0.0, 1.0)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl custom reward function: the answer's true quality plus ``noise_std * noise(seed, session)``,
    the session read from ``extra_info`` (the CPU backend puts it there)."""
    from verl_rfpp.cpu.patches import SESSION_KEY

    truth = _TRUTHS.get(ground_truth)
    if truth is None:
        truth = _TRUTHS[ground_truth] = json.loads(ground_truth)
    answer = answer_of(solution_str)
    if answer not in truth["quality"]:
        raise NoisyTaskError(f"compute_score: answer {answer!r} (response {solution_str!r}) is not one of the "
                             f"task's answers {sorted(truth['quality'])}; the tokenizer and the data disagree")
    session = (extra_info or {}).get(SESSION_KEY)
    if session is None:
        raise NoisyTaskError(f"compute_score: extra_info has no {SESSION_KEY!r} (got keys {sorted(extra_info or {})}); "
                             "the noisy task runs on the CPU backend, which puts each sample's session there")
    return truth["quality"][answer] + truth["noise_std"] * noise(truth["seed"], session)


def _entropy(probs: list[float]) -> float:
    return -sum(p * math.log(p) for p in probs if p > 0)


def _kl(probs: list[float], start: list[float]) -> float:
    return sum(p * (math.log(p) - math.log(q)) for p, q in zip(probs, start, strict=True) if p > 0)


def policy_metrics(spec: dict, probs: list[list[float]]) -> dict[str, float]:
    """Exact functionals of the answer distributions ``probs`` (one per prompt of ``spec``): mean
    over informative prompts of the expected true quality, mean entropy (nats) per kind, mean
    KL(pi || pi_start) per kind."""
    groups: dict[str, list[dict]] = {"informative": [], "flat": []}
    for row, p in zip(spec["prompts"], probs, strict=True):
        groups[row["kind"]].append({"quality": sum(pi * q for pi, q in zip(p, row["quality"], strict=True)),
                                    "entropy": _entropy(p), "kl": _kl(p, row["start"])})
    mean = lambda kind, key: sum(r[key] for r in groups[kind]) / len(groups[kind])  # noqa: E731
    return {PREFIX + "informative_true_reward": mean("informative", "quality"),
            PREFIX + "informative_entropy": mean("informative", "entropy"),
            PREFIX + "flat_entropy": mean("flat", "entropy"),
            PREFIX + "informative_kl_from_start": mean("informative", "kl"),
            PREFIX + "flat_kl_from_start": mean("flat", "kl")}


def batch_metrics(spec: dict, prompt_ids, response_ids, response_mask, advantages, scores) -> dict[str, float]:
    """From the step's batch (padded tensors; pad id 0): the root mean square of the advantages over
    the valid tokens of flat and of informative rows, and the std of (observed score - true quality
    of the sampled answer), the reward noise the trainer saw."""
    import torch

    index = {tuple(row["ids"]): row for row in spec["prompts"]}
    squares: dict[str, list[float]] = {"informative": [], "flat": []}
    noise = []
    for i in range(prompt_ids.shape[0]):
        key = tuple(int(t) for t in prompt_ids[i].tolist() if int(t) != 0)
        if key not in index:
            raise NoisyTaskError(f"probe: batch row {i} has prompt ids {list(key)}, not a prompt of task.json")
        row = index[key]
        valid = response_mask[i].bool()
        squares[row["kind"]] += advantages[i][valid].double().square().tolist()
        noise.append(float(scores[i][valid].double().sum()) - row["quality"][int(response_ids[i, 0])])
    rms = lambda v: math.sqrt(sum(v) / len(v)) if v else float("nan")  # noqa: E731
    noise_t = torch.tensor(noise, dtype=torch.float64)
    return {PREFIX + "flat_adv_rms": rms(squares["flat"]), PREFIX + "informative_adv_rms": rms(squares["informative"]),
            PREFIX + "noise_std_sampled": float(noise_t.std(correction=1)) if len(noise) > 1 else float("nan")}


_SPEC: Optional[dict] = None


def probe(batch) -> dict[str, float]:
    """verl's driver, every step (``patches.PROBE_ENV``): ``policy_metrics`` of the rollout server's
    weights (the policy after this step's update; ``probe_policy_step`` says which step's weights
    they were) and ``batch_metrics`` of the step's batch."""
    import ray

    from verl_rfpp.cpu import rollout

    global _SPEC
    if _SPEC is None:
        _SPEC = json.loads(Path(os.environ[TASK_ENV]).read_text())
    server = ray.get_actor(rollout.server_name(0))
    step, probs = ray.get(server.next_token_probs.remote([row["ids"] for row in _SPEC["prompts"]]))
    data = batch.batch
    return {**policy_metrics(_SPEC, probs),
            **batch_metrics(_SPEC, data["prompts"], data["responses"], data["response_mask"], data["advantages"],
                            data["token_level_scores"]),
            PREFIX + "probe_policy_step": float(step)}

"""The noisy-reward task of ``verl-rfpp curves --task noisy``: a contextual bandit in verl's real
trainer, where the claim "per-group standardization presents reward-model noise as signal on
prompts with nothing to learn" can show.

Informative and flat prompts; the response is one token, the answer. Every answer word ``a`` of
prompt ``p`` has a true quality ``q_p(a)``: N(0, 1) draws (seeded, fixed for the task) on
informative prompts, 0 for every answer on flat ones. The observed reward is
``q_p(a) + noise_std * noise(seed, session)``, fresh per sample, like a learned reward model's
(``noisy.reward``).
The model is a tiny random Qwen2 with a word-level vocabulary (every token is an answer; special
tokens and the newline decode to the empty answer). Two ``Design`` records say how the model sees
the prompts and how many prompts and samples a step trains on: ``SEPARATE`` (the default: each
prompt one token of its own, the last of the templated prompt, and separate input and output
embeddings) and ``SHARED`` (the first version: two shared tokens per prompt read through
attention, tied embeddings).

``probe(batch)`` runs in verl's driver every step (``patches.PROBE_ENV``) and adds exact
functionals of the policy after the step's update, read from the rollout server's weights, to the
step's metrics, so they reach verl's tensorboard logger with everything else. Two of them say
which channel moved the flat prompts (``channel_metrics``): their KL from the start with their own
input-embedding rows reset to the start, and with everything else reset, their rows kept."""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from verl_rfpp.errors import RfppError

DATA_SOURCE = "rfpp_noisy"
KINDS = ("informative", "flat")  # the order of ``Design.prompts``
ANSWERS = tuple("ABCDEFGHIJ")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
NEWLINE = "\n"  # one token: verl's Qwen chat-boundary builder requires it
TASK_ENV = "VERL_RFPP_NOISY_TASK"  # path of task.json, read by the probe in verl's driver
PREFIX = "noisy/"
METRICS = tuple(PREFIX + name for name in (
    "informative_true_reward", "informative_entropy", "flat_entropy", "flat_kl_from_start",
    "informative_kl_from_start", "flat_informative_tv", "flat_adv_rms", "informative_adv_rms", "noise_std_sampled",
    "probe_policy_step", "flat_kl_rows_reset", "flat_kl_shared_reset"))


OPTIMIZERS = {  # --optimizer: what each changes in verl's actor optimizer (verl builds it from torch.optim by name)
    "adamw": (),
    "sgd": ("actor_rollout_ref.actor.optim.optimizer=SGD", "actor_rollout_ref.actor.optim.weight_decay=0"),
}
OPTIMIZER_LABEL = {"adamw": "AdamW", "sgd": "plain SGD"}


class NoisyTaskError(RfppError):
    """The noisy task's data or probe met something it was not built for."""


@dataclass(frozen=True)
class Design:
    """How the model sees the prompts and what a step trains on (docs/curves/noisy/report.md
    argues each). ``prompts``: the informative and the flat prompts' texts; a one-character text
    is one token of its own (transformers loads the tokenizer as Qwen2's byte-level BPE, which with
    no merges encodes single characters only), a two-character one is a kind token and a digit.
    ``lr``: AdamW's learning rate, ``sgd_lr``: plain SGD's (None: not chosen for this design), each
    chosen noise-free by ``benchmarks/noisy_design.py`` before any noisy run."""

    key: str
    prompts: tuple[tuple[str, ...], tuple[str, ...]]
    tied_embeddings: bool
    prompts_per_step: int
    samples: int
    lr: float
    methods: tuple[str, ...]
    control_methods: tuple[str, ...]
    sgd_lr: Optional[float] = None

    def lr_of(self, optimizer: str) -> Optional[float]:
        """The design's learning rate for ``optimizer`` (a key of ``OPTIMIZERS``)."""
        return self.sgd_lr if optimizer == "sgd" else self.lr

    def __post_init__(self) -> None:
        if self.prompts_per_step % 2 or not 0 < self.prompts_per_step // 2 <= min(map(len, self.prompts)):
            raise NoisyTaskError(f"design {self.key}: prompts_per_step {self.prompts_per_step} must be even "
                                 f"(half informative, half flat) and at most twice {min(map(len, self.prompts))}")

    @property
    def one_token(self) -> bool:
        return all(len(text) == 1 for kind in self.prompts for text in kind)


SEPARATE = Design("separate", (tuple("abcdefgh"), tuple("stuvwxyz")), tied_embeddings=False, prompts_per_step=16,
                  samples=16, lr=5e-3, methods=("verl_grpo", "ours_baseline", "verl_baseline"),
                  control_methods=("verl_grpo", "ours_baseline", "verl_baseline"), sgd_lr=0.15)
SHARED = Design("shared", (tuple(f"i{k}" for k in range(8)), tuple(f"f{k}" for k in range(8))), tied_embeddings=True,
                prompts_per_step=4, samples=4, lr=1e-2,
                methods=("verl_grpo", "ours_baseline", "ours_rfpp", "verl_baseline"),
                control_methods=("verl_grpo", "ours_baseline"))
DESIGNS = {design.key: design for design in (SEPARATE, SHARED)}


def _words(design: Design) -> list[str]:
    if design.one_token:
        prompt_words = [text for kind in design.prompts for text in kind]
    else:
        prompt_words = [*dict.fromkeys(text[0] for kind in design.prompts for text in kind),
                        *dict.fromkeys(text[1] for kind in design.prompts for text in kind)]
    return [*SPECIALS, NEWLINE, *prompt_words, *ANSWERS]


def _expected_tokens(design: Design, text: str) -> list[str]:
    """The tokens verl's chat template makes of prompt ``text``: its own token last (``one_token``),
    or the kind token and the digit between the chat markers."""
    if design.one_token:
        return ["<|im_start|>", text]
    return ["<|im_start|>", text[0], text[1], "<|im_end|>", "<|im_start|>"]


def build_noisy_tokenizer(directory: Path, design: Design) -> None:
    """A word-level tokenizer over the task's words (specials, newline, the prompts' tokens, A-J),
    with a chat template that makes ``_expected_tokens``."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(_words(design))}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIALS[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_tokens([AddedToken(NEWLINE, normalized=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=SPECIALS[0], pad_token=SPECIALS[0],
                                   bos_token=None, unk_token=SPECIALS[0],
                                   additional_special_tokens=list(SPECIALS[1:]))
    if design.one_token:
        fast.chat_template = "{% for message in messages %}<|im_start|>{{ message['content'] }}{% endfor %}"
    else:
        fast.chat_template = (
            "{% for message in messages %}<|im_start|>{{ message['content'] }}<|im_end|>{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>{% endif %}"
        )
    fast.save_pretrained(directory)


def answer_of(text: str) -> str:
    """The answer word of a decoded response: its first word, or ``""`` (a special token)."""
    words = text.split()
    return words[0] if words else ""


def prompts(design: Design) -> list[tuple[str, str]]:
    """``[(text, kind)]``: the informative prompts, then the flat ones."""
    return [(text, kind) for kind, texts in zip(KINDS, design.prompts, strict=True) for text in texts]


def qualities(design: Design, task_seed: int = 0) -> dict[str, dict[str, float]]:
    """``{prompt: {answer: true quality}}``: N(0, 1) on informative prompts, 0 on flat ones."""
    rng = random.Random(task_seed)
    answers = sorted({answer_of("" if word in SPECIALS else word) for word in _words(design)})
    return {text: {a: (rng.gauss(0.0, 1.0) if kind == "informative" else 0.0) for a in answers}
            for text, kind in prompts(design)}


def build_assets(root: Path, design: Design, task_seed: int = 0) -> dict:
    """Tokenizer, model (``assets.build_model``, seed 0) and ``task.json`` under ``root``; reuses a
    finished build. task.json: the design's key, the prompts' token ids as verl's chat template
    makes them, their kind, the true quality of every token id as an answer, and the initial
    policy's answer distribution per prompt (the probe's KL reference)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_rfpp.cpu import assets

    root = Path(root)
    spec_path = root / "task.json"
    if spec_path.exists():
        return json.loads(spec_path.read_text())
    model_dir = root / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    # the model's config first: with it, transformers loads the tokenizer as a Qwen2 one, as verl will
    assets.build_model(model_dir, vocab_size=len(_words(design)), tie_word_embeddings=design.tied_embeddings)
    build_noisy_tokenizer(model_dir, design)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    table = qualities(design, task_seed)
    answers = [answer_of(tokenizer.decode([token], skip_special_tokens=True)) for token in range(len(tokenizer))]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    rows = []
    for text, kind in prompts(design):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        if tokenizer.convert_ids_to_tokens(ids) != _expected_tokens(design, text):
            raise NoisyTaskError(f"the tokenizer splits the prompt {text!r} into "
                                 f"{tokenizer.convert_ids_to_tokens(ids)}; expected {_expected_tokens(design, text)}")
        rows.append({"text": text, "kind": kind, "ids": ids, "quality": [table[text][a] for a in answers]})
    for row, start in zip(rows, answer_distributions(model, [row["ids"] for row in rows]), strict=True):
        row["start"] = start
    spec = {"design": design.key, "model": str(model_dir), "task_seed": task_seed, "answers": answers,
            "prompts": rows, "parameters": sum(p.numel() for p in model.parameters())}
    spec_path.write_text(json.dumps(spec))
    return spec


def answer_distributions(model, prompt_ids: list[list[int]]) -> list[list[float]]:
    """pi(. | prompt) of a one-token answer at temperature 1 for each prompt's token ids: the
    softmax of the model's next-token logits, in float64."""
    import torch

    with torch.no_grad():
        return [torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].double(), dim=-1).tolist()
                for ids in prompt_ids]


def build_data(directory: Path, design: Design, seed: int, steps: int, noise_std: float,
               task_seed: int = 0) -> dict[str, Path]:
    """train/test parquet for one run seed: ``steps`` batches of ``design.prompts_per_step`` rows in
    order (to be read with ``data.shuffle=False``), each half informative, half flat, drawn by
    ``seed``."""
    import pandas as pd

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    table = qualities(design, task_seed)
    kind_of = dict(prompts(design))
    by_kind = {kind: [text for text, k in prompts(design) if k == kind] for kind in KINDS}
    half = design.prompts_per_step // 2
    rng = random.Random(1_000 + seed)

    def row(text: str, index: int, split: str) -> dict:
        truth = {"quality": table[text], "noise_std": noise_std, "seed": seed}
        return {"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": text}], "ability": "noisy",
                "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, sort_keys=True)},
                "extra_info": {"split": split, "index": index, "kind": kind_of[text]}}

    order = []
    for _ in range(steps):
        block = [*rng.sample(by_kind["informative"], half), *rng.sample(by_kind["flat"], half)]
        rng.shuffle(block)
        order += block
    train = [row(text, index, "train") for index, text in enumerate(order)]
    test = [row(text, index, "test") for index, (text, _) in enumerate(prompts(design))]
    paths = {"train": directory / "train.parquet", "test": directory / "test.parquet"}
    pd.DataFrame(train).to_parquet(paths["train"])
    pd.DataFrame(test).to_parquet(paths["test"])
    return paths


def _entropy(probs: list[float]) -> float:
    return -sum(p * math.log(p) for p in probs if p > 0)


def _kl(probs: list[float], start: list[float]) -> float:
    return sum(p * (math.log(p) - math.log(q)) for p, q in zip(probs, start, strict=True) if p > 0)


def _tv(p: list[float], q: list[float]) -> float:
    return 0.5 * sum(abs(a - b) for a, b in zip(p, q, strict=True))


def policy_metrics(spec: dict, probs: list[list[float]]) -> dict[str, float]:
    """Exact functionals of the answer distributions ``probs`` (one per prompt of ``spec``): mean
    over informative prompts of the expected true quality, mean entropy (nats) per kind, mean
    KL(pi || pi_start) per kind, and the mean total variation distance between a flat and an
    informative prompt's distributions, over every such pair (0 for a prompt-blind policy)."""
    groups: dict[str, list[dict]] = {"informative": [], "flat": []}
    for row, p in zip(spec["prompts"], probs, strict=True):
        groups[row["kind"]].append({"quality": sum(pi * q for pi, q in zip(p, row["quality"], strict=True)),
                                    "entropy": _entropy(p), "kl": _kl(p, row["start"]), "probs": p})
    mean = lambda kind, key: sum(r[key] for r in groups[kind]) / len(groups[kind])  # noqa: E731
    pairs = [_tv(f["probs"], i["probs"]) for f in groups["flat"] for i in groups["informative"]]
    return {PREFIX + "informative_true_reward": mean("informative", "quality"),
            PREFIX + "informative_entropy": mean("informative", "entropy"),
            PREFIX + "flat_entropy": mean("flat", "entropy"),
            PREFIX + "informative_kl_from_start": mean("informative", "kl"),
            PREFIX + "flat_kl_from_start": mean("flat", "kl"),
            PREFIX + "flat_informative_tv": sum(pairs) / len(pairs)}


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


def own_rows(spec: dict, kind: str = "flat") -> list[int]:
    """The input-embedding rows only ``kind``'s prompts read: token ids of its prompts that no prompt
    of another kind has (design ``separate``: each flat prompt's own token)."""
    others = {t for row in spec["prompts"] if row["kind"] != kind for t in row["ids"]}
    return sorted({t for row in spec["prompts"] if row["kind"] == kind for t in row["ids"]} - others)


def channel_metrics(spec: dict, rows_reset: list[list[float]], shared_reset: list[list[float]]) -> dict[str, float]:
    """Mean KL(pi || pi_start) over the flat prompts of two mixed policies (one distribution per
    prompt of ``spec``): ``rows_reset``, the trained model with the flat prompts' own rows
    (``own_rows``) at the start, so what the shared layers and the output layer moved; and
    ``shared_reset``, the start model with those rows trained, so what the rows alone moved."""
    flat = [i for i, row in enumerate(spec["prompts"]) if row["kind"] == "flat"]
    kl = lambda probs: sum(_kl(probs[i], spec["prompts"][i]["start"]) for i in flat) / len(flat)  # noqa: E731
    return {PREFIX + "flat_kl_rows_reset": kl(rows_reset), PREFIX + "flat_kl_shared_reset": kl(shared_reset)}


_SPEC: Optional[dict] = None


def probe(batch) -> dict[str, float]:
    """verl's driver, every step (``patches.PROBE_ENV``): ``policy_metrics`` and ``channel_metrics``
    of the rollout server's weights (the policy after this step's update; ``probe_policy_step`` says
    which step's weights they were) and ``batch_metrics`` of the step's batch."""
    import ray

    from verl_rfpp.cpu import rollout

    global _SPEC
    if _SPEC is None:
        _SPEC = json.loads(Path(os.environ[TASK_ENV]).read_text())
    server = ray.get_actor(rollout.server_name(0))
    ids = [row["ids"] for row in _SPEC["prompts"]]
    step, probs = ray.get(server.next_token_probs.remote(ids))
    _, mixed = ray.get(server.counterfactual_probs.remote(ids, own_rows(_SPEC)))
    data = batch.batch
    return {**policy_metrics(_SPEC, probs), **channel_metrics(_SPEC, mixed["rows_reset"], mixed["shared_reset"]),
            **batch_metrics(_SPEC, data["prompts"], data["responses"], data["response_mask"], data["advantages"],
                            data["token_level_scores"]),
            PREFIX + "probe_policy_step": float(step)}

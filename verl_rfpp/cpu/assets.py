"""Tiny local assets for a CPU run of verl: a random Qwen2 model, a byte-level BPE tokenizer trained
here, and a parquet prompt set in verl's RLHF format with a verifiable reward. No downloads."""

from __future__ import annotations

import json
import random
from pathlib import Path

DATA_SOURCE = "rfpp_copy_digit"
DIGITS = "0123456789"


def _prompt(digit: str) -> str:
    return f"repeat {digit}:"


def build_tokenizer(directory: Path) -> None:
    """A byte-level BPE tokenizer (about 300 tokens) trained on the prompt language."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [f"{_prompt(d)} {d}{d}{d}" for d in DIGITS] * 20 + ["the answer is " + " ".join(DIGITS)] * 5
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        bos_token=None, unk_token=None,
    )
    fast.chat_template = (
        "{% for message in messages %}<|im_start|>{{ message['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>{% endif %}"
    )
    fast.save_pretrained(directory)


def build_model(directory: Path, vocab_size: int, seed: int = 0, tie_word_embeddings: bool = True) -> None:
    """A random Qwen2 causal LM: hidden 32, 2 layers (about 40K parameters), fp32; the output
    layer is the input embedding unless ``tie_word_embeddings`` is False."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=tie_word_embeddings, torch_dtype="float32", bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )
    Qwen2ForCausalLM(config).save_pretrained(directory)


def build_dataset(directory: Path, prompts: int = 64, seed: int = 0) -> None:
    """Prompts ``repeat D:`` in verl's RLHF format, scored by ``compute_score``."""
    import pandas as pd

    rng = random.Random(seed)
    for split, count in (("train", prompts), ("test", 16)):
        rows = []
        for index in range(count):
            digit = rng.choice(DIGITS)
            rows.append({
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": _prompt(digit)}],
                "ability": "copy",
                "reward_model": {"style": "rule", "ground_truth": digit},
                "extra_info": {"split": split, "index": index},
            })
        pd.DataFrame(rows).to_parquet(directory / f"{split}.parquet")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl custom reward function, dense enough for a random 28K-parameter model to climb:
    the share of the response's non-space characters that are digits, plus 1 when the first of
    them is the prompt's digit."""
    text = "".join(solution_str.split())
    if not text:
        return 0.0
    share = sum(ch.isdigit() for ch in text) / len(text)
    return share + (1.0 if text[0] == str(ground_truth) else 0.0)


def build_all(root: Path) -> dict[str, Path]:
    """Model, tokenizer and data under ``root``; returns their paths. Reuses a finished build."""
    root = Path(root)
    model, data = root / "model", root / "data"
    marker = root / "assets.json"
    if marker.exists():
        return {key: Path(value) for key, value in json.loads(marker.read_text()).items()}
    model.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    build_tokenizer(model)
    from transformers import AutoTokenizer

    build_model(model, vocab_size=len(AutoTokenizer.from_pretrained(model)))
    build_dataset(data)
    paths = {"model": model, "train": data / "train.parquet", "test": data / "test.parquet"}
    marker.write_text(json.dumps({key: str(value) for key, value in paths.items()}))
    return paths

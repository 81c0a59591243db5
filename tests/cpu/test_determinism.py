"""Same seed, same run; a resumed run equals an uninterrupted one (issue 31, docs/cpu-backend.md
"Same seed, same run"): the pieces, in-process: each request's sampling stream
(``rollout.request_seed``) whatever the order requests come in, a session's identity as the
request id, the estimators' bits, the weights digest, the split of verl's metrics file. verl's v1
trainer runs (1 rank and 2 ranks, resumed and not) are tests/e2e/test_determinism_runs.py."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_rfpp.cli import main as cli
from verl_rfpp.cpu import assets, checkpoints, configuration, rollout, run_metrics

ESTIMATOR = "reinforce_plus_plus_baseline"


# --- the rollout server's sampling: one stream per request -------------------------------------------

@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return Path(assets.build_all(tmp_path_factory.mktemp("determinism") / "assets")["model"])


@pytest.fixture(scope="module")
def reference_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="sdpa").eval()


def _server(model_dir: Path, seed: int = 0) -> rollout.HFRolloutServer:
    return rollout.HFRolloutServer(str(model_dir), prompt_length=16, response_length=4, seed=seed)


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 4}
PROMPTS = [[5, 6, 7], [5, 6, 7], [8, 9], [10, 11, 12, 13]]  # rows 0 and 1: one prompt, two samples


def _answer(server, requests) -> dict[str, list[int]]:
    """``{request id: tokens}`` of ``(request id, prompt)`` pairs sent one after another."""
    async def send():
        return {rid: (await server.generate(rid, prompt, dict(SAMPLING))).token_ids for rid, prompt in requests}
    return asyncio.run(send())


def test_a_request_samples_the_same_tokens_whatever_the_order_of_the_others(model_dir):
    """The shared stream made a request's tokens depend on the requests before it; now they depend
    on the seed and the request's id only (a session's identity: ``train-<step>-<index>-<n>-<session>``)."""
    requests = [(f"det-{row}", prompt) for row, prompt in enumerate(PROMPTS)]
    server = _server(model_dir)
    forward = _answer(server, requests)
    torch.manual_seed(123)  # whatever else draws from torch's default stream in between
    torch.rand(7)
    backward = _answer(_server(model_dir), requests[::-1])
    assert forward == backward
    assert forward["det-0"] != forward["det-1"]  # two samples of one prompt: two streams
    assert _answer(_server(model_dir, seed=1), requests) != forward  # another seed, other answers


def test_a_session_s_turns_and_the_next_step_draw_new_streams(model_dir):
    """A multi-turn session reuses its request id: its turns are told apart by their order within
    the session; new weights (the next step) give every request a fresh stream."""
    server = _server(model_dir)
    first, second = (_answer(server, [("det-0", PROMPTS[3])])["det-0"] for _ in range(2))
    assert server.turns == {"det-0": 2}
    again = _server(model_dir)
    assert [_answer(again, [("det-0", PROMPTS[3])])["det-0"] for _ in range(2)] == [first, second]
    seeds = {rollout.request_seed(0, steps, "det-0", turn) for steps in (0, 1) for turn in (0, 1)}
    assert len(seeds) == 4
    server.load_weights(dict(server.model.state_dict()), global_steps=1)
    assert server.turns == {}


@settings(max_examples=8, deadline=None)
@given(temperature=st.sampled_from([0.0, 0.5, 1.0, 1.7]), top_p=st.sampled_from([1.0, 0.9, 0.3]),
       top_k=st.sampled_from([-1, 1, 3, 50]), row=st.integers(0, 10**6))
def test_a_request_samples_as_transformers_does_from_its_own_seeded_stream(model_dir, reference_model, temperature,
                                                                           top_p, top_k, row):
    """The tokens' distribution is transformers' sampling with verl's temperature, top_p and top_k,
    as before: a request's answer is ``generate``'s from torch's stream seeded with its
    ``request_seed`` (greedy at temperature 0; top_k -1 means off)."""
    server, rid = _server(model_dir, seed=3), f"train-1-{row}-0-2"
    params = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "max_tokens": 4}
    tokens = asyncio.run(server.generate(rid, PROMPTS[3], dict(params))).token_ids
    eos = reference_model.config.eos_token_id
    sampling = {"do_sample": False} if temperature == 0 else {
        "do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": max(top_k, 0)}
    torch.manual_seed(rollout.request_seed(3, 0, rid, 0))
    with torch.no_grad():
        out = reference_model.generate(input_ids=torch.tensor([PROMPTS[3]]), max_new_tokens=4, eos_token_id=eos,
                                          pad_token_id=eos, **sampling)
    expected = out[0, len(PROMPTS[3]):].tolist()
    assert tokens == (expected[: expected.index(eos) + 1] if eos in expected else expected)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31), steps=st.integers(0, 10**6), row=st.integers(0, 10**6), turn=st.integers(0, 8))
def test_request_seed_is_a_function_of_the_identity_only(seed, steps, row, turn):
    value = rollout.request_seed(seed, steps, f"det-{row}", turn)
    assert value == rollout.request_seed(seed, steps, f"det-{row}", turn)
    assert 0 <= value < 2**63
    assert value != rollout.request_seed(seed + 1, steps, f"det-{row}", turn)
    assert value != rollout.request_seed(seed, steps, f"det-{row + 1}", turn)


def test_a_session_s_identity_reaches_the_hf_cpu_server_as_its_request_id():
    """Where verl starts a session (``AgentLoopWorker._run_agent_loop``) its identity is set for
    the session's task; verl's client then names the hf_cpu server's request after it, and leaves
    other rollouts' ids alone (``patches``)."""
    from types import SimpleNamespace

    from verl_rfpp.cpu import patches

    def client(name):
        return SimpleNamespace(config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(
            rollout=SimpleNamespace(name=name))))

    request_id = patches._session_request_ids(lambda self, request_id: f"verl:{request_id}")

    async def session(self, sampling_params, trajectory, **kwargs):
        return request_id(client("hf_cpu"), "det-0"), request_id(client("vllm"), "det-0")

    run = patches._identified_sessions(session)
    trajectory = {"step": torch.tensor(3), "sample_index": 17, "rollout_n": 0, "validate": False}
    assert asyncio.run(run(None, {}, trajectory, agent_name="x", session_id=2)) == ("train-3-17-0-2", "verl:det-0")
    assert asyncio.run(run(None, {}, {**trajectory, "rollout_n": 1})) == ("train-3-17-1-0", "verl:det-0")
    assert request_id(client("hf_cpu"), "det-0") == "verl:det-0"  # outside a session: verl's


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().view(torch.uint8)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 40), length=st.integers(1, 24), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]), threads=st.sampled_from([1, 2]))
def test_the_estimators_give_the_same_bits_on_repeated_calls(rows, length, seed, dtype, threads):
    """Issue 31 item 4: same inputs, same bits, call after call and whatever torch's thread count."""
    from verl_rfpp import estimators

    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(rows, length, generator=generator, dtype=torch.float64).to(dtype)
    mask = torch.rand(rows, length, generator=generator) < 0.7
    mask[:, 0] = True
    index = [f"prompt-{row % 3}" for row in range(rows)]
    before = torch.get_num_threads()

    def both():
        first = estimators.reinforce_plus_plus(rewards, mask)
        second = estimators.reinforce_plus_plus_baseline(rewards, mask, index)
        return [_bits(t) for t in (first.advantages, first.returns, second.advantages, second.returns)]

    reference = both()
    try:
        torch.set_num_threads(threads)
        again = [both() for _ in range(3)]
    finally:
        torch.set_num_threads(before)
    for outputs in again:
        assert all(torch.equal(a, b) for a, b in zip(outputs, reference, strict=True))


# --- the weights digest and the metrics files ---------------------------------------------------------

def test_the_weights_digest_changes_with_one_bit_and_not_with_the_order_of_names():
    weights = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a": torch.ones(3)}
    digest = rollout.weights_digest(weights)
    assert digest == rollout.weights_digest(dict(reversed(weights.items())))
    flipped = weights["b"].clone()
    flipped.view(torch.int32)[1, 2] ^= 1  # the last bit of one float
    assert rollout.weights_digest({**weights, "b": flipped}) != digest
    assert rollout.weights_digest({**weights, "b": weights["b"].reshape(3, 2)}) != digest  # shape counts


def test_servers_that_received_different_weights_are_named():
    lines = ["weights pid=1 global_steps=1 abs_sum=2 sha256=aaaa", "weights pid=2 global_steps=1 abs_sum=2 sha256=aaaa",
             "weights pid=1 global_steps=2 abs_sum=3 sha256=bbbb"]
    assert run_metrics.weight_digests(lines) == {1: "aaaa", 2: "bbbb"}
    assert run_metrics.weight_digests([*lines, "weights pid=2 global_steps=2 abs_sum=3 sha256=cccc"]) == {
        1: "aaaa", 2: "differ: bbbb, cccc"}


def _verl_lines(path: Path, steps) -> None:
    path.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": s / 3, "timing_s/step": 1.5 * s,
                                                              "actor/perf/cpu_memory_used_gb": 0.1,
                                                              "perf/total_num_tokens": 64}}) + "\n" for s in steps))


def test_metrics_split_what_the_seed_decides_from_what_the_clock_does(tmp_path):
    _verl_lines(tmp_path / run_metrics.VERL_METRICS, [1, 2])
    metrics = run_metrics.write_metrics(tmp_path)
    lines = [json.loads(line) for line in (tmp_path / run_metrics.METRICS).read_text().splitlines()]
    assert lines == [metrics[1], metrics[2]]
    assert lines[0] == {"step": 1, "critic/score/mean": 1 / 3, "perf/total_num_tokens": 64}  # full precision
    timing = [json.loads(line) for line in (tmp_path / run_metrics.TIMING).read_text().splitlines()]
    assert timing[1] == {"step": 2, "actor/perf/cpu_memory_used_gb": 0.1, "timing_s/step": 3.0}


def test_a_resumed_run_s_metrics_continue_the_earlier_lines(tmp_path):
    _verl_lines(tmp_path / run_metrics.VERL_METRICS, [1, 2])
    run_metrics.write_metrics(tmp_path)
    _verl_lines(tmp_path / run_metrics.VERL_METRICS, [2, 3])  # resumed from a checkpoint after step 1
    run_metrics.write_metrics(tmp_path, resumed=True)
    assert [json.loads(line)["step"] for line in (tmp_path / run_metrics.METRICS).read_text().splitlines()] == [1, 2, 3]
    run_metrics.write_metrics(tmp_path)  # a fresh run in the same directory replaces the lines
    assert [json.loads(line)["step"] for line in (tmp_path / run_metrics.METRICS).read_text().splitlines()] == [2, 3]


def test_metrics_files_cut_short_by_a_kill_do_not_stop_the_resume(tmp_path):
    """A kill can cut verl's logger output or our own ``metrics.jsonl`` (of an older release that
    wrote it in place) in the middle of a line: the resume keeps every complete line and drops the
    cut one; our files are replaced in one step, so no ``.partial`` file is left behind."""
    _verl_lines(tmp_path / run_metrics.VERL_METRICS, [1, 2])
    run_metrics.write_metrics(tmp_path)
    with open(tmp_path / run_metrics.METRICS, "a") as handle:
        handle.write('{"step": 3, "critic/sc')  # our own file cut short
    _verl_lines(tmp_path / run_metrics.VERL_METRICS, [3])
    with open(tmp_path / run_metrics.VERL_METRICS, "a") as handle:
        handle.write('{"step": 4, "data": {"critic/score/me')  # verl's line cut short
    metrics = run_metrics.write_metrics(tmp_path, resumed=True)
    assert sorted(metrics) == [1, 2, 3]
    assert [json.loads(line)["step"] for line in (tmp_path / run_metrics.METRICS).read_text().splitlines()] == [1, 2, 3]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [run_metrics.VERL_METRICS, run_metrics.METRICS, run_metrics.TIMING])


def test_demo_resume_without_a_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    assert cli.main(["demo", "--resume", "--steps", "4"]) == 2
    assert capsys.readouterr().out.strip().count("\n") == 0
    assert cli.main(["demo", "--resume", "--steps", "4", "--out", str(tmp_path)]) == 2
    out = capsys.readouterr().out.strip()
    assert "there is none; run with --save-every N first" in out and "\n" not in out
    (tmp_path / checkpoints.CHECKPOINTS).mkdir()
    (tmp_path / checkpoints.CHECKPOINTS / "latest_checkpointed_iteration.txt").write_text("4")
    assert cli.main(["demo", "--resume", "--steps", "4", "--out", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert f"names step 4, but {tmp_path / checkpoints.CHECKPOINTS / 'global_step_4'} does not exist; no intact " \
           "checkpoint is left: run afresh without --resume" in out and "--steps above" not in out
    _checkpoint(tmp_path, 4)
    assert cli.main(["demo", "--resume", "--steps", "4", "--out", str(tmp_path)]) == 2
    assert "resume with --steps above 4" in capsys.readouterr().out


def test_demo_resume_of_another_run_is_refused_in_one_line(tmp_path, capsys):
    """A checkpoint resumed with another seed, estimator, trainer or world size would continue as
    another run; one without the saving run's record cannot be checked. Refused before any trainer
    starts (the checkpoint and the folder's lock are the only files, and stay the only ones)."""
    _checkpoint(tmp_path, 2)
    (tmp_path / checkpoints.CHECKPOINTS / "latest_checkpointed_iteration.txt").write_text("2")
    assert cli.main(["demo", "--resume", "--steps", "4", "--out", str(tmp_path)]) == 2
    out = capsys.readouterr().out.strip()
    assert "has no readable record of the run that saved it" in out and "\n" not in out
    saved = {"--estimator": "reinforce_plus_plus_baseline", "--legacy": False, "--ranks": 1, "--nodes": 1,
             "--seed": 1, "--multi-turn": False}
    checkpoints.write_run_settings(tmp_path, saved)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert cli.main(["demo", "--resume", "--steps", "4", "--seed", "2", "--ranks", "2", "--out", str(tmp_path)]) == 2
    out = capsys.readouterr().out.strip()
    assert "was saved by a run with --ranks 1, --seed 1; resume it with the same options (this run has --ranks 2, " \
           "--seed 2)" in out and "\n" not in out
    assert cli.main(["demo", "--resume", "--steps", "4", "--estimator", "reinforce_plus_plus", "--seed", "1",
                     "--out", str(tmp_path)]) == 2
    assert "--estimator reinforce_plus_plus_baseline; resume it" in capsys.readouterr().out
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def _checkpoint(out: Path, step: int, complete: bool = True) -> None:
    folder = out / checkpoints.CHECKPOINTS / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"\0" * 8)
    if complete:
        (folder / "data.pt").write_bytes(b"\0" * 8)


def test_a_half_written_checkpoint_is_never_loaded(tmp_path, capsys):
    """verl writes its tracker after a checkpoint's last file (``data.pt``; read off verl's
    source), so a run killed while saving step 2 leaves the tracker at 1 and the resume starts
    from 1 (the kill matrix, benchmarks/faults.py, resumes such runs to the uninterrupted digest).
    A tracker cut short, or one naming a folder without the actor or ``data.pt``, is refused in one
    line naming it: verl would stop on the first and silently train from scratch on the second."""
    save = (Path(importlib.util.find_spec("verl").origin).parent / "trainer" / "ppo" / "v1" / "trainer_base.py")
    source = save.read_text().split("def _save_checkpoint", 1)[1].split("\n    def ", 1)[0]
    assert source.index('"data.pt"') < source.index('"latest_checkpointed_iteration.txt"') < source.index(
        'f.write(str(self.global_steps))')
    settings = {"--estimator": ESTIMATOR, "--legacy": False, "--ranks": 1, "--nodes": 1, "--seed": 0,
                "--multi-turn": False}
    checkpoints.write_run_settings(tmp_path, settings)
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2, complete=False)  # killed while saving step 2
    tracker = tmp_path / checkpoints.CHECKPOINTS / checkpoints.TRACKER
    tracker.write_text("1")
    assert checkpoints.resume_problem(tmp_path, 4, settings) is None and checkpoints.saved_step(tmp_path) == 1
    for text, expected in (("", f"verl's tracker {tracker} names no step"),
                           ("2", f"names step 2, but {tmp_path / checkpoints.CHECKPOINTS / 'global_step_2'} "
                                 "lacks data.pt")):
        tracker.write_text(text)
        assert cli.main(["demo", "--resume", "--steps", "4", "--out", str(tmp_path)]) == 2
        out = capsys.readouterr().out.strip()
        assert expected in out and "\n" not in out, out


def test_save_and_resume_reach_verl_s_trainer_options(tmp_path):
    paths = {"train": "t", "test": "v", "model": "m"}
    plain = configuration.trainer_overrides(ESTIMATOR, paths, 4, False, tmp_path)
    assert {"trainer.save_freq=-1", "trainer.resume_mode=disable", "trainer.logger=[console,file]",
            "actor_rollout_ref.rollout.full_determinism=True"} <= set(plain)
    saving = configuration.trainer_overrides(ESTIMATOR, paths, 4, False, tmp_path, save_every=2, resume=True)
    assert {"trainer.save_freq=2", "trainer.resume_mode=auto",
            f"trainer.default_local_dir={tmp_path / checkpoints.CHECKPOINTS}"} <= set(saving)


"""verl's real trainers on the CPU with our estimators (python -m verl.trainer.main_ppo in a
subprocess, Ray, FSDP2 workers on 1 or 2 ranks with gloo, hf_cpu rollout, reference model,
weight sync). Marked e2e. Three trainer runs (one shared with tests/e2e/test_sessions_runs.py) cover: both
estimators, both trainers, 2 ranks, 2 Ray nodes, the rfpp/ metrics in verl's tensorboard logger,
the ``verl-rfpp demo`` command's output, multi-turn masks with interior holes, and a run beside a
Ray cluster the user runs."""

from __future__ import annotations

import pytest
from support.users_cluster import users_cluster

from verl_rfpp.cli import main as cli
from verl_rfpp.cli import multinode
from verl_rfpp.cpu import configuration, demo, launch, trace
from verl_rfpp.experiments import runs

pytestmark = pytest.mark.e2e


def _steps_of_trace(result, estimator):
    """Per step, in trace order: the estimator's line and the policy-loss lines of the update after it."""
    steps = []
    for line in result.trace:
        kind, fields = trace.parse(line)
        if kind == estimator:
            steps.append((fields, []))
        elif kind == "tokens" and steps:
            steps[-1][1].append(fields)
    return steps


def _common_checks(result, estimator, steps, ranks, loss_calls=1, rows=None):
    """``loss_calls``: policy-loss calls per rank and step (mini-batches times micro-batches);
    ``rows``: the rows of each call (default: the recipe's step, ``PROMPTS * SAMPLES``, split over
    the ranks)."""
    rows = configuration.PROMPTS * configuration.SAMPLES // ranks if rows is None else rows
    log_tail = "".join(result.log[-60:])
    verdict = demo.judge(estimator, result, steps, ranks)
    assert verdict.passed, (verdict.problems, log_tail)
    assert sorted(result.steps) == list(range(1, steps + 1))
    # judge(): once per step in verl's driver, rfpp/ metrics every step, every rank trained every step,
    # every rollout server got new weights after every update. Here: the advantages were computed
    # once, globally: the estimator saw every rank's tokens of the step.
    per_step = _steps_of_trace(result, estimator)
    assert len(per_step) == steps
    for estimator_line, rank_lines in per_step:
        assert sorted(int(f["rank"]) for f in rank_lines) == sorted(list(range(ranks)) * loss_calls)
        assert sum(int(f["valid"]) for f in rank_lines) == int(estimator_line["valid_tokens"])
        assert {int(f["rows"]) for f in rank_lines} == {rows}
    for step in range(1, steps + 1):
        assert result.steps[step]["rfpp/valid_tokens"] > 0
    # every step, verl's registry resolved both names to the plugin (the CPU backend's driver hook)
    registry = trace.lines_of(result.trace, "metrics")
    assert len(registry) == steps
    assert {(f["reinforce_plus_plus"], f["reinforce_plus_plus_baseline"]) for f in registry} == {
        ("verl_rfpp.adapter.registries", "verl_rfpp.adapter.registries")}
    return per_step


def _two_rank_checks(result, estimator, out_dir, loss_calls=1):
    per_step = _common_checks(result, estimator, steps=2, ranks=2, loss_calls=loss_calls)
    # the rfpp/ metrics reached a real logger backend: verl's tensorboard event files
    events = runs.read_events(out_dir / "tensorboard")
    for name in demo.RFPP_METRICS:
        assert [step for step, _ in events[name]] == [1, 2]
    assert [value for _, value in events["rfpp/valid_tokens"]] == [result.steps[s]["rfpp/valid_tokens"] for s in (1, 2)]
    pids = {f["pid"] for _, rank_lines in per_step for f in rank_lines}
    assert len(pids) == 2  # two processes


def test_v1_trainer_on_two_ranks_baseline_advantages_are_computed_once_globally(v1_two_output_run):
    """The session fixture (tests/support/trainer_runs.py): REINFORCE++-baseline in verl's v1 trainer with
    the k2 KL loss; its agent loop returns 24 rows a step, so each rank trains 2 mini-batches.
    tests/e2e/test_sessions_runs.py checks the same run's advantages per session."""
    result = v1_two_output_run.result
    _two_rank_checks(result, "reinforce_plus_plus_baseline", v1_two_output_run.out, loss_calls=2)
    assert 0.0 < result.steps[2]["actor/kl_loss"] < 1.0  # the k2 term is live once the policy moved


@pytest.fixture(scope="module")
def legacy_run_beside_a_users_cluster(tmp_path_factory):
    """REINFORCE++ with k1 in the reward, verl's legacy trainer, 2 ranks, tensorboard on, started
    (as ``verl-rfpp demo`` starts its run: ``launch.run``) while a one-node Ray cluster of "the
    user's" runs, its address in ``RAY_ADDRESS`` and in Ray's address file. A run used to join such
    a cluster and die (``ValueError: When connecting to an existing cluster, num_cpus and num_gpus
    must not be provided``). Returns the result, its directory, and the user's cluster's actors
    before and after; the user's cluster is gone before the tests read them."""
    out = tmp_path_factory.mktemp("legacy-rfpp")
    with users_cluster(nodes=1) as users, pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_ADDRESS", users.address)
        actors_before = users.node_of_pids()
        result = launch.run("reinforce_plus_plus", out, steps=2, legacy=True, echo=False, timeout=900, ranks=2,
                            loggers=("console", "tensorboard"))
        actors_after = users.node_of_pids()
    return result, out, actors_before, actors_after


def test_legacy_trainer_on_two_ranks_rfpp_k1_shapes_the_returns(legacy_run_beside_a_users_cluster):
    result, out, _, _ = legacy_run_beside_a_users_cluster
    _two_rank_checks(result, "reinforce_plus_plus", out)
    # k1 shaping reached the returns: raw advantages are no longer the pure outcome reward
    # (k1 = log p - log p_ref per token: its mean can have either sign)
    step2 = result.steps[2]
    assert step2["actor/reward_kl_penalty"] != 0.0
    assert step2["rfpp/raw_adv_mean"] != pytest.approx(step2["critic/score/mean"], abs=1e-9)


def test_a_run_beside_a_users_cluster_trains_on_a_ray_of_its_own(legacy_run_beside_a_users_cluster):
    """The same run trained on a Ray of its own and left the user's cluster alone, although
    ``RAY_ADDRESS`` and Ray's address file named the user's."""
    result, _, actors_before, actors_after = legacy_run_beside_a_users_cluster
    assert result.returncode == 0
    assert "existing cluster" not in "".join(result.log)
    assert actors_after == actors_before  # no actor of the run on the user's cluster


def _descendants() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True)}


def test_demo_on_two_ray_nodes_multi_turn_puts_one_rank_on_each_and_stops_every_process(tmp_path, capsys):
    """``verl-rfpp demo --nodes 2 --multi-turn``: a Ray cluster of two raylets on loopback, verl's
    trainer with ``trainer.nnodes=2`` and the multi-node example's overrides, one FSDP rank per node,
    verl's tool_agent loop with the toy tool. The verdict names the node (id and address, from Ray)
    of every rank; the batches the ranks train on have response_mask holes (the tool's tokens); the
    demo prints a readable report ending in PASS while verl's log goes to a file; and every process
    is gone afterwards."""
    before = _descendants()
    code = cli.main(["demo", "--nodes", "2", "--multi-turn", "--steps", "2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("PASS: ") and "on 2 Ray nodes (trainer.nnodes=2)" in out
    assert [line.split()[1] for line in lines if line.startswith("step ")] == ["1/2", "2/2"]
    assert "had tool output inside them" in out
    log = (tmp_path / "verl.log").read_text()
    assert "step:2 - " in log
    argv = log.splitlines()[0].split()
    for override in multinode.example_overrides(2):  # the example's overrides went through, verbatim
        replaced = tuple(key + "=" for key in configuration.REPLACED_FOR_CPU)
        assert (override in argv) != override.startswith(replaced), override
    assert "trainer.nnodes=2" in argv and "trainer.n_gpus_per_node=1" in argv
    rank_lines = [line.split() for line in lines if line.strip().startswith("rank ")]
    assert [line[1] for line in rank_lines] == ["0:", "1:"], out
    nodes = {line[line.index("node") + 1] for line in rank_lines}
    assert len(nodes) == 2, out  # two distinct Ray node ids, read from Ray's actor table
    assert all(line[line.index("node") + 2].startswith("(127.0.0.1:") for line in rank_lines), out
    assert "one gloo process group across the nodes" in out
    # the worker check of every rank (contract 8.4) ran before the first rollout, from inside each rank
    trace_lines = (tmp_path / "trace.txt").read_text().splitlines()
    worker_lines = trace.lines_of(trace_lines, "worker")
    assert {(f["world_size"], f["backend"], f["plugin_loaded"]) for f in worker_lines} == {("2", "gloo", "True")}
    assert {f["node_id"][:12] for f in worker_lines} == nodes
    first_worker = next(i for i, line in enumerate(trace_lines) if line.startswith("worker "))
    first_estimator = next(i for i, line in enumerate(trace_lines) if line.startswith("reinforce_plus_plus_baseline "))
    assert first_worker < first_estimator
    # the trace and verl's step lines, read back as a run's result: every step's advantages were
    # computed once over both ranks' tokens, and every micro-batch of both ranks had tool tokens
    result = launch.RunResult(returncode=0, trace=trace_lines)
    for line in log.splitlines():
        result.read_step(line)
    # the run's own config: the example's n and micro-batch size (32 responses a step, 16 a rank, 8 a call)
    value = {o.split("=", 1)[0]: int(o.split("=", 1)[1]) for o in argv if o.startswith(
        ("actor_rollout_ref.rollout.n=", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="))}
    micro = value["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    loss_calls = configuration.PROMPTS * value["actor_rollout_ref.rollout.n"] // (2 * micro)
    per_step = _common_checks(result, configuration.MULTINODE_ESTIMATOR, steps=2, ranks=2, loss_calls=loss_calls,
                              rows=micro)
    for _, rank_lines in per_step:
        assert all(int(f["holes"]) > 0 for f in rank_lines)
    assert _descendants() <= before  # the cluster's raylets, GCS and workers are gone

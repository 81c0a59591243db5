"""What ``verl-rfpp demo`` shows a person: one progress line per step, a plain-language summary and
a verdict (PASS or FAIL, and why), all from the run's console metrics and its trace."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from verl_rfpp import catalog
from verl_rfpp.cpu import cluster, trace
from verl_rfpp.cpu.checkpoints import CHECKPOINTS, RUN_SETTINGS, resume_problem, saved_step
from verl_rfpp.cpu.launch import WORKER_GRACE_S, RunResult
from verl_rfpp.cpu.run_metrics import METRICS

REWARD = "critic/score/mean"
KL_LOSS = "actor/kl_loss"
KL_REWARD = "actor/reward_kl_penalty"
ADV_STD = "rfpp/adv_std"
VAR_FLOOR = "rfpp/var_floor_used"
RFPP_METRICS = ("rfpp/raw_adv_mean", "rfpp/raw_adv_std", "rfpp/adv_mean", "rfpp/adv_std", "rfpp/valid_tokens",
                VAR_FLOOR)  # what core/metrics.py logs (contract section 7; tests/adapter/test_runtime.py)
LEARNING_STEPS = 20  # from this many steps on, the reward must rise (the task learns within ~20-40)
WINDOW = 5  # steps averaged at the start and at the end of the run
MIN_GAIN = 0.1  # the reward's rise (0..2 scale) that counts as learning


def progress_line(step: int, total: int, metrics: dict[str, float]) -> str:
    """``step 3/40  reward 0.245  kl_loss 0.00123  adv_std 1.000  2.4 s``; a step whose advantages
    met the variance floor (``rfpp/var_floor_used`` 1: the raw advantages' variance under 1e-8,
    docs/contract.md section 4.3) says so after its ``adv_std``."""
    def number(key: str, fmt: str) -> str:
        return format(metrics[key], fmt) if key in metrics else "-"

    kl = (f"kl_loss {number(KL_LOSS, '.5f')}" if KL_LOSS in metrics
          else f"kl_in_reward {number(KL_REWARD, '.5f')}")
    floor = " (variance floor used: raw advantages' variance < 1e-8)" if metrics.get(VAR_FLOOR) == 1 else ""
    return (f"step {step:>{len(str(total))}}/{total}  reward {number(REWARD, '.3f')}  {kl}  "
            f"adv_std {number(ADV_STD, '.3f')}{floor}  {number('timing_s/step', '.1f')} s")


@dataclass
class Verdict:
    """PASS when every check holds; ``problems`` say why not, ``facts`` feed the summary."""

    problems: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems


def _pid(line: str) -> int:
    return int(re.search(r"pid=(\d+)", line).group(1))


def judge(estimator: str, result: RunResult, steps: int, ranks: int = 1) -> Verdict:
    """The run's checks: verl exited 0 after every step; our estimator computed the advantages
    once per step in verl's driver; the ``rfpp/`` metrics reached the logger every step; every
    rank trained every step; the rollout received new weights after every update; and from
    ``LEARNING_STEPS`` steps on, the reward rose by ``MIN_GAIN``. A run that did not end well (a
    time limit, an exit code) is judged by that and the steps it logged only: what else fails
    then (fewer advantages, a rollout server without the last weights) follows from it."""
    verdict = Verdict()
    problems, facts = verdict.problems, verdict.facts
    if result.timed_out:
        problems.append("the run hit the demo's time limit and was stopped")
    elif result.returncode != 0:
        error = cluster.last_error("".join(result.log))
        problems.append(f"verl's trainer exited with code {result.returncode}" + (f": {error}" if error else ""))
    if len(result.steps) != steps:
        problems.append(f"verl logged {len(result.steps)} of {steps} training steps")

    calls = [line for line in result.trace if line.startswith(estimator + " ")]
    facts["calls"], facts["call_pids"] = len(calls), sorted({_pid(line) for line in calls})
    facts["driver_pids"] = sorted(result.driver_pids)
    if len(calls) != len(result.steps) or not calls:
        problems.append(f"verl-rfpp's {estimator} computed the advantages {len(calls)} times in "
                        f"{len(result.steps)} steps (expected once per step)")
    elif not set(facts["call_pids"]) <= result.driver_pids:
        problems.append(f"the advantages were computed in pid {facts['call_pids']}, not in verl's driver "
                        f"{facts['driver_pids']}")
    valid = [int(fields["valid_tokens"]) for fields in trace.lines_of(result.trace, estimator)]
    facts["valid_tokens"] = valid

    missing = sorted({key for metrics in result.steps.values() for key in RFPP_METRICS if key not in metrics})
    if missing:
        problems.append(f"the rfpp/ metrics {missing} did not reach verl's logger every step")

    tokens = trace.lines_of(result.trace, "tokens")
    per_rank: dict[int, int] = {}
    for fields in tokens:
        per_rank[int(fields["rank"])] = per_rank.get(int(fields["rank"]), 0) + int(fields["valid"])
    facts["rank_tokens"] = dict(sorted(per_rank.items()))
    facts["holes"] = sum(int(fields["holes"]) for fields in tokens)
    idle = [rank for rank in range(ranks) if per_rank.get(rank, 0) == 0]
    if idle or len(tokens) < ranks * len(result.steps):
        problems.append(f"not every rank trained every step: valid tokens per rank {facts['rank_tokens']}, "
                        f"{len(tokens)} policy-loss calls for {ranks} ranks x {len(result.steps)} steps")

    servers: dict[str, list[float]] = {}  # one rollout server per replica (per rank here)
    for fields in trace.lines_of(result.trace, "weights"):
        servers.setdefault(fields["pid"], []).append(float(fields["abs_sum"]))
    facts["syncs"] = min((len(sums) for sums in servers.values()), default=0)
    facts["servers"] = len(servers)
    stale = [pid for pid, sums in servers.items() if len(sums) < len(result.steps) + 1 or len(set(sums)) != len(sums)]
    if not servers or stale:
        problems.append(f"a rollout server did not receive new weights after every update ({facts['syncs']} "
                        f"syncs for {len(result.steps)} updates): the sampling model did not follow the trained one")

    if result.timed_out or result.returncode != 0:  # the rest follows from the run's end, not a cause of its own
        del problems[2:]
        return verdict
    rewards = [metrics[REWARD] for _, metrics in sorted(result.steps.items()) if REWARD in metrics]
    if rewards:
        facts["reward_first"] = sum(rewards[:WINDOW]) / len(rewards[:WINDOW])
        facts["reward_last"] = sum(rewards[-WINDOW:]) / len(rewards[-WINDOW:])
        if len(rewards) >= LEARNING_STEPS and facts["reward_last"] - facts["reward_first"] < MIN_GAIN:
            problems.append(f"the reward did not rise: {facts['reward_first']:.2f} in the first {WINDOW} steps, "
                            f"{facts['reward_last']:.2f} in the last {WINDOW}")
    return verdict


def _in_checkpoint_write(log: str) -> bool:
    """Whether the last traceback of verl's ``log`` runs through verl's checkpoint managers' save
    (``verl/utils/checkpoint/``): a failed write whose error names no path, as torch's on a full
    disk (``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos``)."""
    last = log.rfind("Traceback (most recent call last)")
    return last >= 0 and "verl/utils/checkpoint/" in log[last:] and "in save_checkpoint" in log[last:]


def checkpoint_failure(result: RunResult, out_dir: Path) -> Optional[str]:
    """What to tell a person whose run stopped because verl could not write a checkpoint in
    ``out_dir`` (its decisive error names a path under ``out_dir/checkpoints``, or its last
    traceback runs through verl's checkpoint save: a read-only or full folder), in one line with
    the checkpoint that stays intact; for a run stopped by the death of one of its Ray workers,
    ``worker_death``'s line; ``None`` for any other end (the demo prints the line instead of
    verl's last log lines)."""
    died = worker_death(result, out_dir)
    if died:
        return died
    checkpoints = Path(out_dir).resolve() / CHECKPOINTS
    log = "".join(result.log)
    error = cluster.last_error(log) if result.returncode != 0 and not result.timed_out else None
    if not error or (str(checkpoints) not in error and not _in_checkpoint_write(log)):
        return None
    step = saved_step(out_dir)
    kept = (f"the checkpoint of step {step} is intact: make {checkpoints} writable, with free space, and continue "
            f"with --resume --out {out_dir}" if step is not None else "no checkpoint was saved before it")
    return f"verl could not write a checkpoint in {checkpoints} ({error}); {kept}"


DEMO_DEFAULTS = {"--estimator": catalog.REINFORCE_PLUS_PLUS_BASELINE.name, "--legacy": False, "--ranks": 1,
                 "--nodes": 1, "--seed": 0, "--multi-turn": False}  # the command line's, for RUN_SETTINGS' keys


def resume_command(out_dir: Path, steps: int, save_every: Optional[int]) -> str:
    """How the run in ``out_dir`` (planned to ``steps``, checkpoints every ``save_every``) continues:
    the ``demo --resume`` command with the options that decide the run (its ``RUN_SETTINGS``), or
    why the folder cannot resume (``resume_problem``)."""
    out_dir = Path(out_dir).resolve()
    try:
        settings = json.loads((out_dir / RUN_SETTINGS).read_text())
    except (OSError, ValueError):
        settings = {}
    problem = resume_problem(out_dir, steps, settings)
    if problem:
        return f"{out_dir} cannot resume: {problem}"
    options = [f"--steps {steps}"] + ([f"--save-every {save_every}"] if save_every else [])
    options += [name if value is True else f"{name} {value}" for name, value in sorted(settings.items())
                if value != DEMO_DEFAULTS.get(name) and value is not False]
    return (f"{out_dir} resumes from the checkpoint of step {saved_step(out_dir)}: verl-rfpp demo --resume --out "
            f"{out_dir} {' '.join(options)}")


def resume_hint(result: RunResult, out_dir: Path) -> str:
    """``resume_command`` of the run ``result`` in ``out_dir``."""
    return resume_command(out_dir, result.planned_steps, result.save_every)


def interrupted(out_dir: Optional[Path], steps: int, save_every: Optional[int], signal_name: str) -> str:
    """The one line of a demo stopped by ``signal_name`` (SIGINT: Ctrl-C; SIGTERM: a scheduler, ``kill``;
    named when it is not a Ctrl-C) after it stopped the trainer and its Ray processes, with how the run
    in ``out_dir`` continues (none for a run in a temporary folder, removed: ``out_dir`` ``None``)."""
    how = "" if signal_name == "SIGINT" else f" ({signal_name})"
    then = f"; {resume_command(out_dir, steps, save_every)}" if out_dir is not None else ""
    return f"interrupted{how}; stopped the trainer and its Ray processes{then}"


NODE_ROLES = {"raylet": "the Ray node's manager", "gcs_server": "Ray's control store"}


def worker_death(result: RunResult, out_dir: Path) -> Optional[str]:
    """What to tell a person whose run stopped because a Ray process of it ended (a worker killed,
    crashed, the OOM killer; the node's raylet or GCS, whose end ends every worker) or stalled
    (no progress for ``launch.STALL_S``: a stopped or hung worker) while verl trained, in one line:
    which process, during which step, how the run stopped and how long after, then how to resume
    (``resume_hint``); ``None`` for any other end. verl's traceback stays in its log."""
    death = result.death
    if death is None or (result.returncode == 0 and not death.stopped_by_launcher):
        return None
    next_step = resume_hint(result, out_dir)
    how = (f"verl did not stop within {WORKER_GRACE_S:.0f} s, so the demo stopped the run"
           if death.stopped_by_launcher else f"verl's trainer stopped (exit {result.returncode})")
    where = f" (verl's log: {result.log_path})" if result.log_path else ""
    when = f"after step {death.after_step} of {result.planned_steps}" if death.after_step else "before step 1's end"
    if death.stalled:
        what = f"a process of the run stalled ({death.title} pid {death.pid}, {death.stalled}, {when})"
        how = "the demo stopped the run"
    elif death.title in NODE_ROLES:
        what = (f"Ray's {death.title} of the run ended while verl trained ({NODE_ROLES[death.title]}, pid "
                f"{death.pid}, {when}; every worker ends with it)")
    else:
        what = f"a Ray worker of the run ended while verl trained ({death.title} pid {death.pid}, {when})"
    return f"{what}; {how}, and no process of the run was left {death.seconds:.1f} s after; {next_step}{where}"


def judge_nodes(result: RunResult, nodes: int, verdict: Verdict) -> None:
    """A multi-node run's checks, added to ``verdict``: Ray reports ``nodes`` alive nodes; every
    FSDP rank ran on its own node (each rank's pid mapped to its node by Ray's actor table); the
    ranks formed one process group of ``nodes`` members (the worker check's report from inside
    each rank), so the gradient reduction of every update crossed the nodes; and the rollout
    servers received the same weights after every update."""
    problems, facts = verdict.problems, verdict.facts
    by_id = {node.node_id: node for node in result.nodes}
    facts["nodes"] = result.nodes
    alive = [node for node in result.nodes if node.alive]
    if len(alive) != nodes:
        problems.append(f"Ray reported {len(alive)} alive nodes, not {nodes}")
    rank_pid = {int(fields["rank"]): int(fields["pid"]) for fields in trace.lines_of(result.trace, "tokens")}
    placement = {rank: by_id.get(result.node_of_pid.get(pid, "")) for rank, pid in sorted(rank_pid.items())}
    facts["rank_nodes"] = {rank: (rank_pid[rank], node) for rank, node in placement.items()}
    if sorted(placement) != list(range(nodes)) or None in placement.values():
        problems.append(f"Ray's actor table does not place every rank 0..{nodes - 1} on a node of the cluster "
                        f"(ranks' pids {rank_pid})")
    elif len({node.node_id for node in placement.values()}) != nodes:
        problems.append("the ranks did not run one per node: " + ", ".join(
            f"rank {rank} on {node.short_id}" for rank, node in placement.items()))
    workers = {int(fields["pid"]): fields for fields in trace.lines_of(result.trace, "worker")}
    groups = {(workers[pid].get("world_size"), workers[pid].get("backend")) for pid in rank_pid.values()
              if pid in workers}
    facts["group"] = groups
    if groups != {(str(nodes), "gloo")} or not set(rank_pid.values()) <= set(workers):
        problems.append(f"the ranks did not report one gloo process group of {nodes} members (reported: "
                        f"{sorted(groups)}; ranks {sorted(rank_pid.values())}, probed {sorted(workers)})")
    servers: dict[str, list[str]] = {}
    for fields in trace.lines_of(result.trace, "weights"):
        servers.setdefault(fields["global_steps"], []).append(fields["abs_sum"])
    if any(len(set(sums)) != 1 for sums in servers.values()):
        problems.append(f"the rollout servers did not receive the same weights after every update (weight sums "
                        f"per step {servers})")
    runner = next(iter(result.driver_pids), None)
    facts["runner_node"] = by_id.get(result.node_of_pid.get(runner, "")) if runner else None


def node_lines(verdict: Verdict) -> list[str]:
    """Where each rank ran, as Ray reported it."""
    facts = verdict.facts
    if "rank_nodes" not in facts:
        return []
    lines = [f"- Ray cluster: {len(facts['nodes'])} nodes on loopback, each its own raylet: " + ", ".join(
        f"{node.short_id} at {node.address}{' (head)' if node.is_head else ''}" for node in facts["nodes"]) + "."]
    for rank, (pid, node) in facts["rank_nodes"].items():
        where = f"node {node.short_id} ({node.address}{', head' if node.is_head else ''})" if node else "no known node"
        lines.append(f"  rank {rank}: pid {pid} on {where}")
    if facts.get("runner_node") is not None:
        node = facts["runner_node"]
        lines.append(f"  verl's TaskRunner (the advantages): node {node.short_id}{' (head)' if node.is_head else ''}, "
                     "placed by Ray; verl's main_ppo joined the cluster through the head's address")
    groups = facts.get("group") or set()
    if len(groups) == 1:
        world, backend = next(iter(groups))
        lines.append(f"- The {world} ranks formed one {backend} process group across the nodes: every update's "
                     f"gradients were reduced over both nodes, and the rollout servers received the same "
                     f"weights after every update.")
    return lines


def summary(estimator: str, result: RunResult, verdict: Verdict, steps: int, ranks: int, legacy: bool,
            log_hint: Optional[str] = None, files_kept: bool = True) -> str:
    """Plain-language lines on what the run did, then the verdict line last. ``files_kept``: the
    run's folder stays after the demo (otherwise no line names a file in it)."""
    facts = verdict.facts
    trainer = "legacy" if legacy else "v1"
    lines = ["", "What happened:"]
    if facts.get("calls"):
        tokens = facts["valid_tokens"]
        counts = (", ".join(map(str, tokens)) if len(tokens) <= 5 or not tokens
                  else str(tokens[0]) if min(tokens) == max(tokens) else f"{min(tokens)} to {max(tokens)}")
        lines.append(
            f"- verl's driver process (pid {', '.join(map(str, facts['call_pids']))}) asked verl-rfpp's {estimator} "
            f"for the advantages once per step ({facts['calls']} calls), each time over all the step's valid "
            f"response tokens at once ({counts} tokens), whatever rank trains on them.")
    if facts.get("rank_tokens"):
        ranks_text = ", ".join(f"rank {rank}: {count}" for rank, count in facts["rank_tokens"].items())
        if len(facts["rank_tokens"]) == 1:
            lines.append(f"- One training process (FSDP) updated the model on every batch ({ranks_text} "
                         f"response tokens in all).")
        else:
            lines.append(f"- {len(facts['rank_tokens'])} training processes (FSDP ranks, gloo) each updated the "
                         f"model on their share of every batch (response tokens in all: {ranks_text}).")
    if facts.get("holes"):
        lines.append(f"- {facts['holes']} trained responses had tool output inside them (tokens masked out of "
                     f"the loss and of the advantage statistics: interior holes in response_mask).")
    if facts.get("syncs"):
        servers = "server" if facts["servers"] == 1 else f"servers ({facts['servers']}, one per rank)"
        lines.append(f"- The sampling {servers} received the updated weights {facts['syncs']} times, different "
                     f"each time: the model that answers is the model being trained.")
    if "reward_first" in facts:
        meaning = "0 to 2: the share of digits in the answer, +1 when the first one is the prompt's digit"
        if len(result.steps) < 2 * WINDOW:
            rewards = ", ".join(f"{metrics[REWARD]:.2f}" for _, metrics in sorted(result.steps.items())
                                if REWARD in metrics)
            lines.append(f"- Reward per step ({meaning}): {rewards}.")
        else:
            lines.append(f"- Reward ({meaning}): {facts['reward_first']:.2f} over the first {WINDOW} steps, "
                         f"{facts['reward_last']:.2f} over the last {WINDOW}.")
        if len(result.steps) < LEARNING_STEPS:
            lines.append(f"  {len(result.steps)} steps are too few to see learning; "
                         f"`verl-rfpp demo --steps 40` shows it (about 0.2 rising to about 1).")
    lines += node_lines(verdict)
    if result.digest and files_kept:
        metrics = result.log_path.parent / METRICS if result.log_path else METRICS
        lines.append(f"- Actor weights after step {max(result.digests)}: sha256 {result.digest}. Every step's "
                     f"metrics: {metrics}. The same seed gives the same digest and file.")
    elif result.digest:
        lines.append(f"- Actor weights after step {max(result.digests)}: sha256 {result.digest}. The same seed "
                     f"gives the same digest (--out DIR keeps every step's metrics in {METRICS}).")
    if log_hint:
        lines.append(f"- {log_hint}")
    nodes = len(facts.get("nodes") or []) or 1
    where = f" on {nodes} Ray nodes (trainer.nnodes={nodes})" if nodes > 1 else ""
    if verdict.passed:
        lines.append(f"PASS: verl's {trainer} trainer ran {steps} steps on {ranks} rank{'s' if ranks > 1 else ''}"
                     f"{where} with verl-rfpp's {estimator}, and every check held.")
    else:
        lines.append("FAIL: " + "; ".join(verdict.problems) + ".")
    return "\n".join(lines)

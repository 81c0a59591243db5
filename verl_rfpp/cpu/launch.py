"""Build and run verl's real ``main_ppo`` on the CPU with the tiny local assets."""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from verl_rfpp import catalog, validation
from verl_rfpp.cpu import ROLLOUT_NAME, assets, cluster, guard, trace
from verl_rfpp.errors import RfppError

METRICS = "metrics.jsonl"  # every step's metrics that the seed decides, one JSON line per step
TIMING = "timing.jsonl"  # every step's metrics that the clock or the machine decides
VERL_METRICS = "verl-metrics.jsonl"  # verl's ``file`` logger: one run's lines, before the split
TEMP = "tmp"  # the trainer's TMPDIR in the run's folder: verl's checkpoint locks (verl/utils/fs.py) land there
CHECKPOINTS = "checkpoints"  # trainer.default_local_dir
GUARD_LOG = "guard.log"  # when the launcher ended and what of the run was killed then (``guard``)

GRPO = "grpo"
BACKEND = "verl_rfpp.cpu.backend"  # the CPU backend's activating module, imported by verl (VERL_USE_EXTERNAL_MODULES)
SAMPLES = 4  # responses per prompt
PROMPTS = 4  # prompts per step (one mini-batch, one optimizer step per training step)


class LaunchError(RfppError):
    """A CPU run that this backend cannot set up (e.g. ranks that do not divide the batch)."""


def recipe(estimator: str, ours: bool = True) -> list[str]:
    """The algorithm overrides of one run. Ours: the validated recipe. verl's built-ins (the plugin
    excluded): the same recipe with verl's ``vanilla`` policy loss instead of ``rfpp`` (equal
    gradients here: one on-policy update per step, so every ratio is 1 and no clip is active).
    ``grpo``: the baseline recipe (k2 KL loss, 0.01, response mean) with verl's grpo estimator."""
    name = catalog.REINFORCE_PLUS_PLUS_BASELINE.name if estimator == GRPO else estimator
    overrides = [o for o in validation.RECIPES[name] if not o.startswith("actor_rollout_ref.rollout.n=")]
    if estimator == GRPO:
        overrides = [f"algorithm.adv_estimator={GRPO}" if o.startswith("algorithm.adv_estimator=") else o
                     for o in overrides]
    if not ours:
        loss = "actor_rollout_ref.actor.policy_loss.loss_mode="
        overrides = [f"{loss}vanilla" if o.startswith(loss) else o for o in overrides]
    return overrides


def multi_turn_overrides(out_dir: Path) -> list[str]:
    """verl's ``tool_agent`` loop with the toy tool (``verl_rfpp.cpu.agent``): two assistant turns
    of at most 4 tokens around one tool answer, in a 16-token response."""
    from verl_rfpp.cpu import agent

    tools = out_dir / "tools.yaml"
    tools.write_text(agent.TOOL_CONFIG)
    return [
        "data.max_response_length=16",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        f"actor_rollout_ref.rollout.multi_turn.format={agent.PARSER}",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    ]


MULTINODE_EXAMPLE = "run_qwen2.5-7b_gsm8k_rfpp_baseline_multinode.sh"
MULTINODE_ESTIMATOR = catalog.REINFORCE_PLUS_PLUS_BASELINE.name  # the example's algorithm.adv_estimator
# The example's overrides a run of the tiny model on the CPU does not take, by key prefix: the
# model, the data, vLLM and the GPU counts (the CPU run sets its own) ...
NOT_FOR_CPU = ("actor_rollout_ref.model.", "data.", "actor_rollout_ref.rollout.name=",
               "actor_rollout_ref.rollout.tensor_model_parallel_size=",
               "actor_rollout_ref.rollout.gpu_memory_utilization=", "trainer.n_gpus_per_node=", "trainer.nnodes=")
# ... and the few it replaces: sizes for 1024 prompts, a 7B model's learning rate, wandb (no
# network here), and checkpoint / validation frequencies (a 2-step run would save and validate).
REPLACED_FOR_CPU = ("actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.ppo_mini_batch_size",
                    "trainer.logger", "trainer.save_freq", "trainer.test_freq")


TRACKER = "latest_checkpointed_iteration.txt"  # verl writes it after a checkpoint's every file


def saved_step(out_dir: Path) -> Optional[int]:
    """The step of the latest checkpoint verl saved in ``out_dir/checkpoints`` (its tracker file,
    ``TRACKER``), or ``None`` when there is none."""
    tracker = Path(out_dir) / CHECKPOINTS / TRACKER
    try:
        return int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None


RUN_SETTINGS = "run-settings.json"  # the options of the run that saved the checkpoints in ``out_dir``


def write_run_settings(out_dir: Path, settings: dict) -> None:
    """Record ``settings`` (``demo``'s options that decide the run: ``{"--seed": 0, ...}``) beside
    the checkpoints a run saves, for ``resume_problem``."""
    (Path(out_dir) / RUN_SETTINGS).write_text(json.dumps(settings, sort_keys=True))


LOCK = "run.lock"  # in a run's folder: flock(2)-locked by the demo that runs there, its pid inside


def hold_folder(out_dir: Path) -> int:
    """Lock ``out_dir`` for this process (one run per folder): an exclusive ``flock`` on
    ``out_dir/run.lock``, held by the returned descriptor until it is closed or the process ends,
    however it ends (the kernel drops it: a kill leaves no stale lock). The holder's pid is written
    in the file. A folder another process holds raises ``LaunchError`` naming that pid; one this
    process cannot write to, naming the error."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)  # not inherited by the trainer
    except OSError as error:  # a read-only or full --out: no run could write its files there either
        raise LaunchError(f"could not write the run's files in {out_dir}: {error}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = ""
        for _ in range(20):  # the holder writes its pid just after it took the lock
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            if holder:
                break
            time.sleep(0.05)
        os.close(fd)
        raise LaunchError(f"{out_dir} is in use by another run (pid {holder or 'unknown'}, which holds "
                          f"{out_dir / LOCK}): wait for it to end, stop it (kill -INT {holder or 'PID'}), "
                          "or give another --out") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


MANIFEST = "rfpp-manifest.json"  # in a checkpoint folder: its files' sizes and sha256, written by the launcher


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """``folder/rfpp-manifest.json``: every file of the checkpoint folder (relative path -> size
    and sha256), replaced in one step (a kill leaves the old manifest or the new, never half)."""
    folder = Path(folder)
    files = {str(path.relative_to(folder)): {"size": path.stat().st_size, "sha256": _sha256(path)}
             for path in sorted(folder.rglob("*")) if path.is_file() and path.name != MANIFEST
             and not path.name.endswith(".partial")}
    partial = folder / (MANIFEST + ".partial")
    partial.write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    os.replace(partial, folder / MANIFEST)


def checkpoint_problem(folder: Path) -> Optional[str]:
    """What is wrong with the checkpoint folder ``folder`` (``None``: intact): against its manifest
    (``MANIFEST``), the first file missing, of another size, or of other bytes; without a manifest
    (a checkpoint saved before the launcher wrote them), only whether ``actor/`` and ``data.pt`` are there."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder} does not exist"
    manifest = folder / MANIFEST
    if not manifest.exists():
        missing = [name for name in ("actor", "data.pt") if not (folder / name).exists()]
        return f"{folder} lacks {' and '.join(missing)}" if missing else None
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"its manifest {manifest} is unreadable"
    for name, expected in sorted(files.items()):
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"{path} is missing (its manifest lists it, {expected['size']} bytes)"
        if size != expected["size"]:
            return f"{path} has {size} bytes, its manifest {expected['size']}"
        found = _sha256(path)
        if found != expected["sha256"]:
            return (f"{path}'s bytes changed (sha256 {found[:16]}..., its manifest {expected['sha256'][:16]}...; "
                    "same size)")
    return None


def _steps_saved(checkpoints: Path) -> list[int]:
    """The N of every ``global_step_N`` folder in ``checkpoints``, newest first."""
    found = [int(match[1]) for path in checkpoints.glob("global_step_*")
             if path.is_dir() and (match := re.fullmatch(r"global_step_(\d+)", path.name))]
    return sorted(found, reverse=True)


def intact_before(out_dir: Path, below: Optional[int]) -> Optional[int]:
    """The newest checkpoint of ``out_dir`` before step ``below`` (any with ``None``) that
    ``checkpoint_problem`` finds intact, or ``None``."""
    checkpoints = Path(out_dir) / CHECKPOINTS
    return next((step for step in _steps_saved(checkpoints) if (below is None or step < below)
                 and checkpoint_problem(checkpoints / f"global_step_{step}") is None), None)


def _instead(out_dir: Path, below: Optional[int]) -> str:
    """How to go on from ``out_dir`` when its tracker's checkpoint cannot be used: the newest intact one."""
    tracker = Path(out_dir) / CHECKPOINTS / TRACKER
    step = intact_before(out_dir, below)
    if step is None:
        return "no intact checkpoint is left: run afresh without --resume"
    return (f"the newest intact checkpoint is step {step} ({Path(out_dir) / CHECKPOINTS / f'global_step_{step}'}): "
            f"resume from it with `echo {step} > {tracker}`, then the same --resume command")


def resume_problem(out_dir: Path, steps: int, settings: dict) -> Optional[str]:
    """Why a run of ``steps`` steps with ``settings`` cannot resume from ``out_dir``, or ``None``:
    no checkpoint (verl itself would silently train from scratch), a tracker cut short, a tracker
    naming a checkpoint that is missing or damaged (``checkpoint_problem``: against the manifest
    the launcher wrote, or, without one, ``actor/`` or ``data.pt`` absent; each with the newest
    intact checkpoint to resume from instead), none before ``steps``, or one saved by a run with
    other settings (verl would continue it as another run: a different seed, estimator or world
    size). A half-written ``global_step_N`` (a run killed while it saved) is never loaded: verl
    writes the tracker after the checkpoint's last file, so it still names the previous one."""
    checkpoints = Path(out_dir) / CHECKPOINTS
    step = saved_step(out_dir)
    tracker = checkpoints / TRACKER
    if step is None and tracker.exists():
        return (f"verl's tracker {tracker} names no step (a run killed while verl wrote it): verl would stop on "
                f"it; {_instead(out_dir, None)}")
    if step is None:
        return (f"--resume continues from a checkpoint in {checkpoints}, and there is none; "
                "run with --save-every N first (same --out)")
    damage = checkpoint_problem(checkpoints / f"global_step_{step}")
    if damage:
        return f"verl's tracker {tracker} names step {step}, but {damage}; {_instead(out_dir, step)}"
    if steps <= step:
        return f"the checkpoint in {checkpoints} is after step {step}: resume with --steps above {step}"
    try:
        saved = json.loads((Path(out_dir) / RUN_SETTINGS).read_text())
    except (OSError, ValueError):
        return (f"the checkpoint in {checkpoints} has no readable record of the run that saved it "
                f"({Path(out_dir) / RUN_SETTINGS}), so the resumed run could not be the same run; "
                "run with --save-every N again")
    differ = [name for name in sorted(settings) if saved.get(name) != settings[name]]
    if differ:
        given = ", ".join(f"{name} {saved.get(name)}" for name in differ)
        return (f"the checkpoint in {checkpoints} was saved by a run with {given}; resume it with the same options "
                f"(this run has {', '.join(f'{name} {settings[name]}' for name in differ)})")
    return None


def resume_note(out_dir: Path) -> Optional[str]:
    """The line a resume prints when the checkpoint it continues from has no manifest (saved before
    the launcher wrote them): only its completeness could be checked."""
    step = saved_step(out_dir)
    folder = Path(out_dir) / CHECKPOINTS / f"global_step_{step}"
    if step is None or (folder / MANIFEST).exists():
        return None
    return (f"the checkpoint of step {step} has no manifest ({folder / MANIFEST}: saved before verl-rfpp wrote "
            "them): only its completeness was checked (actor/ and data.pt present), not its bytes")


class Manifests:
    """Writes a checkpoint's manifest once verl recorded it: ``poll()`` (the launcher's watch)
    reads verl's tracker; a step it names that this run has not yet described gets its
    ``MANIFEST`` (also one the run saved again over an earlier run's folder)."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.done: set[int] = set()

    def poll(self) -> None:
        step = saved_step(self.out_dir)
        folder = self.out_dir / CHECKPOINTS / f"global_step_{step}"
        if step is None or step in self.done or not folder.is_dir():
            return
        try:
            write_manifest(folder)
        except OSError:  # a read-only or full checkpoints folder: no manifest, the resume checks completeness
            pass
        self.done.add(step)


def examples_dir() -> Path:
    """The repository's ``examples/`` (a source checkout or an unpacked sdist)."""
    return Path(__file__).resolve().parents[2] / "examples"


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def trainer_overrides(estimator: str, paths: dict, steps: int, legacy: bool, out_dir: Path, ranks: int = 1,
                      seed: int = 0, ours: bool = True, loggers: tuple[str, ...] = ("console",),
                      multi_turn: bool = False, nodes: int = 1, address: Optional[str] = None,
                      save_every: Optional[int] = None, resume: bool = False, example: Sequence[str] = ()) -> list[str]:
    """The recipe plus what a 2-core CPU run of the tiny model needs, on ``ranks`` FSDP ranks. With
    ``nodes > 1``: one rank per node of the Ray cluster at ``address``, and instead of the recipe
    the multi-node example's overrides ``example`` (read from the script by the command line,
    ``verl_rfpp.cli.multinode``), all but ``REPLACED_FOR_CPU``.
    ``save_every``: verl's checkpoint every that many steps and at the last (``trainer.save_freq``);
    ``resume``: continue from the latest one in ``out_dir/checkpoints`` (``trainer.resume_mode=auto``),
    otherwise start afresh (``disable``). verl's ``file`` logger always writes every step's metrics;
    ``rollout.full_determinism``: verl routes each request by a hash of its id, ``PYTHONHASHSEED``
    the seed (docs/cpu-backend.md, "Same seed, same run")."""
    if nodes > 1 and not example:
        raise LaunchError("a run on several nodes runs the multi-node example's overrides: pass them as ``example`` "
                          "(verl_rfpp.cli.multinode.example_overrides)")
    example = list(example) if nodes > 1 else []
    samples = next((int(o.split("=", 1)[1]) for o in example if o.startswith("actor_rollout_ref.rollout.n=")),
                   SAMPLES)
    if nodes > 1:
        ranks = nodes
    if (PROMPTS * samples) % ranks:
        raise LaunchError(f"--ranks {ranks} must divide the {PROMPTS * samples} responses of a step; "
                          "use 1 or 2")
    micro = PROMPTS * samples // ranks  # one micro-batch per rank and step
    overrides = recipe(estimator, ours) if nodes == 1 else []
    reward_module = Path(assets.__file__).resolve()
    for role in ("actor", "ref"):
        overrides += [
            f"actor_rollout_ref.{role}.strategy=fsdp2",  # FSDP1 insists on an accelerator device id
            f"actor_rollout_ref.{role}.fsdp_config.use_torch_compile=False",
            f"actor_rollout_ref.{role}.fsdp_config.model_dtype=fp32",
            f"actor_rollout_ref.{role}.fsdp_config.dtype=float32",
        ]
    overrides += [
        f"actor_rollout_ref.rollout.n={samples}",
        f"data.train_files={paths['train']}",
        f"data.val_files={paths['test']}",
        f"data.train_batch_size={PROMPTS}",
        "data.max_prompt_length=16",
        "data.max_response_length=4",
        "data.dataloader_num_workers=0",
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
        "actor_rollout_ref.rollout.full_determinism=True",
        f"actor_rollout_ref.model.path={paths['model']}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.rollout.calculate_log_probs=False",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        f"reward.custom_reward_function.path={reward_module}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"trainer.n_gpus_per_node={ranks // nodes}",
        f"trainer.nnodes={nodes}",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        f"trainer.save_freq={save_every or -1}",
        f"trainer.resume_mode={'auto' if resume else 'disable'}",
        f"trainer.logger=[{','.join(dict.fromkeys((*loggers, 'file')))}]",
        "trainer.project_name=verl_rfpp_cpu",
        f"trainer.experiment_name={estimator}{'' if ours else '_verl'}_seed{seed}",
        f"trainer.default_local_dir={out_dir / CHECKPOINTS}",
        f"trainer.use_v1={not legacy}",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]
    if address is None:  # verl starts a one-node Ray of its own, bound to loopback, whatever else runs
        overrides += [
            "+ray_kwargs.ray_init.address=local",  # not RAY_ADDRESS's, nor the one `ray start` left in Ray's temp dir
            "+ray_kwargs.ray_init.num_cpus=16",  # logical: the actors verl asks for, not cores
            f"+ray_kwargs.ray_init.num_gpus={ranks}",
            f"+ray_kwargs.ray_init._node_ip_address={cluster.LOOPBACK}",
            "+ray_kwargs.ray_init.include_dashboard=False",  # ~6 CPU-seconds of its processes a run, unused
        ]
    else:  # the driver joins the cluster whose nodes declare their own resources
        overrides.append(f"+ray_kwargs.ray_init.address={address}")
    overrides += multi_turn_overrides(out_dir) if multi_turn else []
    if not example:
        return overrides
    ours_wins = {_key(o) for o in overrides if _key(o) in REPLACED_FOR_CPU or _key(o) not in map(_key, example)}
    return ([o for o in example if _key(o) not in REPLACED_FOR_CPU]
            + [o for o in overrides if _key(o) in ours_wins])


def trainer_environment(out_dir: Path, ours: bool = True) -> dict[str, str]:
    """Switch the CPU backend on in every verl process (inherited by Ray's workers; on a cluster,
    every node's raylet gets it). With ``ours=False`` verl loads no plugin
    (``VERL_USE_EXTERNAL_PLUGINS=none``): its own estimators run. Ray stays on loopback, and a
    ``RAY_ADDRESS`` of the user's is not passed on: a run never joins a cluster it did not start."""
    env = cluster.loopback_environment()
    env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray refuses fake GPUs with an empty device list
    env.pop("RAY_ADDRESS", None)  # the run's own Ray only (trainer_overrides: address=local or its LocalCluster)
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    env.update({
        "VERL_PLATFORM": "cpu",
        "VERL_USE_EXTERNAL_MODULES": ",".join(dict.fromkeys(modules + [BACKEND])),
        "VERL_ENGINE_DEVICE": "cuda",  # the FSDP engine registers for cuda/npu only; it runs on "cpu"
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "RAY_DEDUP_LOGS": "0",
        "TENSORBOARD_DIR": str(out_dir / "tensorboard"),
        "VERL_FILE_LOGGER_PATH": str(out_dir / VERL_METRICS),
        trace.TRACE_ENV: str(out_dir / trace.TRACE_FILE),
        # verl leaves a ckpt_<hash>.lock in the temporary folder for every checkpoint folder it makes and
        # never removes it: the run's own folder takes them; Ray's sessions stay where they were
        "TMPDIR": str(out_dir / TEMP),
        # Hugging Face's caches (the datasets library's, which verl's dataset builds from the parquet
        # files: a folder and a lock per file) in the run's folder too, not in the user's ~/.cache
        "HF_HOME": str(out_dir / TEMP / "huggingface"),
        "HF_DATASETS_CACHE": str(out_dir / TEMP / "huggingface" / "datasets"),
        "RAY_TMPDIR": env.get("RAY_TMPDIR") or tempfile.gettempdir(),
    })
    if not ours:
        env["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    return env


def command(estimator: str, out_dir: Path, steps: int = 2, legacy: bool = False, ranks: int = 1, seed: int = 0,
            ours: bool = True, loggers: tuple[str, ...] = ("console",), assets_dir: Optional[Path] = None,
            multi_turn: bool = False, nodes: int = 1, address: Optional[str] = None,
            extra_overrides: Sequence[str] = (), extra_env: Optional[dict[str, str]] = None,
            save_every: Optional[int] = None, resume: bool = False, example: Sequence[str] = ()
            ) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` of one CPU training run; builds the assets (default ``out_dir/assets``).
    ``extra_overrides`` come last (Hydra applies the last value of a key); ``extra_env`` is added
    to the trainer's environment (e.g. another task's data, reward and metrics probe)."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = assets.build_all(Path(assets_dir) if assets_dir else out_dir / "assets")
    overrides = trainer_overrides(estimator, paths, steps, legacy, out_dir, ranks, seed, ours, loggers, multi_turn,
                                  nodes, address, save_every, resume, example)
    env = {**trainer_environment(out_dir, ours), **(extra_env or {})}
    Path(env["TMPDIR"]).mkdir(exist_ok=True)
    return [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, *extra_overrides], env


def parse_step_line(line: str) -> Optional[tuple[int, dict[str, float]]]:
    """verl's console logger line ``step:N - key:value - ...`` as ``(N, {key: value})``."""
    match = re.search(r"step:(\d+) - (.*)$", line)
    if not match:
        return None
    metrics = {}
    for part in match.group(2).split(" - "):
        key, _, raw = part.partition(":")
        raw = re.sub(r"np\.\w+\((.*)\)", r"\1", raw.strip())  # the legacy trainer logs np.float64(x)
        number = re.search(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", raw)
        if key and number:
            metrics[key.strip()] = float(number.group(0))
    return int(match.group(1)), metrics


# The metrics the clock or the machine decides (wall-clock times, throughputs, MFU, memory): they
# differ between two runs of one seed; every other key verl logs is decided by the seed (measured:
# docs/cpu-backend.md, "Same seed, same run").
CLOCK_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/")
SEED_PERF_METRICS = {"perf/total_num_tokens"}  # a token count, under perf/


def is_clock_metric(key: str) -> bool:
    return (key.startswith(CLOCK_PREFIXES) or "/perf/" in key) and key not in SEED_PERF_METRICS


def weight_digests(trace_lines: Sequence[str]) -> dict[int, str]:
    """``{global_steps: sha256}`` of the weights each rollout server received (the trace's
    ``weights`` lines); where the servers of several ranks received different weights, the value
    says so: ``differ: <digest>, <digest>`` (the ranks' copies of the actor diverged)."""
    seen: dict[int, list[str]] = {}
    for line in trace_lines:
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        if line.startswith("weights ") and "sha256" in fields:
            digests = seen.setdefault(int(fields["global_steps"]), [])
            if fields["sha256"] not in digests:
                digests.append(fields["sha256"])
    return {step: digests[0] if len(digests) == 1 else "differ: " + ", ".join(digests)
            for step, digests in seen.items()}


def write_metrics(out_dir: Path, resumed: bool = False) -> dict[int, dict]:
    """Split verl's ``file`` logger output (``VERL_METRICS``, this run's steps) into ``METRICS``
    (what the seed decides) and ``TIMING`` (``is_clock_metric``), one line ``{"step": N, ...}``
    per step, keys sorted, floats at full precision (JSON's shortest round trip). A resumed run
    keeps the lines of the earlier run before its own first step (those of a killed run too:
    ``_run`` splits its ``VERL_METRICS`` before the resumed trainer starts; a line cut short by
    the kill is left out). Returns METRICS' lines by step."""
    raw = out_dir / VERL_METRICS
    if not raw.exists():
        return {}
    steps = {int(record["step"]): record["data"] for record in _complete_lines(raw)}
    if resumed and not steps:  # a resumed run killed before its first step: the earlier lines stay
        return {}
    result = {}
    for name, keep in ((METRICS, lambda key: not is_clock_metric(key)), (TIMING, is_clock_metric)):
        path = out_dir / name
        earlier = {}
        if resumed and path.exists() and steps:
            earlier = {line["step"]: line for line in _complete_lines(path) if line["step"] < min(steps)}
        lines = {**earlier, **{step: {"step": step, **{key: data[key] for key in sorted(data) if keep(key)}}
                               for step, data in steps.items()}}
        partial = path.with_name(path.name + ".partial")  # replaced in one step: a kill leaves the old file or the new
        partial.write_text("".join(json.dumps(lines[step]) + "\n" for step in sorted(lines)))
        os.replace(partial, path)
        if name == METRICS:
            result = lines
    return result


def _complete_lines(path: Path) -> list[dict]:
    """The JSON objects of ``path``, one per line, without a line a kill cut short (verl's logger
    writes a line at a time; so did this module before it replaced its files in one step)."""
    lines = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            lines.append(record)
    return lines


PR_SET_PDEATHSIG = 1  # prctl(2): the signal the kernel sends a process when its parent ends
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with(parent: int) -> Optional[Callable[[], None]]:
    """Run in the trainer before verl starts: the kernel kills it (SIGKILL) the moment the launcher
    (``parent``) ends, however it ends (Linux's ``PR_SET_PDEATHSIG``), so verl's driver cannot
    record another checkpoint; ``guard`` kills the rest of the run. ``None`` off Linux."""
    if _LIBC is None:
        return None

    def arm() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the launcher ended before the call
            os._exit(1)
    return arm


WORKER_GRACE_S = 20.0  # after a worker of the run ended, verl's trainer has this long to stop by itself
WATCH_S = 0.25  # how often the launcher looks at the run's workers
# No progress (a new step line, trace line or checkpoint) for this long, once the workers are up
# (the run trace's first line), and the run is stopped naming the stalled process: the longest gap
# measured between two of them is STALL_MEASURED_S (docs/cpu-backend.md, "A hung worker").
STALL_S = 300.0
@dataclass
class WorkerDeath:
    """A Ray process of the run (an actor's or a task's worker, or the node's raylet or GCS) that
    ended while verl trained, or (``stalled``) one the run waited on with no progress for
    ``STALL_S``: its title (``ray::WorkerDict``) and pid, the last step verl had logged or
    checkpointed when it was seen (0: none), whether verl stopped by itself
    within ``WORKER_GRACE_S`` (else the launcher stopped the run), and the seconds from the death
    seen to the end of the run (every process of it gone: ``run`` returned)."""

    pid: int
    title: str
    after_step: int
    seen: float  # time.monotonic()
    stopped_by_launcher: bool = False
    seconds: float = 0.0
    with_it: list = field(default_factory=list)  # (pid, title) of the workers seen gone in the same look
    stalled: str = ""  # for a hung run: how the process was found (``stopped (SIGSTOP)``, ``busy in its task``)


# Ray's errors for a call on an actor or a task whose worker process ended
DEATH_ERRORS = ("ActorDiedError", "RayActorError", "WorkerCrashedError", "ActorUnavailableError", "NodeDiedError",
                "OwnerDiedError", "ObjectLostError")  # Ray's words that a process of the run is gone


def _driver_failed(log: Sequence[str]) -> bool:
    """verl's driver reported an error of its own (not Ray's word that a worker died; an actor's
    lines, prefixed ``(Name pid=N)``, aside): workers that end after it are its shutdown, not the cause."""
    return (any(line.startswith(("Traceback", "Error executing job")) for line in log)
            and not any(name in line for line in log for name in DEATH_ERRORS))


def _death_in_log(log: Sequence[str], after_step: int) -> Optional[WorkerDeath]:
    """The worker Ray's error in verl's driver names (``ActorDiedError: ...``, then ``class_name:``
    and ``pid:`` lines), for a death the watch did not see (verl stopped first, or the worker ran
    outside the trainer's session: a multi-node run's)."""
    text = "".join(line for line in log if not re.sub(r"\x1b\[[0-9;]*m", "", line).startswith("("))
    match = re.search(rf"(?:{'|'.join(DEATH_ERRORS)})\b.*?class_name: ([\w.<>]+)\s.*?pid: (\d+)", text, re.S)
    if not match:
        return None
    return WorkerDeath(int(match[2]), "ray::" + match[1].rsplit(".", 1)[-1], after_step, time.monotonic())


def _name_death(result: RunResult, last_step: int) -> None:
    """After the trainer ended: a death the watch saw is no death when verl's driver failed on an
    error of its own (``_driver_failed``: its shutdown ended the worker, and on a loaded machine the
    watch can see that before the driver's error reaches the launcher); a death the watch did not
    see is taken from Ray's error in verl's log (``_death_in_log``); when Ray's error names a
    worker, that one died, whatever the watch saw end first (those Ray ended with it: a 2-rank
    run's ``TransferQueueController``; or, on a loaded machine, verl's ``TaskRunnerV1`` ending on
    the error before the watch looked at the dead worker). A death of the node's raylet or GCS seen
    by the watch stays theirs (the workers, and Ray's errors, follow it), and so does a stall."""
    named = _death_in_log(result.log, last_step) if result.returncode != 0 else None
    if result.death and (result.death.title in guard.RAY_NODE or result.death.stalled):
        return  # a raylet's or GCS's death ends every worker (Ray's errors then name one); a stall is no death
    if result.death and not result.death.stopped_by_launcher and named is None and _driver_failed(result.log):
        result.death = None  # verl's driver failed on an error of its own (a checkpoint it could not write): the
        #                      worker the watch saw end before that error reached this process was its shutdown
    elif result.death is None and not result.timed_out:
        result.death = named
    elif result.death and named and named.pid != result.death.pid:
        result.death.with_it = [(p, t) for p, t in result.death.with_it if p != named.pid]
        result.death.with_it.append((result.death.pid, result.death.title))
        result.death.pid, result.death.title = named.pid, named.title


def _last_step(result: RunResult, out_dir: Path) -> int:
    """The last step of the run logged or checkpointed (a step's checkpoint and weight sync come
    before its console line); 0 before the first."""
    return max(max(result.steps, default=0), saved_step(out_dir) or 0)


def _stalled(sid: int) -> tuple[int, str, str]:
    """The process of session ``sid`` a run with no progress waits on: a Ray process stopped
    (``T``: SIGSTOP, a debugger), else a Ray worker busy in a task (its title names the method:
    ``ray::WorkerDict.update_actor``), else verl's driver: ``(pid, title, how)``."""
    found = {pid: (guard.title(pid) or "", guard._stat(pid)) for pid in guard.members({sid}, {})}
    ray = {pid: (name, stat) for pid, (name, stat) in found.items() if stat and name.startswith("ray::")
           and name != guard.IDLE and name not in guard.RAY_AGENTS}
    stopped = sorted(pid for pid, (_, stat) in ray.items() if stat[3] in "Tt")
    if stopped:
        return stopped[0], ray[stopped[0]][0].split(".", 1)[0], "stopped (state T: SIGSTOP or a debugger)"
    busy = sorted(pid for pid, (name, _) in ray.items() if "." in name and not name.startswith("ray::TaskRunner"))
    if busy:
        return busy[0], ray[busy[0]][0], "in a task that does not return"
    return sid, "verl's driver (main_ppo)", "waiting, no Ray worker stopped or busy"


def _progress(result: RunResult, out_dir: Path, trace_path: Path) -> tuple:
    """What moves while verl trains: the steps logged, the run trace's size (several lines a step:
    advantages, every policy-loss call, every weight sync) and verl's tracker."""
    try:
        size = trace_path.stat().st_size
    except OSError:
        size = 0
    return len(result.steps), size, saved_step(out_dir)


def _watch_workers(process: subprocess.Popen, result: RunResult, steps: int, out_dir: Path,
                   trace_path: Optional[Path] = None, manifests: Optional[Manifests] = None,
                   stall_s: float = STALL_S) -> None:
    """Until the trainer ends: the first Ray worker of its session (or its raylet or GCS) that ends
    before the last step was logged (and before verl's driver reported an error) is ``result.death``;
    verl then has ``WORKER_GRACE_S`` to stop, after which every process of the session is killed (a
    driver left waiting on a dead actor, or a rank on a dead peer, would wait for ever). Once the
    workers are up (the trace's first line), a run without progress (``_progress``) for ``stall_s``
    is stalled: the process it waits on (``_stalled``) is ``result.death`` and the run is killed.
    Each checkpoint verl records gets its manifest (``manifests``)."""
    workers = guard.WorkerWatch(process.pid)
    trace_path = trace_path or Path(out_dir) / trace.TRACE_FILE
    manifests = manifests or Manifests(out_dir)
    last, changed = _progress(result, out_dir, trace_path), time.monotonic()
    while process.poll() is None:
        manifests.poll()
        gone = workers.poll()
        if gone and max(result.steps, default=0) < steps and not _driver_failed(result.log):
            gone.sort(key=lambda worker: worker[1] not in guard.RAY_NODE)  # the raylet's end takes its workers
            (pid, title), *others = gone
            result.death = WorkerDeath(pid, title, _last_step(result, out_dir), time.monotonic(), with_it=others)
            while process.poll() is None and time.monotonic() - result.death.seen < WORKER_GRACE_S:
                time.sleep(0.1)
            if process.poll() is None:
                result.death.stopped_by_launcher = True
                guard.reap({process.pid}, {})
            return
        now, progress = time.monotonic(), _progress(result, out_dir, trace_path)
        if progress != last or not progress[1]:
            last, changed = progress, now
        elif now - changed >= stall_s and max(result.steps, default=0) < steps:
            pid, title, how = _stalled(process.pid)
            result.death = WorkerDeath(pid, title, _last_step(result, out_dir), now, stopped_by_launcher=True,
                                       stalled=f"{how}; the run made no progress for {now - changed:.0f} s")
            guard.reap({process.pid}, {})
            return
        time.sleep(WATCH_S)


@dataclass
class RunResult:
    """What one CPU run of verl showed: exit code, per-step metrics, the trace, the driver pid."""

    returncode: int
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)
    driver_pids: set[int] = field(default_factory=set)
    log: list[str] = field(default_factory=list)
    log_path: Optional[Path] = None
    seconds: float = 0.0
    timed_out: bool = False
    nodes: list = field(default_factory=list)  # cluster.NodeInfo of each Ray node (multi-node runs)
    node_of_pid: dict[int, str] = field(default_factory=dict)  # every actor's pid -> its Ray node id
    digests: dict[int, str] = field(default_factory=dict)  # trainer step -> sha256 of the weights after it
    metrics: dict[int, dict] = field(default_factory=dict)  # step -> metrics.jsonl's line (full precision)
    death: Optional[WorkerDeath] = None  # a Ray worker of the run that ended while verl trained
    planned_steps: int = 0  # the run's --steps (a resumed run's: its last step)
    save_every: Optional[int] = None

    @property
    def digest(self) -> str:
        """sha256 of the actor's weights after the last step ('' if no server received any)."""
        return self.digests[max(self.digests)] if self.digests else ""

    def read_step(self, line: str) -> Optional[tuple[int, dict[str, float]]]:
        """One line of verl's output: a step's metrics line is recorded (its metrics, and the pid of
        the driver that printed it) and returned as ``(step, metrics)``; any other line gives ``None``."""
        parsed = parse_step_line(line)
        if parsed:
            self.steps[parsed[0]] = parsed[1]
            driver = re.search(r"\((TaskRunner\w*) pid=(\d+)\)", line)
            if driver:
                self.driver_pids.add(int(driver.group(2)))
        return parsed


def run(estimator: str, out_dir: Path, steps: int = 2, legacy: bool = False, echo: bool = True,
        timeout: float = 900, ranks: int = 1, seed: int = 0, ours: bool = True,
        loggers: tuple[str, ...] = ("console",), assets_dir: Optional[Path] = None, multi_turn: bool = False,
        on_step: Optional[Callable[[int, dict[str, float]], None]] = None, nodes: int = 1,
        node_env: Optional[dict[int, dict[str, str]]] = None, extra_overrides: Sequence[str] = (),
        extra_env: Optional[dict[str, str]] = None, save_every: Optional[int] = None, resume: bool = False,
        example: Sequence[str] = (), stall_s: float = STALL_S) -> RunResult:
    """Run verl's ``main_ppo`` on the CPU; its whole log goes to ``out_dir/verl.log`` (and to stdout
    with ``echo``); ``on_step(step, metrics)`` is called as each step's console line arrives.
    One node: verl starts its Ray with ``RAY_TMPDIR`` a temporary directory of the run's own.
    ``nodes > 1``: on a ``cluster.LocalCluster`` of that many nodes (one rank each, ``node_env[i]``
    added to node ``i``'s environment), started before verl and stopped after it, whatever happens.
    Every step's metrics end in ``out_dir/metrics.jsonl`` and ``timing.jsonl`` (``write_metrics``).
    Nothing of the run outlives the calling process (``guard``: killed, however it ends; its line
    in ``out_dir/guard.log``). A Ray worker of the run that ends while verl trains is
    ``result.death``; verl has ``WORKER_GRACE_S`` to stop, then the run is killed (``_watch_workers``);
    a run without progress for ``stall_s`` once its workers are up is killed too, the process it
    waits on its ``result.death``. Each checkpoint verl records gets its manifest (``Manifests``)."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with guard.Guard(out_dir / GUARD_LOG) as watch:
        if nodes == 1:
            # Ray's files (its sessions, the address file `ray status` and `auto` read) go to a directory of
            # the run's own, removed after it, not to the machine's shared /tmp/ray (under /tmp: Ray's socket
            # paths are short)
            with tempfile.TemporaryDirectory(prefix="rfpp-ray-", dir="/tmp", ignore_cleanup_errors=True) as ray_tmp:
                os.makedirs(os.path.join(ray_tmp, "ray"))
                watch.folder(ray_tmp)  # removed by the guard if this process dies before the block's end
                result = _run(watch, estimator, out_dir, steps, legacy, echo, timeout, ranks, seed, ours, loggers,
                              assets_dir, multi_turn, on_step, extra_overrides=extra_overrides,
                              extra_env={"RAY_TMPDIR": ray_tmp, **(extra_env or {})}, save_every=save_every,
                              resume=resume, stall_s=stall_s)
        else:
            env = trainer_environment(Path(out_dir).resolve(), ours)
            changed = {key: value for key, value in env.items() if os.environ.get(key) != value}
            with cluster.LocalCluster(nodes=nodes, num_cpus=8, num_gpus=1, env=changed,
                                      node_env=node_env) as ray_cluster:
                for pid in ray_cluster.processes():
                    watch.pid(pid)
                watch.folder(ray_cluster.temp_dir)
                result = _run(watch, estimator, out_dir, steps, legacy, echo, timeout, nodes, seed, ours, loggers,
                              assets_dir, multi_turn, on_step, nodes, ray_cluster.address, extra_overrides,
                              extra_env, save_every, resume, example, stall_s)
                result.nodes, result.node_of_pid = ray_cluster.nodes(), ray_cluster.node_of_pids()
    if result.death is not None:  # the guard has killed what was left of the run
        result.death.seconds = time.monotonic() - result.death.seen
    return result


def _run(watch, estimator, out_dir, steps, legacy, echo, timeout, ranks, seed, ours, loggers, assets_dir, multi_turn,
         on_step, nodes=1, address=None, extra_overrides=(), extra_env=None, save_every=None, resume=False,
         example=(), stall_s=STALL_S) -> RunResult:
    out_dir = Path(out_dir).resolve()
    argv, env = command(estimator, out_dir, steps, legacy, ranks, seed, ours, loggers, assets_dir, multi_turn,
                        nodes, address, extra_overrides, extra_env, save_every, resume, example)
    trace_path = Path(env[trace.TRACE_ENV])
    trace_path.unlink(missing_ok=True)
    if resume:  # the steps of a run killed before it split its metrics (write_metrics) are kept
        write_metrics(out_dir, resumed=True)
    Path(env["VERL_FILE_LOGGER_PATH"]).unlink(missing_ok=True)
    result = RunResult(returncode=-1, log_path=out_dir / "verl.log", planned_steps=steps, save_every=save_every)
    started = time.monotonic()
    # A session of its own: the guard kills it (and what it started elsewhere) when this process ends.
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=out_dir, bufsize=1, start_new_session=True, preexec_fn=_die_with(os.getpid()))
    watch.session(process.pid)
    # The watchdog fires even when a hung trainer prints nothing (a deadline checked per line would not).
    def kill() -> None:
        result.timed_out = True
        os.killpg(process.pid, signal.SIGKILL)

    watchdog = threading.Timer(timeout, kill)
    watchdog.start()
    manifests = Manifests(out_dir)
    if resume:  # the checkpoint it starts from was verified (resume_problem), not described again
        manifests.done.add(saved_step(out_dir))
    if echo:
        print(f"verl-rfpp: a run with no progress (a step, a line of {trace_path.name}, a checkpoint) for "
              f"{stall_s:.0f} s once its workers are up is stopped, naming the process it waits on; a run "
              f"still going after {timeout:.0f} s is stopped", flush=True)
    watcher = threading.Thread(target=_watch_workers, args=(process, result, steps, out_dir, trace_path, manifests,
                                                            stall_s), daemon=True)
    watcher.start()
    assert process.stdout is not None
    try:
        with open(result.log_path, "w", buffering=1) as log_file:
            log_file.write("$ " + " ".join(argv) + "\n")
            for line in process.stdout:
                result.log.append(line)
                log_file.write(line)
                if echo:
                    sys.stdout.write(line)
                parsed = result.read_step(line)
                if parsed and on_step:
                    on_step(*parsed)
        result.returncode = process.wait()
        watcher.join()  # its last look: a death or a stall it records is the run's
        manifests.poll()  # a checkpoint recorded in the run's last moments
        _name_death(result, _last_step(result, out_dir))
    finally:  # Ctrl-C or any error here: the trainer and the Ray processes it started go too
        watchdog.cancel()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    result.seconds = time.monotonic() - started
    if trace_path.exists():
        result.trace = trace_path.read_text().splitlines()
    result.digests = weight_digests(result.trace)
    result.metrics = write_metrics(out_dir, resume)
    return result

"""The configuration of one CPU run of verl's ``main_ppo``: the algorithm's recipe (``recipe``),
the overrides a 2-core run of the tiny model needs (``trainer_overrides``; the multi-node
example's, ``NOT_FOR_CPU``, ``REPLACED_FOR_CPU``), the trainer's environment that switches the CPU
backend on (``trainer_environment``), and the two together with the assets built (``command``).
Nothing is run here: ``verl_rfpp.cpu.launch`` runs and supervises what ``command`` returns."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from verl_rfpp import catalog, validation
from verl_rfpp.cpu import ROLLOUT_NAME, assets, cluster, trace
from verl_rfpp.cpu.checkpoints import CHECKPOINTS
from verl_rfpp.cpu.run_metrics import VERL_METRICS
from verl_rfpp.errors import LaunchError

TEMP = "tmp"  # the trainer's TMPDIR in the run's folder: verl's checkpoint locks (verl/utils/fs.py) land there

GRPO = "grpo"
BACKEND = "verl_rfpp.cpu.backend"  # the CPU backend's activating module, imported by verl (VERL_USE_EXTERNAL_MODULES)
SAMPLES = 4  # responses per prompt
PROMPTS = 4  # prompts per step (one mini-batch, one optimizer step per training step)


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
    # the Ray verl starts gets a token of its own in the run's folder (Ray would leave ~/.ray/auth_token);
    # a cluster the run joins (LocalCluster's) or a user's RAY_AUTH_* choice is already in env and kept
    cluster.private_auth_token(env["TMPDIR"], env)
    return [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, *extra_overrides], env

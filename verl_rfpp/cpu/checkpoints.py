"""A CPU run's folder across runs: one run at a time in it (``hold_folder``: its lock), the
checkpoints verl saves there (``CHECKPOINTS``, verl's tracker ``TRACKER``), the manifest the
launcher writes for each (``Manifests``, ``checkpoint_problem``), the options of the run that saved
them (``write_run_settings``), and whether a run can resume from them (``resume_problem``,
``resume_note``). No process is started here."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Optional

from verl_rfpp.errors import LaunchError

CHECKPOINTS = "checkpoints"  # trainer.default_local_dir
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

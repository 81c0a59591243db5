"""Nothing a launch script supplies runs when check judges a run in the script's environment (issue 38
item 4; docs/contract.md section 6.5). The script exports a ``PYTHONPATH`` holding a
``sitecustomize.py`` and a ``usercustomize.py``, an ``LD_PRELOAD`` library (compiled here when a C
compiler exists), a ``PYTHONHOME`` whose ``encodings`` package and a ``PYTHONSTARTUP`` file would
run, and a ``VERL_USE_EXTERNAL_MODULES`` module: each writes its own witness file when it runs. check,
run as a user runs it, must leave every witness absent; with ``--import-user-modules`` only the
module's appears."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verl_rfpp import catalog, validation

pytestmark = pytest.mark.slow  # check in a process of its own, and its child python

BASELINE = " ".join(validation.RECIPES[catalog.REINFORCE_PLUS_PLUS_BASELINE.name])


def _witnessing(tmp_path: Path) -> tuple[Path, dict]:
    """The hostile script and the witness file of each thing it supplies."""
    site, home, witnesses = tmp_path / "site", tmp_path / "home", tmp_path / "witnesses"
    for folder in (site, home / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "encodings",
                   witnesses):
        folder.mkdir(parents=True)
    marks = {name: witnesses / name for name in ("sitecustomize", "usercustomize", "pythonhome", "startup",
                                                 "module", "ld_preload")}

    def writes(name: str) -> str:
        return f"open({str(marks[name])!r}, 'w').write('ran')\n"

    (site / "sitecustomize.py").write_text(writes("sitecustomize"))
    (site / "usercustomize.py").write_text(writes("usercustomize"))
    (site / "users_module.py").write_text(writes("module"))
    (home / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "encodings" / "__init__.py").write_text(
        writes("pythonhome"))
    (tmp_path / "startup.py").write_text(writes("startup"))
    exports = [f"export PYTHONPATH={site}", f"export PYTHONHOME={home}", f"export PYTHONSTARTUP={tmp_path}/startup.py",
               "export VERL_USE_EXTERNAL_MODULES=users_module", "export PYTHONUSERBASE=/nonexistent"]
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler:
        source = tmp_path / "preload.c"
        source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void ran(void) {\n'
                          f'  FILE *f = fopen("{marks["ld_preload"]}", "w");\n'
                          '  if (f) { fputs("ran", f); fclose(f); }\n}\n')
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(tmp_path / "preload.so"), str(source)], check=True,
                       timeout=60)
        exports.append(f"export LD_PRELOAD={tmp_path}/preload.so")
    else:
        marks.pop("ld_preload")
    script = tmp_path / "run.sh"
    script.write_text("\n".join(exports) + f"\npython3 -m verl.trainer.main_ppo {BASELINE}\n")
    return script, marks


def _check(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch)}
    return subprocess.run([sys.executable, "-m", "verl_rfpp.cli", "check", *options, "run.sh"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)


def test_nothing_the_script_supplies_runs_and_its_modules_only_when_asked(tmp_path):
    script, marks = _witnessing(tmp_path)
    done = _check(tmp_path)
    ran = sorted(name for name, mark in marks.items() if mark.exists())
    assert ran == [], (ran, done.stdout, done.stderr)
    assert done.returncode == 0 and "OK: this config runs" in done.stdout, done.stdout + done.stderr
    assert "note: not imported: module users_module (VERL_USE_EXTERNAL_MODULES)" in done.stdout, done.stdout
    done = _check(tmp_path, "--import-user-modules")
    ran = sorted(name for name, mark in marks.items() if mark.exists())
    assert ran == ["module"] and done.returncode == 0, (ran, done.stdout, done.stderr)


def test_a_verdict_the_users_modules_decide_is_exit_2_without_importing_them(tmp_path):
    """A near miss of our name with the script's own module: it may register that name (section 6.3)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "my_estimator.py").write_text(
        "from verl.trainer.ppo.core_algos import register_adv_est\n\n"
        "@register_adv_est('reinforce_plus_plus_baselin')\ndef mine(*args, **kwargs):\n    raise NotImplementedError\n")
    (tmp_path / "run.sh").write_text(
        f"export PYTHONPATH={site}\nexport VERL_USE_EXTERNAL_MODULES=my_estimator\n"
        f"python3 -m verl.trainer.main_ppo {BASELINE} algorithm.adv_estimator=reinforce_plus_plus_baselin\n")
    done = _check(tmp_path)
    assert done.returncode == 2 and "--import-user-modules" in done.stdout, done.stdout + done.stderr
    assert "'reinforce_plus_plus_baselin' is an estimator that module my_estimator" in done.stdout
    done = _check(tmp_path, "--import-user-modules")
    assert done.returncode == 0 and "not a verl-rfpp estimator" in done.stdout, done.stdout + done.stderr

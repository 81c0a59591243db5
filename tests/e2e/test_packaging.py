"""The released artifacts: ``python -m build`` gives an sdist and a wheel without warnings, the wheel
holds the package (py.typed and LICENSE included) and nothing else, and a non-editable install of
it runs ``verl-rfpp doctor`` from outside the checkout.

Marked ``e2e`` (about a minute: the build, then doctor imports verl and compiles the CPU kernels
in a fresh location). Everything is built from a copy of the sources under ``tmp_path``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import verl_rfpp

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
VERSION = verl_rfpp.__version__
# Files and folders that are never released: caches, build products, run outputs.
NEVER_RELEASED = re.compile(
    r"(^|/)(__pycache__|\.pytest_cache|\.hypothesis|outputs|rfpp-demo|build|dist)/|\.py[cod]$|\.nb[ic]$"
    r"|\.egg-info/"
)


def _copy_sources(destination: Path) -> Path:
    """What an sdist is built from, copied so the build writes nothing into the repository."""
    ignore = shutil.ignore_patterns(
        "__pycache__", "*.pyc", "*.nbi", "*.nbc", "*.egg-info", "build", "dist", "outputs", "rfpp-demo"
    )
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in"):
        shutil.copy2(ROOT / name, destination / name)
    for folder in ("verl_rfpp", "docs", "examples", "benchmarks", "tests"):
        shutil.copytree(ROOT / folder, destination / folder, ignore=ignore)
    return destination


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """``(wheel, sdist, build log)`` of ``python -m build`` on a copy of the sources."""
    source = _copy_sources(tmp_path_factory.mktemp("source"))
    dist = tmp_path_factory.mktemp("dist")
    env = dict(os.environ)
    # Set in some shells and CI images; it only makes setuptools say it skips byte-compiling.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # --no-isolation: the same backend with this environment's setuptools (the [test] extra pins
    # setuptools>=77.0.3 like [build-system]); an isolated build only adds ~40 s of installing it.
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    return dist / f"verl_rfpp-{VERSION}-py3-none-any.whl", dist / f"verl_rfpp-{VERSION}.tar.gz", log


def test_build_gives_sdist_and_wheel_without_warnings(built: tuple[Path, Path, str]) -> None:
    wheel, sdist, log = built
    assert wheel.is_file() and sdist.is_file()
    noisy = [line for line in log.splitlines() if re.search(r"(?i)warn|deprecat", line)]
    assert noisy == []


def test_wheel_holds_the_package_license_and_nothing_else(built: tuple[Path, Path, str]) -> None:
    wheel, _, _ = built
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"verl_rfpp-{VERSION}.dist-info/METADATA").decode()
        entry_points = archive.read(f"verl_rfpp-{VERSION}.dist-info/entry_points.txt").decode()
    dist_info = f"verl_rfpp-{VERSION}.dist-info/"
    assert [name for name in names if not name.startswith(("verl_rfpp/", dist_info))] == []
    assert [name for name in names if NEVER_RELEASED.search(name)] == []
    packaged = {name for name in names if name.startswith("verl_rfpp/")}
    on_disk = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "verl_rfpp").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert on_disk <= packaged  # every module, cpu/ and bandit/ included
    assert "verl_rfpp/py.typed" in packaged
    assert f"{dist_info}licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata
    assert re.search(r"(?m)^Requires-Dist: torch>=", metadata)
    assert re.search(r"(?ms)^\[verl\.plugins\]\s*\nverl_rfpp = verl_rfpp\.plugin$", entry_points)
    assert "verl-rfpp = verl_rfpp.cli.main:main" in entry_points


def test_sdist_holds_sources_docs_and_tests_but_no_run_outputs(built: tuple[Path, Path, str]) -> None:
    _, sdist, _ = built
    with tarfile.open(sdist) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", "docs/contract.md", "verl_rfpp/py.typed",
                   "tests/support/reference.py", "examples/README.md"):
        assert needed in names
    assert [name for name in names if NEVER_RELEASED.search(name) and "egg-info" not in name] == []


def test_non_editable_install_runs_doctor_outside_the_checkout(
    built: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """Install the wheel alone (verl, torch and the rest come from this environment) into a folder
    that comes first on the path, then run its ``verl-rfpp doctor`` from an unrelated directory."""
    wheel, _, _ = built
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--quiet",
         "--disable-pip-version-check", "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr[-4000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("NUMBA_CACHE_DIR", None)  # the kernels' cache goes next to the installed package
    where = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('verl_rfpp').origin)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )
    assert where.returncode == 0, where.stderr[-4000:]
    assert Path(where.stdout.strip()).is_relative_to(site)  # the wheel's copy, not the checkout
    doctor = subprocess.run(
        [str(site / "bin" / "verl-rfpp"), "doctor"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600,
    )
    assert doctor.returncode == 0, doctor.stdout[-4000:] + doctor.stderr[-4000:]
    assert "verl-rfpp is active." in doctor.stdout

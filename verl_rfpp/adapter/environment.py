"""What ``import verl`` loads in a launch script's environment (docs/contract.md section 6.5): the
variables a script exports that decide it (``VERL_USE_EXTERNAL_PLUGINS``,
``VERL_USE_EXTERNAL_MODULES``, ``PYTHONPATH``) are applied in a child Python process, which
imports verl and reports whether verl loaded this plugin, why not, and the advantage estimators
verl's registry then holds. Never asked when the script leaves those variables as check's own
environment has them.

Nothing the script supplies runs by default. The child starts isolated (``python -I``: no
``PYTHON*`` variable, no user site, so no ``sitecustomize``/``usercustomize`` from the script's
``PYTHONPATH``, no ``PYTHONHOME``, no startup file) with only the variables the judgement needs
(never the script's ``LD_PRELOAD``/``LD_LIBRARY_PATH``), check's own ``sys.path``, its cwd a
private directory, at most ``TIMEOUT_S`` seconds and ``MEMORY_BYTES`` of address space. The
user's modules the script names (``VERL_USE_EXTERNAL_MODULES``, verl plugins installed on its
``PYTHONPATH``) are imported only with ``import_user_modules`` (check's
``--import-user-modules``): then the script's ``PYTHONPATH`` entries come first on the child's
``sys.path``, as in the run."""

from __future__ import annotations

import configparser
import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from verl_rfpp import catalog

LOADING_VARIABLES = ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES", "PYTHONPATH")
TIMEOUT_S = 120  # importing verl and torch takes about 5 s on an idle machine
MEMORY_BYTES = 4 << 30  # address space (RLIMIT_AS); importing verl and torch peaks near 1 GiB

_SOURCE = """
import json, sys
sys.path[:] = PATHS
import verl
from verl.trainer.ppo import core_algos
loaded = "verl_rfpp.plugin" in sys.modules
registered = sorted(core_algos.ADV_ESTIMATOR_REGISTRY)
problems = {}
if not loaded:
    from verl_rfpp.adapter.registries import not_loaded_problem
    problems = {name: not_loaded_problem(name) for name in NAMES}
print("\\nverl-rfpp-environment " + json.dumps({"loaded": loaded, "problems": problems, "registered": registered}))
"""


class EnvironmentUnknown(Exception):
    """The child process could not say what verl loads (it failed or timed out): one line."""


@dataclass(frozen=True)
class Loaded:
    """``loaded``: verl loaded this plugin; ``problems``: each estimator's activation problem when
    not; ``registered``: the names verl's advantage registry holds there; ``not_imported``: the
    user's code the run would import that the child did not (modules, plugins on the script's
    PYTHONPATH), each as a phrase naming it."""

    loaded: bool
    problems: Mapping[str, str]
    registered: tuple[str, ...]
    not_imported: tuple[str, ...] = ()


def differs(environment: Mapping[str, str], own: Optional[Mapping[str, str]] = None) -> dict:
    """The loading variables whose value in ``environment`` is not the one in ``own`` (os.environ)."""
    own = os.environ if own is None else own
    return {name: environment.get(name) for name in LOADING_VARIABLES if environment.get(name) != own.get(name)}


def user_code(environment: Mapping[str, str]) -> tuple[str, ...]:
    """What ``import verl`` would import in ``environment`` that is the user's, found without running
    it: the modules of ``VERL_USE_EXTERNAL_MODULES``, and the ``verl.plugins`` entry points of the
    distributions on its ``PYTHONPATH`` that ``VERL_USE_EXTERNAL_PLUGINS`` lets load (read from their
    ``entry_points.txt``)."""
    found = [f"module {name.strip()} (VERL_USE_EXTERNAL_MODULES)"
             for name in environment.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if name.strip()]
    policy = environment.get("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    allowed = None if policy == "auto" else {name.strip() for name in policy.split(",") if name.strip()}
    for entry in _pythonpath(environment):
        for points in sorted(Path(entry).glob("*.*-info/entry_points.txt")) if Path(entry).is_dir() else ():
            parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
            try:
                parser.read_string(points.read_text(errors="replace"))
            except (OSError, configparser.Error):
                found.append(f"the entry points of {points.parent} (PYTHONPATH), which check cannot read")
                continue
            if policy != "none" and parser.has_section("verl.plugins"):
                found += [f"verl plugin {name} ({points.parent}, on PYTHONPATH)" for name in parser["verl.plugins"]
                          if allowed is None or name in allowed]
    return tuple(found)


def _pythonpath(environment: Mapping[str, str]) -> list[str]:
    return [entry for entry in environment.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _limits() -> None:  # runs in the child before it executes python
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def loaded_in(environment: Mapping[str, str], platform: str, import_user_modules: bool = False) -> Loaded:
    """Import verl in an isolated child process with the loading variables of ``environment`` (and
    ``VERL_PLATFORM=platform``: the child starts no program either); what it loaded."""
    used = [name for name in LOADING_VARIABLES if "\0" in environment.get(name, "")]
    if used:
        raise EnvironmentUnknown(f"{used[0]} holds a NUL byte, which no program's environment can")
    code = user_code(environment)
    paths = [*(_pythonpath(environment) if import_user_modules else ()), *(p for p in sys.path if p)]
    source = _SOURCE.replace("NAMES", repr(catalog.names())).replace("PATHS", repr(paths))
    env = {"VERL_PLATFORM": platform, "PATH": "", "LC_ALL": "C.UTF-8"}
    if "VERL_USE_EXTERNAL_PLUGINS" in environment:
        env["VERL_USE_EXTERNAL_PLUGINS"] = environment["VERL_USE_EXTERNAL_PLUGINS"]
    if import_user_modules and environment.get("VERL_USE_EXTERNAL_MODULES"):
        env["VERL_USE_EXTERNAL_MODULES"] = environment["VERL_USE_EXTERNAL_MODULES"]
    with tempfile.TemporaryDirectory(prefix="verl-rfpp-environment-") as place:
        env["TMPDIR"] = env["HOME"] = place
        try:
            done = subprocess.run([sys.executable, "-I", "-c", source], env=env, cwd=place, text=True,
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S,
                                  preexec_fn=_limits)
        except subprocess.TimeoutExpired:
            raise EnvironmentUnknown(f"importing verl with the script's environment took over {TIMEOUT_S} s "
                                     "(check's bound)") from None
    for line in done.stdout.splitlines():
        if line.startswith("verl-rfpp-environment "):
            found = json.loads(line.split(" ", 1)[1])
            return Loaded(found["loaded"], found["problems"], tuple(found["registered"]),
                          () if import_user_modules else code)
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise EnvironmentUnknown(f"importing verl with the script's environment failed (exit status {done.returncode}, "
                             f"within {MEMORY_BYTES >> 30} GiB of address space): {last}")

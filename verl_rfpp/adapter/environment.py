"""What ``import verl`` loads in a launch script's environment (docs/contract.md section 6.5): the
variables a script exports that decide it (``VERL_USE_EXTERNAL_PLUGINS``,
``VERL_USE_EXTERNAL_MODULES``, ``PYTHONPATH``) are applied in a child Python process, which
imports verl (and so the modules those variables name) and reports whether verl loaded this
plugin, why not, and the advantage estimators verl's registry then holds. Never asked when the
script leaves those variables as check's own environment has them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping, Optional

from verl_rfpp.contract import validation

LOADING_VARIABLES = ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES", "PYTHONPATH")
TIMEOUT_S = 300

_SOURCE = """
import json, sys
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
    not; ``registered``: the names verl's advantage registry holds there."""

    loaded: bool
    problems: Mapping[str, str]
    registered: tuple[str, ...]


def differs(environment: Mapping[str, str], own: Optional[Mapping[str, str]] = None) -> dict:
    """The loading variables whose value in ``environment`` is not the one in ``own`` (os.environ)."""
    own = os.environ if own is None else own
    return {name: environment.get(name) for name in LOADING_VARIABLES if environment.get(name) != own.get(name)}


def loaded_in(environment: Mapping[str, str], cwd: Optional[str] = None) -> Loaded:
    """Import verl in a child process with ``environment``; what it loaded."""
    source = _SOURCE.replace("NAMES", repr(validation.ESTIMATOR_NAMES))
    try:
        done = subprocess.run([sys.executable, "-c", source], env=dict(environment), cwd=cwd, text=True,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EnvironmentUnknown(f"importing verl with the script's environment took over {TIMEOUT_S} s") from None
    for line in done.stdout.splitlines():
        if line.startswith("verl-rfpp-environment "):
            found = json.loads(line.split(" ", 1)[1])
            return Loaded(found["loaded"], found["problems"], tuple(found["registered"]))
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise EnvironmentUnknown(f"importing verl with the script's environment failed (exit status {done.returncode}): "
                            f"{last}")

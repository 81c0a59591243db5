"""``verl-rfpp demo --nodes N``'s overrides: the ones ``examples/<MULTINODE_EXAMPLE>`` passes to
``main_ppo``, read from the script itself as ``verl-rfpp check`` reads it (``verl_rfpp.cli.scripts``:
statically, nothing of it runs), given to the CPU run's configuration (``verl_rfpp.cpu.configuration``, which
imports nothing of ``cli``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from verl_rfpp.cli import scripts
from verl_rfpp.cpu.configuration import MULTINODE_EXAMPLE, NOT_FOR_CPU, examples_dir
from verl_rfpp.errors import LaunchError


def example_overrides(nodes: int, script: Optional[Path] = None) -> list[str]:
    """The Hydra overrides ``examples/<MULTINODE_EXAMPLE>`` passes to ``main_ppo`` with
    ``NNODES=nodes`` and one GPU per node, all but ``NOT_FOR_CPU``."""
    script = Path(script) if script else examples_dir() / MULTINODE_EXAMPLE
    if not script.is_file():
        raise LaunchError(f"--nodes runs the overrides of {MULTINODE_EXAMPLE}, not found at {script}; "
                          "run it from a source checkout of verl-rfpp (the script is in examples/)")
    env = {**os.environ, "NNODES": str(nodes), "GPUS_PER_NODE": "1", "DATA_DIR": "unused", "MODEL": "unused"}
    try:
        arguments = scripts.read_script(script, environ=env).launches[0].arguments
    except scripts.ScriptError as error:
        raise LaunchError(str(error)) from error
    return [o for o in arguments if not o.startswith(NOT_FOR_CPU)]

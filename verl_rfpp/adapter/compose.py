"""verl's run config as ``main_ppo`` composes it: Hydra, its packaged ``ppo_trainer`` (or the
``--config-path`` / ``--config-name`` given to main_ppo), then the command-line overrides."""

from __future__ import annotations

import importlib.util
import os
from typing import Optional, Sequence

MAIN_CONFIG_NAME = "ppo_trainer"  # main_ppo's @hydra.main(config_path="config", config_name="ppo_trainer")


def config_dir(config_path: Optional[str] = None) -> str:
    """The directory Hydra reads for main_ppo's ``--config-path``: absolute as given, relative to
    main_ppo's own directory (``verl/trainer``) as Hydra takes a ``config_path``; verl's packaged
    ``verl/trainer/config`` when none is given. Found without importing verl (``find_spec`` of the
    top-level package runs none of its code)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("verl is not installed in this environment (pip install verl)", name="verl")
    here = os.path.join(spec.submodule_search_locations[0], "trainer")
    return os.path.normpath(os.path.join(here, config_path or "config"))


def compose_verl_config(
    overrides: Sequence[str], config_path: Optional[str] = None, config_name: Optional[str] = None
):
    """The config ``python -m verl.trainer.main_ppo [--config-path P] [--config-name N] OVERRIDES``
    runs with (a config of its own may extend ``ppo_trainer`` through ``defaults`` and
    ``hydra.searchpath``, as for main_ppo)."""
    from hydra import compose, initialize_config_dir

    name = config_name or MAIN_CONFIG_NAME
    name = name[: -len(".yaml")] if name.endswith(".yaml") else name
    with initialize_config_dir(config_dir=config_dir(config_path), version_base=None):
        return compose(config_name=name, overrides=list(overrides))

"""What importing verl costs with the plugin: only verl_rfpp's own small modules on top of verl's
(the registries are patched when verl imports them); and what ``verl-rfpp check`` costs: neither verl nor
torch where the installed metadata settles the verdict. Timing is in benchmarks/bench_import.py and
benchmarks/bench_check.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # fresh processes: what `import verl` loads

LOADED = "import json, sys, verl; print(json.dumps(sorted(sys.modules)))"


def _modules_after_import_verl(policy):
    result = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "VERL_USE_EXTERNAL_PLUGINS": policy})
    assert result.returncode == 0, result.stderr[-2000:]
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_plugin_adds_only_its_own_small_modules_to_import_verl():
    with_plugin = _modules_after_import_verl("auto")
    without = _modules_after_import_verl("none")
    assert "verl_rfpp.plugin" in with_plugin
    added = with_plugin - without
    assert {name for name in added if not name.startswith("verl_rfpp")} == set()
    heavy = {"verl_rfpp.core.kernels", "numba", "pandas", "verl.trainer.ppo.core_algos", "verl.workers.engine.base"}
    assert not heavy & with_plugin


def test_registries_are_ours_whichever_way_verl_is_reached():
    """The patches wait for verl's modules: importing them first-hand, or through the trainer."""
    code = (
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn\n"
        "from verl.utils.tracking import Tracking\n"
        "print(get_adv_estimator_fn('reinforce_plus_plus').__module__, "
        "get_adv_estimator_fn('reinforce_plus_plus_baseline').__module__, "
        "get_policy_loss_fn('rfpp').__module__, hasattr(Tracking.log, '__verl_rfpp__'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-4:] == ["verl_rfpp.adapter.registries"] * 2 + ["verl_rfpp.losses", "True"]


CHECKED = """
import json, sys
from verl_rfpp.cli import main as cli
code = cli.main(["check", *sys.argv[1:]])
print(json.dumps([code, sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "verl"))]))
"""


@pytest.mark.parametrize("words,code", [
    (["algorithm.adv_estimator=reinforce_plus_plus_baseline"], 1),
    (["algorithm.adv_estimator=grpo"], 0),
    (["tests/tools/scripts/verl/grpo_trainer/run_deepseek7b_llm.sh",
      "algorithm.adv_estimator=reinforce_plus_plus_baseline"], 1),
], ids=["overrides-refused", "not-ours", "verl-example-script"])
def test_check_imports_neither_torch_nor_verl_where_the_metadata_settles_the_verdict(words, code):
    """Composing needs Hydra and verl's files, the rules OmegaConf; verl's activation comes from the
    installed metadata (``loading.known_active``), so check's process loads no module of verl or torch."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {name: value for name, value in os.environ.items()
           if name not in ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES")}
    result = subprocess.run([sys.executable, "-c", CHECKED, *words], capture_output=True, text=True, timeout=300,
                            cwd=root, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [code, []]

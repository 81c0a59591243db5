"""The opt-in CPU backend's pieces that need no Ray: opt-in loading, the reward, log parsing."""

from __future__ import annotations

import subprocess
import sys

from verl_rfpp.cpu import assets, launch


def test_plugin_never_loads_the_cpu_backend():
    code = "import sys, verl; from verl.trainer.ppo import core_algos; print('verl_rfpp.cpu' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_cpu_backend_registers_platform_and_rollout_when_asked():
    code = (
        "import verl\n"
        "from verl.plugin.platform.platform_manager import PlatformRegistry\n"
        "from verl.workers.rollout.replica import RolloutReplicaRegistry\n"
        "from verl.workers.rollout.base import get_rollout_class\n"
        "import verl.utils.distributed as d\n"
        "print(PlatformRegistry.get('cpu').__name__, RolloutReplicaRegistry.get('hf_cpu').__name__,"
        " get_rollout_class('hf_cpu').__name__, hasattr(d.initialize_global_process_group_ray, '__verl_rfpp_cpu__'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**launch.trainer_environment(launch.Path("/tmp"))})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "PlatformCPU HFReplica HFServerAdapter True"


def test_reward_function_known_values():
    assert assets.compute_score("rfpp_copy_digit", " 3 3x", "3") == 1.0 + 2 / 3
    assert assets.compute_score("rfpp_copy_digit", "ab", "3") == 0.0
    assert assets.compute_score("rfpp_copy_digit", "12", "3") == 1.0
    assert assets.compute_score("rfpp_copy_digit", "   ", "3") == 0.0


def test_console_step_lines_are_parsed_for_both_trainers():
    v1 = "(TaskRunnerV1 pid=7) step:2 - actor/kl_loss:0.0106 - rfpp/valid_tokens:64.0 - x/y:-1.5e-08"
    legacy = "(TaskRunner pid=9) step:1 - actor/kl_loss:np.float64(0.0) - num_turns/max:np.int64(2)"
    assert launch.parse_step_line(v1) == (2, {"actor/kl_loss": 0.0106, "rfpp/valid_tokens": 64.0, "x/y": -1.5e-08})
    assert launch.parse_step_line(legacy) == (1, {"actor/kl_loss": 0.0, "num_turns/max": 2.0})
    assert launch.parse_step_line("no metrics here") is None

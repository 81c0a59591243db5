"""Commands that need an optional extra say which one before starting anything."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED_IMPORT = textwrap.dedent("""
    import sys

    class Blocker:  # what an environment without the module looks like to an import
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    from verl_rfpp.cli import main
    sys.exit(main({argv!r}))
""")


def test_demo_without_the_cpu_extra_names_the_install_command(tmp_path):
    script = BLOCKED_IMPORT.format(blocked={"transfer_queue"}, argv=["demo", "--out", str(tmp_path / "demo")])
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install 'verl-rfpp[cpu]'" in result.stdout and "transfer_queue" in result.stdout
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "demo").exists()  # nothing was started or built

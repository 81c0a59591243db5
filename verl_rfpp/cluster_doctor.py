"""``verl-rfpp doctor --ray ADDRESS``: the local doctor on every alive node of a Ray cluster.

On each node a Ray task (pinned there, ``NodeAffinitySchedulingStrategy(soft=False)``) starts a
fresh Python process with that node's environment, ``python -m verl_rfpp.cli doctor --json``,
exactly what a person running ``verl-rfpp doctor`` on that node gets. The task's function is
pickled by value and imports nothing of ours, so a node without verl-rfpp reports that instead of
failing to unpickle. A node is OK when its report is healthy and its verl-rfpp and verl versions
are the cluster's (the driver's, where the driver has them; else the most common).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from verl_rfpp.doctor import DISTRIBUTION, Report

PROBE_TIMEOUT_S = 300  # one node's doctor: import verl, compile the CPU kernels (numba)

# The probe, built from source so that cloudpickle sends it by value (its module is not
# importable on the node): a node without verl-rfpp must still answer.
_PROBE_SOURCE = '''
def probe(timeout):
    import json, os, socket, subprocess, sys
    import ray
    node = ray.get_runtime_context().get_node_id()
    run = subprocess.run([sys.executable, "-m", "verl_rfpp.cli", "doctor", "--json"], capture_output=True,
                         text=True, timeout=timeout)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else None
    return {"node_id": node, "host": socket.gethostname(), "python": sys.executable, "pid": os.getpid(),
            "returncode": run.returncode, "report": report, "stderr": run.stderr[-2000:],
            "plugins_env": os.environ.get("VERL_USE_EXTERNAL_PLUGINS")}
'''


def _probe_function():
    namespace = {"__name__": "verl_rfpp_node_probe"}
    exec(compile(_PROBE_SOURCE, "<verl-rfpp node probe>", "exec"), namespace)
    return namespace["probe"]


@dataclass
class NodeResult:
    """One node: where it is (from Ray) and what its doctor said (``report`` None: no report)."""

    node_id: str
    address: str
    is_head: bool
    report: Optional[Report]
    returncode: int
    detail: str  # why there is no report (the process's stderr tail), or ""
    plugins_env: Optional[str]

    @property
    def label(self) -> str:
        return f"node {self.node_id[:12]} ({self.address}{', head' if self.is_head else ''})"


@dataclass
class ClusterReport:
    nodes: list[NodeResult]
    expected_verl_rfpp: Optional[str]
    expected_verl: Optional[str]

    def problems(self, node: NodeResult) -> list[str]:
        """What is wrong on ``node``, each with its fix (empty: the node is OK)."""
        found = node.report
        if found is None:
            if "No module named verl_rfpp" in node.detail or "No module named 'verl_rfpp'" in node.detail:
                return [f"verl-rfpp is not installed for this node's Python; fix: pip install "
                        f"'{DISTRIBUTION}=={self.expected_verl_rfpp}' on it" if self.expected_verl_rfpp else
                        f"verl-rfpp is not installed for this node's Python; fix: pip install {DISTRIBUTION} on it"]
            return [f"doctor did not report (exit {node.returncode}): {' '.join(node.detail.split()[-40:])}"]
        problems = []
        if self.expected_verl_rfpp and found.verl_rfpp_version != self.expected_verl_rfpp:
            problems.append(f"verl-rfpp {found.verl_rfpp_version}, the cluster runs {self.expected_verl_rfpp}; "
                            f"fix: pip install '{DISTRIBUTION}=={self.expected_verl_rfpp}' on this node")
        if self.expected_verl and found.verl_version != self.expected_verl:
            problems.append(f"verl {found.verl_version}, the cluster runs {self.expected_verl}; "
                            f"fix: pip install 'verl=={self.expected_verl}' on this node")
        if not found.plugin_loaded:
            cause = (f"VERL_USE_EXTERNAL_PLUGINS={node.plugins_env} in this node's Ray environment excludes it; "
                     "fix: unset it (or add verl_rfpp) where this node's `ray start` runs, then restart the node"
                     if node.plugins_env is not None and node.plugins_env.strip().lower() != "auto" else
                     "fix: see the node's `verl-rfpp doctor`")
            problems.append(f"`import verl` does not load the plugin: {cause}")
        failed = [label for label in found.failed if label != "plugin loaded by `import verl`"]
        if failed:
            problems.append("FAIL: " + "; ".join(failed))
        return problems

    @property
    def healthy(self) -> bool:
        return bool(self.nodes) and not any(self.problems(node) for node in self.nodes)

    def render(self) -> str:
        lines = []
        for node in self.nodes:
            problems = self.problems(node)
            found = node.report
            if found is not None:
                hooks = [label for label, _ in found.checks]
                summary = (f"verl-rfpp {found.verl_rfpp_version}, verl {found.verl_version}, plugin "
                           f"{'loaded' if found.plugin_loaded else 'NOT loaded'} by `import verl`, "
                           f"{sum(ok for _, ok in found.checks)}/{len(hooks)} checks ok")
            else:
                summary = "no doctor report"
            lines.append(f"{'OK  ' if not problems else 'FAIL'}  {node.label}: {summary}"
                         + "".join(f"\n        {problem}" for problem in problems))
        bad = [node.label for node in self.nodes if self.problems(node)]
        lines.append(f"\nverl-rfpp is active on all {len(self.nodes)} nodes, one version everywhere." if not bad
                     else f"\nverl-rfpp is NOT active the same way on every node: {', '.join(bad)}.")
        return "\n".join(lines)


def check(address: str, timeout: float = PROBE_TIMEOUT_S) -> ClusterReport:
    """Connect to the cluster at ``address`` (as ``ray.init(address=...)`` takes it, ``auto``
    included) and run the doctor on every alive node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        head = next((n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n.get("Resources", {})), None)
        alive = [n for n in ray.nodes() if n["Alive"]]
        probe = ray.remote(num_cpus=0, max_retries=0)(_probe_function())
        pending = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                   .remote(timeout) for n in alive]
        answers = ray.get(pending, timeout=timeout + 60)
    finally:
        ray.shutdown()
    nodes = []
    for info, answer in zip(alive, answers):
        report = Report.from_dict(answer["report"]) if answer["report"] else None
        nodes.append(NodeResult(info["NodeID"], f"{info['NodeManagerAddress']}:{info['NodeManagerPort']}",
                                info["NodeID"] == head, report, answer["returncode"],
                                "" if report else answer["stderr"], answer["plugins_env"]))
    nodes.sort(key=lambda node: not node.is_head)
    return ClusterReport(nodes, *_expected_versions(nodes))


def _expected_versions(nodes: list[NodeResult]) -> tuple[Optional[str], Optional[str]]:
    """The versions every node should have: this process's where it has them, else the most common."""
    from importlib import metadata

    import verl_rfpp

    try:
        verl = metadata.version("verl")
    except metadata.PackageNotFoundError:
        verl = Counter(n.report.verl_version for n in nodes if n.report).most_common(1)[0][0] if any(
            n.report for n in nodes) else None
    return verl_rfpp.__version__, verl


def to_json(found: Report) -> str:
    """One line the node probe reads back."""
    return json.dumps(found.to_dict())

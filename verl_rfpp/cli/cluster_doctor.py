"""``verl-rfpp doctor --ray ADDRESS``: the local doctor on every alive node of a Ray cluster.

On each node a Ray task (pinned there, ``NodeAffinitySchedulingStrategy(soft=False)``) starts a
fresh Python process with that node's environment, ``python -m verl_rfpp.cli doctor --json``,
exactly what a person running ``verl-rfpp doctor`` on that node gets. The task's function is
pickled by value and imports nothing of ours, so a node without verl-rfpp reports that instead of
failing to unpickle. A node is OK when its report is healthy and its verl-rfpp and verl versions
are the cluster's (the driver's, where the driver has them; else the most common).

Before connecting, the address is checked (``AddressError``, one line, within
``2 * CONNECT_TIMEOUT_S + HANDSHAKE_TIMEOUT_S``): its syntax and its host's name (``resolve``, for
every string), then a TCP connection to it, then a throwaway ``ray.init`` in a child process that
is killed when it does not connect in time (Ray's own client retries a silent address for minutes).
A node whose check dies with it (the node removed, the cluster shutting down) is a FAIL line; the
other nodes are still reported.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from verl_rfpp.cli.doctor import DISTRIBUTION, Report
from verl_rfpp.cpu import cluster
from verl_rfpp.errors import RfppError

PROBE_TIMEOUT_S = 300  # one node's doctor: import verl, compile the CPU kernels (numba)
CONNECT_TIMEOUT_S = 5  # the TCP connection to an explicit address
HANDSHAKE_TIMEOUT_S = 18  # the child process's ray.init (importing ray alone takes seconds)
ADDRESS_FORMS = ("auto (the cluster this machine is a node of), HEAD_IP:6379 (the head node's GCS port, "
                 "what `ray start --head` printed) or ray://HEAD_IP:10001 (Ray Client)")
_ADDRESS = re.compile(r"(?P<scheme>ray://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")
_HANDSHAKE = ("import sys, ray\n"
              "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
              "print('nodes', len(ray.nodes()))\n"
              "ray.shutdown()\n")


class AddressError(RfppError):
    """``--ray ADDRESS`` names no Ray cluster this process can reach; the message is one line
    naming the address, what was found and what to try."""

    def __init__(self, address: str, found: str, fix: str = f"try {ADDRESS_FORMS}"):
        super().__init__(f"verl-rfpp doctor --ray {address!r}: {found}. Fix: {fix}.")


def check_address(address: str) -> None:
    """Raise ``AddressError`` unless ``ray.init(address=address)`` can connect: ``resolve`` (the
    syntax and the host's name), a TCP connection within ``CONNECT_TIMEOUT_S``, then a child's
    ``ray.init`` within ``HANDSHAKE_TIMEOUT_S``."""
    found = resolve(address)
    if found is not None:
        _connect(address, *found)
    _handshake(address)


def resolve(address: str) -> Optional[tuple[str, int, str, str]]:
    """``(ip, port, host, named)`` of the address ``ray.init(address=address)`` would connect to, or
    ``None`` for ``auto`` without ``RAY_ADDRESS`` (Ray's own lookup; ``auto`` reads ``RAY_ADDRESS``
    first, as Ray does). ``AddressError`` for any string that is not ``auto``, ``HOST:PORT`` or
    ``ray://HOST:PORT`` with a host that resolves; the lookup takes at most ``CONNECT_TIMEOUT_S``
    and connects nowhere."""
    target, named = address.strip(), ""
    if target == "auto" and os.environ.get("RAY_ADDRESS", "").strip():
        target = os.environ["RAY_ADDRESS"].strip()
        named = f" (RAY_ADDRESS={target if target.isprintable() else repr(target)})"  # one line, always
    if target == "auto":
        return None
    if not target:
        raise AddressError(address, f"an empty address{named}")
    match = _ADDRESS.fullmatch(target)
    if match is None:
        local = target == "local"
        raise AddressError(address, "`local` starts a new Ray instance, it checks no cluster" if local else
                           f"not a Ray address{named}: HOST:PORT or ray://HOST:PORT has a host and a port",
                           f"try {ADDRESS_FORMS}" + ("; `verl-rfpp doctor` alone checks this machine" if local else ""))
    host, port = match["host"].strip("[]"), int(match["port"])
    if not 0 < port < 65536:
        raise AddressError(address, f"port {port}{named} is not a TCP port (1-65535)")
    return _lookup(address, host, port, named), port, host, named


def _lookup(address: str, host: str, port: int, named: str) -> str:
    """The first IP address ``host`` resolves to. The system resolver has no timeout of its own:
    it runs in a daemon thread that is abandoned after ``CONNECT_TIMEOUT_S``."""
    answer: list = []

    def lookup() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
        except Exception as error:  # noqa: BLE001 (gaierror, UnicodeError from the idna codec, ValueError, ...)
            answer.append(error)

    thread = threading.Thread(target=lookup, name="verl-rfpp-resolve", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S)
    if not answer:
        raise AddressError(address, f"the name {host!r}{named} did not resolve within {CONNECT_TIMEOUT_S} s",
                           f"give the head node's IP address; try {ADDRESS_FORMS}")
    if isinstance(answer[0], socket.gaierror):
        raise AddressError(address, f"host {host!r}{named} does not resolve ({answer[0].strerror})",
                           f"check the head node's name or IP; try {ADDRESS_FORMS}")
    if isinstance(answer[0], Exception):
        why = " ".join(str(answer[0]).split()) or type(answer[0]).__name__
        raise AddressError(address, f"host {host!r}{named} is not a valid host name ({why})",
                           f"give the head node's name or IP, each dot-separated label 1 to 63 characters; "
                           f"try {ADDRESS_FORMS}")
    return answer[0]


def _connect(address: str, ip: str, port: int, host: str, named: str) -> None:
    """A TCP connection to the resolved ``ip``, within ``CONNECT_TIMEOUT_S``."""
    try:
        with socket.create_connection((ip, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except TimeoutError:
        raise AddressError(address, f"no answer from {host}:{port}{named} within {CONNECT_TIMEOUT_S} s",
                           "check that the head node is up and that no firewall blocks the port from here; "
                           f"try {ADDRESS_FORMS}") from None
    except OSError as error:
        raise AddressError(address, f"nothing accepts connections at {host}:{port}{named} ({error.strerror})",
                           f"start the cluster (`ray start --head` on the head node) or give its address: "
                           f"{ADDRESS_FORMS}") from None


def _handshake(address: str) -> None:
    """Connect a throwaway driver in a child process, killed after ``HANDSHAKE_TIMEOUT_S``."""
    try:
        run = subprocess.run([sys.executable, "-c", _HANDSHAKE, address.strip()], capture_output=True, text=True,
                             timeout=HANDSHAKE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AddressError(address, f"something listens there, but no Ray cluster answered within "
                                    f"{HANDSHAKE_TIMEOUT_S} s", f"give the head node's GCS port; try {ADDRESS_FORMS}"
                           ) from None
    if run.returncode != 0 or not run.stdout.startswith("nodes "):
        why = cluster.last_error(run.stderr) or f"exit {run.returncode}"
        raise AddressError(address, f"Ray could not connect ({why})")

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
    error: str = ""  # what Ray raised instead of the node's answer (the node died, ...), or ""

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
        if node.error:
            return [f"its check did not finish: {node.error}; fix: see whether the node is still alive "
                    "(`ray status`), then run the doctor again"]
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
    included; ``AddressError`` when it cannot, see ``check_address``) and run the doctor on every
    alive node. A node whose check raises (it died, the cluster shut down) gets that error."""
    check_address(address)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address.strip(), logging_level="ERROR", log_to_driver=False)
    try:
        head = next((n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n.get("Resources", {})), None)
        alive = [n for n in ray.nodes() if n["Alive"]]
        probe = ray.remote(num_cpus=0, max_retries=0)(_probe_function())
        pending = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                   .remote(timeout) for n in alive]
        deadline = time.monotonic() + timeout + 60
        answers = [_answer(ray, ref, deadline) for ref in pending]
    finally:
        ray.shutdown()
    nodes = []
    for info, (answer, error) in zip(alive, answers, strict=True):
        report = Report.from_dict(answer["report"]) if answer and answer["report"] else None
        nodes.append(NodeResult(info["NodeID"], f"{info['NodeManagerAddress']}:{info['NodeManagerPort']}",
                                info["NodeID"] == head, report, answer["returncode"] if answer else -1,
                                "" if report or not answer else answer["stderr"],
                                answer["plugins_env"] if answer else None, error))
    nodes.sort(key=lambda node: not node.is_head)
    return ClusterReport(nodes, *_expected_versions(nodes))


def _answer(ray, ref, deadline: float) -> tuple[Optional[dict], str]:
    """One node's answer, or ``(None, why it has none)``: whatever Ray raises for that task (the
    node died, the cluster shut down, the deadline passed), in one line."""
    try:
        return ray.get(ref, timeout=max(deadline - time.monotonic(), 1.0)), ""
    except Exception as error:  # noqa: BLE001 (NodeDiedError, WorkerCrashedError, GetTimeoutError, ...)
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
        return None, f"{type(error).__name__}: {first[:300]}" if first else type(error).__name__


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

"""A Ray cluster of several nodes on this machine, the way Ray's own tests simulate one
(``ray.cluster_utils.Cluster``): every node is its own raylet with its own resources and its own
environment, every node binds to loopback (127.0.0.1), and the session files live in a fresh
temporary directory (``RAY_TMPDIR``), so nothing else on the machine sees or reuses this cluster.

The cluster belongs to the process that starts it: ``stop()`` (also on an exception, Ctrl-C or
SIGTERM inside ``with``) kills every process of every node; Ray's reaper kills them if this
process dies first. Nothing here imports verl.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from typing import Any, Optional

LOOPBACK = "127.0.0.1"
# Ray rewrites a loopback address given to ``ray.init`` into this machine's routable address (and
# connects there, where a loopback node does not listen) unless clustering across machines is off:
# this variable, read when ray is imported, switches it off, so every address stays 127.0.0.1.
# Every process of a loopback cluster needs it (the nodes get it from ``LocalCluster``; a driver
# that connects, from ``loopback_environment``).
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def loopback_environment(env: Optional[dict[str, str]] = None) -> dict[str, str]:
    """``env`` (default: this process's) for a process that starts or joins a loopback Ray node."""
    return {**(os.environ if env is None else env), **LOOPBACK_ENV}


@dataclass(frozen=True)
class NodeInfo:
    """One Ray node as Ray's GCS reports it."""

    node_id: str
    address: str  # NodeManagerAddress:NodeManagerPort
    alive: bool
    is_head: bool
    resources: dict

    @property
    def short_id(self) -> str:
        return self.node_id[:12]


class LocalCluster:
    """``nodes`` Ray nodes on loopback, each with ``num_cpus`` logical CPUs and ``num_gpus`` logical
    GPUs (fake ones: the CPU backend's FSDP ranks ask Ray for a GPU each). ``env`` goes to every
    node's raylet (and so to every worker process it starts); ``node_env[i]`` adds to node ``i``'s
    (0 is the head)."""

    def __init__(self, nodes: int = 2, num_cpus: int = 8, num_gpus: int = 0, env: Optional[dict[str, str]] = None,
                 node_env: Optional[dict[int, dict[str, str]]] = None, object_store_memory: int = 200 * 1024 ** 2):
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got nodes={nodes}")
        self.count, self.num_cpus, self.num_gpus = nodes, num_cpus, num_gpus
        self.env, self.node_env = dict(env or {}), dict(node_env or {})
        self.object_store_memory = object_store_memory
        self.temp_dir: Optional[str] = None
        self._cluster: Any = None
        self._saved_tmpdir: Optional[str] = None
        self._saved_sigterm: Any = None

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """The GCS address ``ray.init(address=...)`` and ``ray start --address`` take."""
        return self._cluster.address

    def start(self) -> None:
        from ray.cluster_utils import Cluster

        # Short: Ray's unix sockets live under it (108-byte path limit).
        self.temp_dir = tempfile.mkdtemp(prefix="rfpp-ray-", dir="/tmp")
        os.makedirs(os.path.join(self.temp_dir, "ray"))  # where Ray looks under RAY_TMPDIR
        self._saved_tmpdir = os.environ.get("RAY_TMPDIR")
        os.environ["RAY_TMPDIR"] = self.temp_dir  # Ray's address file and sessions, not /tmp/ray's
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._saved_sigterm = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            self._cluster = Cluster(initialize_head=False, shutdown_at_exit=True)
            for index in range(self.count):
                self._cluster.add_node(**self._node_args(index))
            self._cluster.wait_for_nodes()
        except BaseException:
            self.stop()
            raise

    def _node_args(self, index: int) -> dict:
        args = {
            "node_ip_address": LOOPBACK,
            "num_cpus": self.num_cpus,
            "num_gpus": self.num_gpus,
            "object_store_memory": self.object_store_memory,
            "env_vars": {"RAY_TMPDIR": self.temp_dir, **LOOPBACK_ENV, **self.env, **self.node_env.get(index, {})},
            "include_dashboard": False,
            "dashboard_port": 0,
        }
        if index == 0:
            args.update(temp_dir=os.path.join(self.temp_dir, "ray"))
        return args

    def stop(self) -> None:
        """Kill every process of every node (idempotent) and remove the session files."""
        try:
            if self._cluster is not None:
                self._cluster.shutdown()
        finally:
            self._cluster = None
            if self._saved_sigterm is not None:
                signal.signal(signal.SIGTERM, self._saved_sigterm)
                self._saved_sigterm = None
            if self._saved_tmpdir is None:
                os.environ.pop("RAY_TMPDIR", None)
            else:
                os.environ["RAY_TMPDIR"] = self._saved_tmpdir
            if self.temp_dir:
                shutil.rmtree(self.temp_dir, ignore_errors=True)
                self.temp_dir = None

    def processes(self) -> list[int]:
        """The pids of every node's Ray processes (raylet, GCS, ...) this cluster started."""
        pids = []
        for node in self._cluster.list_all_nodes():
            for infos in node.all_processes.values():
                pids += [info.process.pid for info in infos]
        return pids

    def nodes(self) -> list[NodeInfo]:
        """Every node as Ray's GCS reports it, head first."""
        head = self._cluster.head_node.node_id
        found = [NodeInfo(node_id=n["NodeID"], address=f"{n['NodeManagerAddress']}:{n['NodeManagerPort']}",
                          alive=bool(n["Alive"]), is_head=n["NodeID"] == head, resources=dict(n.get("Resources", {})))
                 for n in self._cluster.global_state.node_table()]
        return sorted(found, key=lambda node: not node.is_head)

    def node_of_pids(self) -> dict[int, str]:
        """``{pid: node id}`` of every actor this cluster ever ran (dead ones included), from Ray's
        GCS actor table: where each process of a finished run lived, read from Ray."""
        table = self._cluster.global_state.actor_table(None)
        return {int(entry["Pid"]): entry["Address"]["NodeID"] for entry in table.values()
                if entry.get("Pid") and entry.get("Address", {}).get("NodeID")}


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")

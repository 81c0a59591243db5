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
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from typing import Any, Optional

LOOPBACK = "127.0.0.1"
NODE_START_ATTEMPTS = 4
NODE_START_TIMEOUT_S = 120
# Ray rewrites a loopback address given to ``ray.init`` into this machine's routable address (and
# connects there, where a loopback node does not listen) unless clustering across machines is off:
# this variable, read when ray is imported, switches it off, so every address stays 127.0.0.1.
# Every process of a loopback cluster needs it (the nodes get it from ``LocalCluster``; a driver
# that connects, from ``loopback_environment``).
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # a user's choice of Ray's token auth
AUTH_TOKEN_FILE = "ray_auth_token"


def private_auth_token(folder: os.PathLike[str], env: Optional[dict[str, str]] = None) -> Optional[str]:
    """Give a cluster this process starts its own token (Ray's token auth stays on) instead of the one
    Ray 2.5x generates into ``~/.ray/auth_token`` on a local ``ray.init`` and leaves there: a fresh
    random token in ``folder/ray_auth_token`` (mode 0600), named by ``RAY_AUTH_TOKEN_PATH`` in ``env``
    (default: this process's environment, which the run's processes inherit). Nothing changes where
    the user chose (any of ``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` set); the
    path written, else ``None``."""
    import secrets

    env = os.environ if env is None else env
    if any(name in env for name in AUTH_VARIABLES):
        return None
    path = os.path.join(os.fspath(folder), AUTH_TOKEN_FILE)
    os.makedirs(os.fspath(folder), exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32))
    env["RAY_AUTH_TOKEN_PATH"] = path
    return path


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
        self._token = False  # whether start() named a token of the cluster's own in os.environ
        self._saved_sigterm: Any = None
        self._before: Optional[set[int]] = None  # this process's children before the cluster
        self._nodes_by_index: dict[int, Any] = {}  # Ray's Node objects

    def __enter__(self) -> LocalCluster:
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
        # the cluster's own token (its nodes and the driver that joins inherit it), not ~/.ray's
        self._token = private_auth_token(self.temp_dir) is not None
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._saved_sigterm = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        self._before = _children()
        try:
            self._cluster = Cluster(initialize_head=False, shutdown_at_exit=True)
            for index in range(self.count):
                self._add_node(index)
            self._cluster.wait_for_nodes(timeout=NODE_START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    def add_node(self, env: Optional[dict[str, str]] = None) -> str:
        """Start one more node (``env`` added to its environment); its node id."""
        index = self.count
        self.count += 1
        self.node_env[index] = dict(env or {})
        self._add_node(index)
        return self._nodes_by_index[index].node_id

    def remove_node(self, node_id: str) -> None:
        """Kill every process of the (non-head) node ``node_id``."""
        index, node = next((i, n) for i, n in self._nodes_by_index.items() if n.node_id == node_id)
        self._cluster.remove_node(node)
        del self._nodes_by_index[index]

    def _add_node(self, index: int) -> None:
        """Ray gives a raylet 30 s to register with the GCS; a busy machine can take longer. A node
        that did not come up is killed (its processes, by pid) and started again."""
        for attempt in range(1, NODE_START_ATTEMPTS + 1):
            known = set(self.processes()) | (self._before or set())
            try:
                self._nodes_by_index[index] = self._cluster.add_node(**self._node_args(index))
                return
            except Exception:
                _kill(_children() - known)
                if attempt == NODE_START_ATTEMPTS:
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
            if self._cluster is not None or self._before is not None:
                _kill(_children() - (self._before or set()))  # whatever a failed start left
            self._cluster, self._before = None, None
            self._nodes_by_index = {}
            if self._saved_sigterm is not None:
                signal.signal(signal.SIGTERM, self._saved_sigterm)
                self._saved_sigterm = None
            if self._token:
                os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
                self._token = False
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


def last_error(log: str) -> Optional[str]:
    """The decisive error of a Ray program's log: its last ``SomeError: message`` line (an actor's
    ``(Name pid=N)`` prefix dropped), or ``None``."""
    found = None
    for line in log.splitlines():
        line = re.sub(r"^\([^)]*pid=\d+[^)]*\)\s*", "", line.strip())
        match = re.match(r"^([A-Za-z_][\w.]*)(\([\w.]+\))?(: .*)?$", line)
        if match and match[1].endswith(("Error", "Exception", "Exit", "Interrupt")):
            found = line
    return " ".join(found.split())[:400] if found else None


def _children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True)}


def _kill(pids: set[int]) -> None:
    import psutil

    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")

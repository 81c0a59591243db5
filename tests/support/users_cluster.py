"""A Ray cluster of "the user's", running beside what a test starts: a ``LocalCluster`` on
loopback whose address Ray's address file holds, as ``ray start`` leaves it (``ray.init()`` with no
address, or ``"auto"``, joins it)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from verl_rfpp.cpu import cluster as ray_cluster


@contextmanager
def users_cluster(nodes: int) -> Iterator[ray_cluster.LocalCluster]:
    """``nodes`` nodes of one logical CPU each; Ray's address file (under the cluster's
    ``RAY_TMPDIR``) names it while it runs."""
    with ray_cluster.LocalCluster(nodes=nodes, num_cpus=1) as started:
        Path(started.temp_dir, "ray", "ray_current_cluster").write_text(started.address)
        yield started

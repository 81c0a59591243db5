"""``ABSENT``: the package's one marker of a value that is not there (a slot of verl's that holds
nothing, a key a run config lacks), shared by the adapter's patches and the contract's rules.
Imports nothing."""

from __future__ import annotations

from typing import Any


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()

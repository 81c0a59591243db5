"""Each estimator's validated recipe by name (docs/contract.md section 6.1), read from its record
(``verl_rfpp.catalog``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Iterator

from verl_rfpp import catalog


class _Recipes(Mapping):
    """Each estimator's validated recipe by name (section 6.1), read from its record (``catalog``)."""

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return catalog.estimator(name).recipe

    def __iter__(self) -> Iterator[str]:
        return iter(catalog.names())

    def __len__(self) -> int:
        return len(catalog.ESTIMATORS)


RECIPES: Mapping[str, tuple[str, ...]] = _Recipes()

"""Exception types of verl-rfpp.

Every error says what was found, what is required and how to fix it.
"""

from __future__ import annotations


class RfppError(Exception):
    """Base class of every error raised by verl-rfpp."""


class RfppInputError(RfppError, ValueError):
    """An estimator or normalization input violates docs/contract.md section 1 (shapes, dtypes, uids)."""


class EmptyPopulationError(RfppError, ValueError):
    """The global population of valid tokens is empty (docs/contract.md section 4, N = 0)."""


class NonFiniteError(RfppInputError):
    """A valid position holds NaN or Inf, or a result overflows its dtype (docs/contract.md
    section 1: only masked positions may hold garbage). On accelerators the same check is a
    device-side assert, to keep the step free of host syncs."""


class ActivationError(RfppError):
    """verl's registry does not resolve one of our names to our estimator (docs/contract.md section 8)."""


class LaunchError(RfppError):
    """A CPU run that this backend cannot set up (e.g. ranks that do not divide the batch), or a
    run folder it cannot use (another run holds it, it cannot be written)."""

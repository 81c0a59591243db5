"""The numerical core: both estimators (docs/contract.md sections 2-3), the global masked
normalization (section 4), the policy loss's terms (section 5), the checks of every input
(section 1.6) and the step's statistics (section 7), on plain tensors.

Imports no verl (tests/core/test_core_imports.py holds it): everything here is testable, and
callable, without a trainer.
"""

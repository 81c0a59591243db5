"""``verl-rfpp doctor``'s report as data: whether verl, in this process, runs our estimators.

``diagnose()`` builds it (it imports verl, which loads the plugin when verl does); ``render()`` is
the text the CLI prints; ``Report.to_dict`` / ``from_dict`` carry it from a cluster node's process
back to the driver (``verl_rfpp.cli.cluster_doctor``), so every node runs the very same checks.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata

from verl_rfpp import catalog

PLUGIN_MODULE = "verl_rfpp.plugin"
DISTRIBUTION = "verl-rfpp"


@dataclass
class Report:
    """What doctor found: ``checks`` are ``(label, ok)`` in print order, ``problems`` the
    activation problems of the estimators (each with its fix)."""

    verl_rfpp_version: str
    verl_version: str
    plugin_loaded: bool
    checks: list[tuple[str, bool]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return all(ok for _, ok in self.checks)

    @property
    def failed(self) -> list[str]:
        return [label for label, ok in self.checks if not ok]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        return cls(data["verl_rfpp_version"], data["verl_version"], data["plugin_loaded"],
                   [(label, bool(ok)) for label, ok in data["checks"]], list(data["problems"]))


def diagnose() -> Report:
    """Check, in this process, every piece of the plugin verl would use (and the CPU kernels)."""
    import verl  # noqa: F401  (loads the verl.plugins entry points; must precede any import of ours)

    loaded = PLUGIN_MODULE in sys.modules
    entry_points = [ep for ep in metadata.entry_points(group="verl.plugins") if ep.value == PLUGIN_MODULE]
    import verl_rfpp
    from verl_rfpp import plugin  # imports (and so activates) it only if verl did not

    checks = [
        plugin.version_check(),
        (f"entry point verl.plugins -> {PLUGIN_MODULE} installed", bool(entry_points)),
        ("plugin loaded by `import verl`", loaded),
    ]
    if loaded:
        checks += list(plugin.hooks_status().items())
    checks += cpu_kernels_checks()
    problems = [problem for name in catalog.names()
                for problem in [plugin.activation_problem(name) if loaded else plugin.not_loaded_problem(name)]
                if problem]
    return Report(verl_rfpp.__version__, plugin.verl_version(), loaded, checks, problems)


def render(found: Report) -> str:
    """The doctor's text: one ``ok``/``FAIL`` line per check, the problems, the verdict."""
    lines = [f"{'ok  ' if ok else 'FAIL'}  {label}" for label, ok in found.checks]
    if not found.plugin_loaded:
        lines.append("\nverl did not load the plugin; its pieces were not checked.")
    lines += [f"\n{problem}" for problem in found.problems]
    lines.append("\nverl-rfpp is active." if found.healthy else "\nverl-rfpp is NOT fully active.")
    return "\n".join(lines)


def kernel_cases():
    """``(label, run, expected returns, expected advantages)``: every estimator record's examples
    (``catalog.Example``, exact values), each with a bool and an int64 mask, through the function
    bound to the record (every CPU kernel: both families, both gamma branches)."""
    import numpy as np
    import torch

    def run(record, example, mask):
        rewards = torch.tensor(example.rewards)
        if record.family.groups:
            return lambda: record.compute()(rewards, mask, np.array(example.index, dtype=object))
        return lambda: record.compute()(rewards, mask, {"gamma": example.gamma})

    cases = []
    for record in catalog.ESTIMATORS:
        for example in record.examples:
            gamma = "" if record.family.groups else f", gamma {example.gamma:g}"
            for kind, mask in (("int64", torch.tensor(example.mask)), ("bool", torch.tensor(example.mask).bool())):
                cases.append((f"{record.name}, {kind} mask{gamma}", run(record, example, mask),
                              [list(row) for row in example.returns], [list(row) for row in example.advantages]))
    return cases


def cpu_kernels_checks() -> list[tuple[str, bool]]:
    """Compile and run every CPU kernel as verl's driver will on its first step, against exact
    values; a disk cache numba cannot use is a FAIL line of its own (the kernels still run)."""
    from verl_rfpp.core import passes

    try:
        if not passes.uses_cpu_kernels():
            return [(f"CPU kernels switched off ({passes.CPU_KERNELS_VARIABLE}=0): torch operations", True)]
        import numba

        from verl_rfpp.core import kernels

        wrong = []
        for label, run, returns, advantages in kernel_cases():
            result = run()
            if result.returns.tolist() != returns or result.advantages.tolist() != advantages:
                wrong.append(f"{label}: got returns {result.returns.tolist()}, advantages {result.advantages.tolist()}")
        checks = [(
            f"CPU kernels (numba {numba.__version__}): every estimator ({', '.join(catalog.names())}), "
            "bool and int64 masks, each record's examples give the exact values"
            if not wrong else "CPU kernels give wrong values: " + "; ".join(wrong),
            not wrong,
        )]
        where = kernels.cache_directory or "in memory"
        checks.append((f"numba disk cache ({where})" if kernels.cache_problem is None
                       else f"numba disk cache: {kernels.cache_problem}", kernels.cache_problem is None))
        return checks
    except Exception as error:  # report any failure as a FAIL line, not a traceback
        return [(f"CPU kernels: {error}", False)]

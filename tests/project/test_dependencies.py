"""Installing verl-rfpp into a verl environment changes nothing that is there (docs/contract.md
section 8.5): our requirements admit every version verl's own extras pin, in the installed verl's
metadata (CI runs this on each tested verl release), and never cap verl from above."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def _our_requirements() -> list[Requirement]:
    """verl-rfpp's requirements as pyproject.toml declares them (base and every extra)."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines.extend(line for line in extra if not line.startswith("verl-rfpp"))
    return [Requirement(line) for line in lines]


def _verls_pins() -> list[tuple[str, Requirement, str]]:
    """``(extra, requirement, pinned version)`` for every ``==`` pin of the installed verl."""
    pins = []
    for line in metadata.requires("verl") or []:
        requirement = Requirement(line)
        extra = str(requirement.marker) if requirement.marker else "(base)"
        for specifier in requirement.specifier:
            if specifier.operator in ("==", "==="):
                pins.append((extra, requirement, specifier.version))
    return pins


def test_every_pin_of_verls_extras_satisfies_our_specifiers():
    ours = {canonicalize_name(requirement.name): requirement for requirement in _our_requirements()}
    pins = _verls_pins()
    assert any(canonicalize_name(requirement.name) == "torch" for _, requirement, _ in pins)  # verl pins torch
    refused = [
        f"verl {metadata.version('verl')} {extra} pins {requirement.name}=={version}, "
        f"verl-rfpp requires {ours[canonicalize_name(requirement.name)]}"
        for extra, requirement, version in pins
        if canonicalize_name(requirement.name) in ours
        and not ours[canonicalize_name(requirement.name)].specifier.contains(version, prereleases=True)
    ]
    assert refused == []


def test_verl_has_no_upper_cap_and_a_loader_floor():
    from verl_rfpp.adapter.versions import PLUGIN_LOADER_SINCE, SUPPORTED_VERL_TEXT, TESTED_VERL

    (verl,) = [requirement for requirement in _our_requirements() if requirement.name == "verl"]
    assert str(verl.specifier) == SUPPORTED_VERL_TEXT == ">=" + ".".join(map(str, PLUGIN_LOADER_SINCE))
    for newer in ("0.10.0", "1.0.0", "0.9.2"):
        assert verl.specifier.contains(newer)
    assert all(verl.specifier.contains(tested) for tested in TESTED_VERL)
    assert not verl.specifier.contains("0.8.0")


def test_the_installed_verl_is_a_tested_release():
    """CI runs the suite on each ``TESTED_VERL``; a run on another verl is not that test."""
    from verl_rfpp.adapter.versions import verl_tested

    assert verl_tested(metadata.version("verl"))

"""``loading.known_active``: check's answer to "would verl run our estimators here" without importing
verl, held against verl's own answer (``import verl`` in this process, its registry and hooks) and
against each condition it rests on (docs/contract.md section 6.5). No process is started."""

from __future__ import annotations

import base64
import hashlib
from importlib import metadata

import pytest

import verl_rfpp
from verl_rfpp import catalog, validation
from verl_rfpp.adapter import compose, loading, verdict
from verl_rfpp.adapter.runtime_env import DRIVER_VERSION_ENV, MODULES_ENV, PLUGINS_ENV


@pytest.fixture
def fresh(monkeypatch):
    """No answer kept from before, and the environment of a user who set none of the variables."""
    monkeypatch.setattr(loading, "_KNOWN", {})
    for name in (MODULES_ENV, PLUGINS_ENV, DRIVER_VERSION_ENV):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_answer_without_verl_is_verls_own(fresh):
    """On this machine's verl (a tested release, as installed) the metadata settles it, and verl,
    imported, agrees: the plugin loaded, every hook in, both names ours; every verdict is the same."""
    assert loading.known_active()
    assert loading.verl_loads_plugin()
    from verl_rfpp.adapter.registries import activation_problem

    assert [activation_problem(name) for name in catalog.names()] == [None] * len(catalog.names())
    for name, recipe in validation.RECIPES.items():
        for extra in ([], ["actor_rollout_ref.rollout.n=1", "algorithm.gamma=0.5"],
                      ["actor_rollout_ref.actor.loss_agg_mode=token-mean"]):
            config = compose.compose_verl_config([*recipe, *extra])
            asked = verdict.judge_config(config, plugin_loaded=True)
            known = verdict.judge_config(config, known_active=True)
            assert (known.status, str(known.refusal), known.warnings, known.kl) == (
                asked.status, str(asked.refusal), asked.warnings, asked.kl), (name, extra)


@pytest.mark.parametrize("variable,value,known", [
    (PLUGINS_ENV, "none", False),
    (PLUGINS_ENV, "other_plugin", False),
    (PLUGINS_ENV, " Verl_RFPP , other_plugin", True),  # verl lower-cases the policy and strips each name
    (MODULES_ENV, "users_module", False),
    (DRIVER_VERSION_ENV, "0.0.0", False),  # the plugin's import refuses: a Ray worker of another driver
    (DRIVER_VERSION_ENV, verl_rfpp.__version__, True),
])
def test_each_variable_import_verl_reads_decides_whether_the_answer_is_known(fresh, variable, value, known):
    fresh.setenv(variable, value)
    assert loading.known_active() is known


def test_another_plugin_that_import_verl_would_load_leaves_it_unknown(fresh, tmp_path):
    """Another verl.plugins entry point may replace our registry entries: verl must be asked, unless
    VERL_USE_EXTERNAL_PLUGINS keeps it from loading that plugin."""
    info = tmp_path / "other_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: other-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[verl.plugins]\nother_plugin = other_plugin\n")
    fresh.syspath_prepend(str(tmp_path))
    assert "other_plugin" in {point.name for point in metadata.entry_points(group="verl.plugins")}
    assert not loading.known_active()
    fresh.setenv(PLUGINS_ENV, "verl_rfpp")
    assert loading.known_active()


def _distribution(root, content: bytes, recorded: bytes):
    """A distribution in ``root`` with one file holding ``content``, its RECORD hashing ``recorded``."""
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_bytes(content)
    info = root / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"pkg/mod.py,sha256={digest},{len(recorded)}\npkg-1.0.dist-info/RECORD,,\n")
    return metadata.PathDistribution(info)


@pytest.mark.parametrize("content,known", [(b"x = 1\n", True), (b"x = 2\n", False)], ids=["as-installed", "edited"])
def test_a_file_that_is_not_what_the_record_lists_makes_verl_unknown(tmp_path, content, known):
    assert loading._as_recorded(_distribution(tmp_path, content, b"x = 1\n")) is known


def test_a_distribution_whose_record_hashes_nothing_is_unknown(tmp_path):
    info = tmp_path / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    (info / "RECORD").write_text("pkg-1.0.dist-info/RECORD,,\n")
    assert not loading._as_recorded(metadata.PathDistribution(info))

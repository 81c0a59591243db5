"""The noisy task's assets (design ``separate``: tokenizer, model, task.json), built once per test
process for every test of ``verl-rfpp curves --task noisy`` that reads them."""

from __future__ import annotations

import pytest

from verl_rfpp.experiments.noisy import task as noisy_task


@pytest.fixture(scope="session")
def spec(tmp_path_factory):
    return noisy_task.build_assets(tmp_path_factory.mktemp("noisy") / "assets", noisy_task.SEPARATE)

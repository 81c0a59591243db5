"""Every input the numerical core refuses is an RfppInputError naming the argument, what was found
and what is expected (docs/contract.md sections 1.6, 9.5); the inputs it accepts give the
reference's numbers on both passes implementations."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import reference
from support.batches import make_batch

from verl_rfpp import (
    RfppError,
    RfppInputError,
    discounted_returns,
    group_centered_rewards,
    losses,
    masked_global_normalize,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
)

pytestmark = pytest.mark.usefixtures("passes_implementation")

UNSUPPORTED_VALUE_DTYPES = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
                            torch.complex64, torch.complex128, torch.int64, torch.bool]
UNSUPPORTED_MASK_DTYPES = [torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64, torch.uint16, torch.uint32]


def _estimators():
    return {
        "rfpp": lambda r, m: reinforce_plus_plus(r, m),
        "baseline": lambda r, m: reinforce_plus_plus_baseline(r, m, [i // 2 for i in range(_rows(r))]),
        "normalize": lambda r, m: masked_global_normalize(r, m),
        "returns": lambda r, m: discounted_returns(r, m),
    }


def _rows(rewards):
    return rewards.shape[0] if isinstance(rewards, torch.Tensor) and rewards.dim() else 1


ESTIMATORS = sorted(_estimators())


def _refused(call, *words):
    with pytest.raises(RfppInputError) as raised:
        call()
    message = str(raised.value)
    for word in words:
        assert word in message, message
    return message


@pytest.mark.parametrize("dtype", UNSUPPORTED_VALUE_DTYPES, ids=str)
@pytest.mark.parametrize("name", ESTIMATORS)
def test_unsupported_value_dtypes_are_refused_by_name(name, dtype):
    """float8 used to saturate silently (448 for 600) and the baseline to raise NotImplementedError."""
    rewards = torch.tensor([[300.0, 300.0], [1.0, 2.0]]).to(dtype)
    argument = "values" if name == "normalize" else "token_level_rewards"
    _refused(lambda: _estimators()[name](rewards, torch.ones(2, 2)), argument, str(dtype), "float32")


@pytest.mark.parametrize("dtype", UNSUPPORTED_MASK_DTYPES, ids=str)
@pytest.mark.parametrize("name", ESTIMATORS)
def test_unsupported_mask_dtypes_are_refused_by_name(name, dtype):
    _refused(lambda: _estimators()[name](torch.ones(2, 2), torch.ones(2, 2).to(dtype)), "response_mask", str(dtype))


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                        torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_every_supported_mask_dtype_gives_the_reference(mask_dtype, device):
    rewards, mask, uids = make_batch(7, dtype=torch.float64)
    result = reinforce_plus_plus(rewards.to(device), mask.to(device, mask_dtype))
    expected, _ = reference.reinforce_plus_plus(rewards, mask, 1.0)
    assert (result.advantages.cpu() - expected).abs().max().item() <= 1e-12


@pytest.mark.parametrize("name", ESTIMATORS)
def test_rewards_that_require_grad_are_read_detached(name):
    """The torch operations used to fail with ``sub(): functions with out=...``; the kernels worked."""
    rewards, mask, _ = make_batch(3)
    tracked = rewards.clone().requires_grad_(True)
    plain, detached = _estimators()[name](rewards, mask), _estimators()[name](tracked, mask)
    plain = plain if isinstance(plain, tuple) else (plain,)
    detached = detached if isinstance(detached, tuple) else (detached,)
    for a, b in zip(plain, detached, strict=True):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b) and not b.requires_grad


@pytest.mark.parametrize(
    "config,words",
    [
        ({"gamma": "abc"}, ["algorithm.gamma", "'abc'", "[0, 1]"]),
        ({"gamma": True}, ["algorithm.gamma", "True"]),
        ({"gamma": [0.9]}, ["algorithm.gamma", "list"]),
        ({"gamma": math.nan}, ["algorithm.gamma", "nan"]),
        ({"gamma": -0.1}, ["algorithm.gamma", "outside [0, 1]"]),
        (0.9, ["config", "float 0.9", "{'gamma'"]),
        ("gamma=0.9", ["config", "str"]),
    ],
    ids=["string", "bool", "list", "nan", "negative", "bare-number", "bare-string"],
)
def test_bad_gamma_or_config_is_refused_by_name(config, words):
    rewards, mask, _ = make_batch(1)
    _refused(lambda: reinforce_plus_plus(rewards, mask, config), *words)


@pytest.mark.parametrize(
    "gamma,words",
    [
        ("???", ["algorithm.gamma", "'???'", "algorithm.gamma=1.0"]),
        ("${oc.env:VERL_RFPP_TEST_UNSET_GAMMA}", ["algorithm.gamma", "VERL_RFPP_TEST_UNSET_GAMMA", "environment",
                                                  "algorithm.gamma=1.0"]),
        ("${never_set}", ["algorithm.gamma", "never_set", "algorithm.gamma=1.0"]),
    ],
    ids=["mandatory-missing", "unset-env", "interpolation-to-missing"],
)
def test_an_omegaconf_gamma_that_has_no_value_is_refused(gamma, words, monkeypatch):
    """``gamma: ???`` was read as 1.0 and an unset ``${oc.env:...}`` raised omegaconf's own error
    (docs/contract.md section 9.5): both are the package's error naming the key and the fix."""
    from omegaconf import OmegaConf

    monkeypatch.delenv("VERL_RFPP_TEST_UNSET_GAMMA", raising=False)
    rewards, mask, _ = make_batch(1)
    config = OmegaConf.create({"gamma": gamma, "never_set": "???"})
    _refused(lambda: reinforce_plus_plus(rewards, mask, config), *words)
    _refused(lambda: reinforce_plus_plus(rewards, mask, OmegaConf.create({"algorithm": config}).algorithm), *words)


def test_gamma_as_a_numpy_or_tensor_scalar_is_a_number():
    rewards, mask, _ = make_batch(2, dtype=torch.float64)
    expected = reinforce_plus_plus(rewards, mask, {"gamma": 0.9}).returns
    for gamma in (np.float64(0.9), torch.tensor(0.9, dtype=torch.float64)):
        assert torch.equal(reinforce_plus_plus(rewards, mask, {"gamma": gamma}).returns, expected)
    _refused(lambda: discounted_returns(rewards, mask, "0.9"), "algorithm.gamma")


@pytest.mark.parametrize(
    "index,words",
    [
        (7, ["index", "int 7", "list"]),
        ("GENERATOR", ["index", "generator"]),
        ("aabb", ["index", "str"]),
        ({"a": 1}, ["index", "dict"]),
        ([[1], [1], [2], [2]], ["index", "unhashable", "list"]),
        (np.zeros((4, 2)), ["index", "shape (4, 2)"]),
    ],
    ids=["int", "generator", "string", "dict", "unhashable", "2-d"],
)
def test_bad_index_is_refused_by_name(index, words):
    if isinstance(index, str) and index == "GENERATOR":
        index = (uid for uid in [0, 0, 1, 1])
    rewards = torch.ones(4, 3)
    _refused(lambda: reinforce_plus_plus_baseline(rewards, torch.ones(4, 3), index), *words)


@pytest.mark.parametrize("kind", ["requires-grad", "bfloat16", "float8", "float16", "cuda-like-detached"])
def test_index_tensors_of_any_dtype_form_the_same_groups(kind):
    rewards = torch.tensor([[1.0], [3.0], [10.0], [20.0]], dtype=torch.float64)
    ids = torch.tensor([1.0, 1.0, 2.0, 2.0])
    index = {
        "requires-grad": ids.clone().requires_grad_(True),
        "bfloat16": ids.to(torch.bfloat16),
        "float8": ids.to(torch.float8_e4m3fn),
        "float16": ids.half(),
        "cuda-like-detached": ids.long().requires_grad_(False),
    }[kind]
    returns = reinforce_plus_plus_baseline(rewards, torch.ones(4, 1), index).returns
    assert returns[:, 0].tolist() == [-1.0, 1.0, -5.0, 5.0]


NOT_TENSORS = [[[1.0, 2.0]], np.ones((1, 2)), 1.0, None, "rewards"]


@pytest.mark.parametrize("bad", NOT_TENSORS, ids=["list", "ndarray", "float", "None", "str"])
@pytest.mark.parametrize("which", ["values", "response_mask"])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_non_tensors_are_refused_by_name(name, which, bad):
    good = torch.ones(1, 2)
    args = (bad, good) if which == "values" else (good, bad)
    argument = which if which == "response_mask" or name == "normalize" else "token_level_rewards"
    _refused(lambda: _estimators()[name](*args), argument, "torch.Tensor")


@pytest.mark.parametrize(
    "values,mask,words",
    [
        (torch.ones(1, 2, 2), torch.ones(1, 2, 2), ["shape (1, 2, 2)", "(bs, response_length)"]),
        (torch.ones(2), torch.ones(2), ["shape (2,)"]),
        (torch.ones(2, 3), torch.ones(2, 2), ["shape (2, 3)", "shape (2, 2)"]),
        (torch.ones(2, 2, device="meta"), torch.ones(2, 2), ["meta"]),
        (torch.ones(2, 2), torch.ones(2, 2, device="meta"), ["response_mask", "meta"]),
        (torch.ones(2, 2).to_sparse(), torch.ones(2, 2), ["sparse"]),
        ("NESTED", torch.ones(2, 3), ["nested"]),
    ],
    ids=["3-d", "1-d", "shapes-differ", "meta-values", "meta-mask", "sparse", "nested"],
)
@pytest.mark.parametrize("name", ESTIMATORS)
def test_bad_shapes_layouts_and_devices_are_refused(name, values, mask, words):
    if isinstance(values, str):
        values = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged)
    _refused(lambda: _estimators()[name](values, mask), *words)


@pytest.mark.parametrize("floor", [0.0, -1.0, math.nan, math.inf, "1e-8", None], ids=repr)
def test_variance_floor_must_be_a_positive_number(floor):
    """With a floor of 0 a zero-variance population gave NaN advantages (0/0)."""
    _refused(lambda: masked_global_normalize(torch.ones(2, 2), torch.ones(2, 2), variance_floor=floor),
             "variance_floor", "> 0")


def test_process_group_must_be_a_group():
    _refused(lambda: masked_global_normalize(torch.ones(2, 2), torch.ones(2, 2), process_group="world"),
             "process_group", "ProcessGroup")
    _refused(lambda: reinforce_plus_plus(torch.ones(2, 2), torch.ones(2, 2), process_group=1), "process_group")


def test_group_centering_checks_its_lengths():
    _refused(lambda: group_centered_rewards(torch.ones(3), torch.ones(3), [1, 1, 2]), "lengths")


@settings(max_examples=200, deadline=None)
@given(
    rewards=st.one_of(
        st.none(), st.floats(), st.text(max_size=3), st.lists(st.floats(), max_size=3),
        st.sampled_from([torch.ones(2, 2), torch.ones(2, 2, dtype=torch.int32), torch.ones(3, 2), torch.ones(2),
                         torch.ones(2, 2, dtype=torch.float8_e5m2), torch.ones(2, 2, dtype=torch.complex64)]),
    ),
    mask=st.sampled_from([torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bool), torch.ones(2, 3), None, [[1, 1]],
                          torch.ones(2, 2, dtype=torch.complex64), torch.tensor([[1.0, math.nan], [1.0, 1.0]])]),
    index=st.one_of(st.none(), st.integers(), st.sampled_from([[0, 0], [0, 1], [[0], [0]], np.zeros(3), "ab",
                                                               torch.zeros(2, dtype=torch.bfloat16)])),
    config=st.one_of(st.none(), st.floats(), st.text(max_size=3),
                     st.dictionaries(st.just("gamma"), st.one_of(st.floats(), st.text(max_size=3), st.booleans()))),
    name=st.sampled_from(ESTIMATORS),
)
def test_any_argument_gives_a_result_or_our_error(rewards, mask, index, config, name):
    """Hypothesis over wrong types, shapes and dtypes of every argument: the outcome is the
    reference's number or an RfppError, never a raw Python error (or a NaN)."""
    calls = {
        "rfpp": lambda: reinforce_plus_plus(rewards, mask, config),
        "baseline": lambda: reinforce_plus_plus_baseline(rewards, mask, index),
        "normalize": lambda: masked_global_normalize(rewards, mask),
        "returns": lambda: discounted_returns(rewards, mask, config if not isinstance(config, dict) else 1.0),
    }
    try:
        outcome = calls[name]()
    except RfppError:
        return
    outcome = outcome if isinstance(outcome, tuple) else (outcome,)
    assert torch.isfinite(outcome[0]).all()


# --- losses (docs/contract.md section 5) --------------------------------------------------------

def test_response_mean_of_an_all_masked_micro_batch_is_zero_not_nan(device):
    """Without global_batch_size an all-masked micro-batch gave 0/0 = NaN."""
    loss = torch.full((3, 4), 2.0, requires_grad=True, device=device)
    mask = torch.zeros(3, 4, device=device)
    value = losses.response_mean(loss, mask)
    assert value.item() == 0.0
    (gradient,) = torch.autograd.grad(value, loss)
    assert torch.equal(gradient.cpu(), torch.zeros(3, 4))
    assert losses.response_mean(loss, mask, global_batch_size=4, dp_size=2).item() == 0.0


def test_response_mean_still_divides_by_the_responses(device):
    loss = torch.tensor([[1.0, 3.0, 100.0], [5.0, 0.0, 0.0], [7.0, 7.0, 7.0]], device=device)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], device=device)
    assert losses.response_mean(loss, mask).item() == reference.response_mean(loss.tolist(), mask.tolist())


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"global_batch_size": 0}, ["global_batch_size"]),
        ({"global_batch_size": "8"}, ["global_batch_size", "str"]),
        ({"global_batch_size": 8, "dp_size": 0}, ["dp_size"]),
        ({"global_batch_size": 8, "dp_size": 1.5}, ["dp_size"]),
        ({"dp_size": 0}, ["dp_size", "integer >= 1"]),
        ({"global_batch_size": math.nan}, ["global_batch_size"]),
    ],
    ids=["zero", "string", "dp-zero", "dp-fraction", "dp-zero-without-batch-size", "nan"],
)
def test_response_mean_refuses_bad_batch_info(kwargs, words):
    _refused(lambda: losses.response_mean(torch.ones(2, 2), torch.ones(2, 2), **kwargs), *words)


def test_losses_refuse_mismatched_or_unsupported_tensors():
    ones = torch.ones(2, 3)
    _refused(lambda: losses.response_mean(ones, torch.ones(2, 2)), "loss_mat", "response_mask")
    _refused(lambda: losses.response_mean(ones.to(torch.float8_e5m2), ones), "loss_mat", "float8")
    _refused(lambda: losses.clipped_surrogate(ones, ones, torch.ones(2, 2), ones, 0.2, 0.2), "advantages")
    _refused(lambda: losses.clipped_surrogate([[0.0]], ones, ones, ones, 0.2, 0.2), "old_log_prob")
    _refused(lambda: losses.k2_penalty(ones, torch.ones(3, 2)), "k2_penalty")


# --- the CPU kernels' import (docs/contract.md section 9.5) ---------------------------------------

@pytest.mark.slow  # a subprocess
def test_a_numba_that_cannot_load_gets_the_hint(tmp_path):
    """llvmlite failing to load its library raises OSError at ``import numba``: our error, with the fix."""
    fake = tmp_path / "numba"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise OSError('libllvmlite.so: cannot open shared object file')\n")
    script = textwrap.dedent("""
        import os, sys, torch
        os.environ["VERL_RFPP_CPU_KERNELS"] = "1"
        from verl_rfpp import reinforce_plus_plus, RfppInputError
        try:
            reinforce_plus_plus(torch.ones(2, 2), torch.ones(2, 2))
        except RfppInputError as error:
            print("REFUSED", error)
    """)
    import verl_rfpp

    package_root = str(__import__("pathlib").Path(verl_rfpp.__file__).parent.parent)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{package_root}"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert "REFUSED" in done.stdout, done.stdout + done.stderr
    assert "OSError" in done.stdout and "libllvmlite" in done.stdout and "VERL_RFPP_CPU_KERNELS=0" in done.stdout

"""Legacy-generation idioms the SDK's own tests rely on (written here as our own kernels): an on-chip tensor
returned from a simulated kernel, `tensor_scalar_cumulative` / `reduce_cmd.load_reduce` in the legacy
namespace, and `if param:` as the presence test of an optional tensor parameter."""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError
from tests.raises import raises_at


def _tripled_in_sbuf(a):
    result = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    result[...] = nl.multiply(nl.load(a), 3.0)
    return result                                                   # <- returns an SBUF tile


def test_a_returned_sbuf_tile_gives_its_values_with_a_warning(rng):
    a = rng.standard_normal((16, 8)).astype(np.float32)
    with pytest.warns(UserWarning, match="must return HBM tensors") as record:
        out = nki.simulate_kernel(_tripled_in_sbuf, a)
    np.testing.assert_allclose(out, 3 * a, rtol=1e-6)
    assert record[0].filename == __file__ and record[0].lineno == _tripled_in_sbuf.__code__.co_firstlineno + 3


def test_a_returned_sbuf_tile_is_an_error_in_hardware_strict_mode(rng):
    a = rng.standard_normal((16, 8)).astype(np.float32)
    with raises_at(KernelError, match="err_unsupported_memory", line="return result"):
        nki.jit(_tripled_in_sbuf, mode="simulation", hardware_strict=True)(a)


def _running_sum(src_data, init, reduce_cmd=nisa.reduce_cmd.reset_reduce):
    out = nl.ndarray(src_data.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    src = nl.load(src_data)
    start = nl.load(init) if init else None          # an optional tensor parameter, tested for presence
    dst = nl.ndarray(src_data.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(src=src, dst=dst, op0=nl.multiply, op1=nl.add, imm0=2.0,
                                  imm1=start if start is not None else 0.0, reduce_cmd=reduce_cmd)
    nl.store(out, dst)
    return out


def test_legacy_tensor_scalar_cumulative_with_reset_and_load_reduce(rng):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    init = rng.standard_normal((32, 1)).astype(np.float32)
    reset = nki.simulate_kernel(_running_sum, x, None)
    np.testing.assert_allclose(reset, np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-5)
    loaded = nki.simulate_kernel(_running_sum, x, init, nisa.reduce_cmd.load_reduce)
    np.testing.assert_allclose(loaded, init + np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-5)


def test_only_kernel_arguments_are_true_in_a_legacy_if(rng):
    def branches_on_a_tile(a):
        t = nl.load(a)
        if t:                                         # a tile: still NKI's error
            pass
        return a
    with raises_at(KernelError, code="err_ambiguous_tensor_truth_value"):
        nki.simulate_kernel(branches_on_a_tile, rng.standard_normal((4, 4)).astype(np.float32))

"""Idioms of NKI library kernels that run on hardware and so must run here: testing an optional tensor
argument against None, `dge_mode` given as its new-generation number, and writing a kernel argument
through a dtype-reinterpreting access pattern (`.ap(..., dtype=)`)."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import KernelError
from tests.isa.helpers import rejects


@nki.jit
def scale_with_optional_bias(x, bias=None):
    """out = 2 x (+ bias when given): the kernel branches on `bias != None` / `bias == None`."""
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    if bias != None:  # noqa: E711 - the idiom under test
        b = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=bias)
        nisa.tensor_tensor(dst=t, data1=t, data2=b, op=nl.add)
    assert (bias == None) is (bias is None)  # noqa: E711
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_tensor_compared_with_none_is_a_python_bool(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    bias = rng.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(scale_with_optional_bias(x), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(scale_with_optional_bias(x, bias), 2 * x + bias, rtol=1e-6)


@nki.jit
def copy_with_dge_mode(x, mode):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, dge_mode=mode)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("mode", [0, 1, 3, nisa.dge_mode.none])
def test_dge_mode_accepts_its_new_generation_number(rng, mode):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(copy_with_dge_mode(x, mode), x)


def test_dge_mode_rejects_numbers_outside_the_enum(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x, dge_mode=7)
        return t

    rejects(kernel, x, error=KernelError, match="invalid dge_mode", api="nisa.dma_copy")


@nki.jit
def copy_bits_into(x, out):
    """out's bits = x's bits, both seen as int32 through `.ap(..., dtype=nl.int32)` (out is written in place)."""
    n, m = x.shape
    t = nl.ndarray((n, m), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[m, n], [1, m]], offset=0, dtype=nl.int32))
    nisa.dma_copy(dst=out.ap(pattern=[[m, n], [1, m]], offset=0, dtype=nl.int32), src=t)


def test_writes_through_a_reinterpreting_view_reach_the_callers_array(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    out = np.zeros_like(x)
    copy_bits_into(x, out)
    np.testing.assert_array_equal(out.view(np.int32), x.view(np.int32))

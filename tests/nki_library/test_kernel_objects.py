"""Plain Python objects that large new-generation kernels pass around: configuration classes derived from
`nl.NKIObject` (with `@dataclass` and unannotated class attributes, whose constructor NKI's compiler
synthesizes), dtype objects passed as kernel arguments (`np.float32`, `ml_dtypes.bfloat16`) or named in
annotations (`nki.dtype`), optional tensors tested with `!= None` or `if t:` (NKI's Python has no `is`), and
the `nki.isa.constants` module."""

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import opennki
import opennki.isa as nisa
import opennki.language as nl
from opennki.isa import constants
from tests.isa.helpers import rand, run
from tests.raises import raises_at


@dataclass
class _Tiling(nl.NKIObject):
    rows = None            # unannotated: still a constructor field, as NKI's compiler makes it
    cols = None
    scale: float = 1.0     # annotated fields keep working alongside

    def tile_count(self):
        return self.cols // 32


@dataclass
class _Shape(nl.NKIObject):
    rows: int
    cols: int
    spare: int            # never passed: NKI's constructor requires no field


class _Plain(nl.NKIObject):
    offset = 0.0


def test_dataclass_nkiobject_takes_its_unannotated_class_attributes_as_fields():
    t = _Tiling(rows=64, cols=96, scale=2.0)
    assert (t.rows, t.cols, t.scale, t.tile_count()) == (64, 96, 2.0, 3)
    assert _Tiling().rows is None and _Tiling(cols=32).cols == 32
    with pytest.raises(TypeError):
        _Tiling(tile_count=4)         # methods are not fields
    assert _Plain(offset=1.5).offset == 1.5 and _Plain().offset == 0.0


def test_dataclass_nkiobject_fields_without_default_may_be_left_out():
    s = _Shape(rows=2, cols=3)
    assert (s.rows, s.cols, s.spare) == (2, 3, None)
    assert _Shape(4, 5, 6).spare == 6


def test_isa_constants_module_holds_the_enums():
    assert constants.oob_mode is nisa.oob_mode and constants.dge_mode is nisa.dge_mode
    assert constants.matmul_perf_mode is nisa.matmul_perf_mode
    assert opennki.dtype is nl.DType and isinstance(nl.bfloat16, opennki.dtype)


def _affine(x, w, bias=None, out_dtype: opennki.dtype = nl.float32):
    """x @ w (+ bias): x [K, M] as stationary (K <= 128 partitions), w [K, N]; bias [M, 1] optional."""
    out = nl.ndarray((x.shape[1], w.shape[1]), dtype=out_dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ws = nl.ndarray(w.shape, dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=ws, src=w)
    acc = nl.ndarray((x.shape[1], w.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=xs, moving=ws)
    y = nl.ndarray(acc.shape, dtype=out_dtype, buffer=nl.sbuf)
    if bias != None:      # noqa: E711 - NKI's Python subset has no `is`
        b = nl.ndarray(bias.shape, dtype=bias.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=bias)
        nisa.tensor_scalar(dst=y, data=acc, op0=nl.add, operand0=b)
    else:
        nisa.tensor_copy(dst=y, src=acc)
    nisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("with_bias", [False, True])
def test_optional_tensors_compare_with_none_as_presence(rng, with_bias):
    x, w = rand(rng, 64, 32), rand(rng, 64, 48)
    bias = rand(rng, 32, 1) if with_bias else None
    ref = x.T @ w + (bias if with_bias else 0.0)
    np.testing.assert_allclose(run(_affine, x, w, bias), ref, rtol=1e-4, atol=1e-4)


def _scaled_copy(x, dtype):
    cfg = _Tiling(rows=x.shape[0], cols=x.shape[1], scale=3.0)
    out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((cfg.rows, cfg.cols), dtype=x.dtype, buffer=nl.sbuf)
    y = nl.ndarray((cfg.rows, cfg.cols), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for i in range(cfg.tile_count()):
        cols = nl.ds(32 * i, 32)
        nisa.tensor_scalar(dst=y[:, cols], data=t[:, cols], op0=nl.multiply, operand0=cfg.scale)
    nisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_a_dtype_class_is_a_plain_kernel_argument(rng, dtype):
    x = rand(rng, 64, 96)
    out = run(_scaled_copy, x, dtype)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.astype(np.float32), (x * 3.0).astype(dtype).astype(np.float32), rtol=1e-6)


def _scaled(x, scale=None):
    """x * scale[p] if a scale column is given, else x."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if scale:             # a present tensor is true in a new-generation kernel
        s = nl.ndarray(scale.shape, dtype=scale.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=scale)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=s)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_tensor_is_true_in_a_new_generation_kernel(rng):
    x, scale = rand(rng, 64, 16), rand(rng, 64, 1)
    np.testing.assert_allclose(opennki.jit(_scaled)(x, scale), x * scale, rtol=1e-6)
    np.testing.assert_array_equal(opennki.jit(_scaled)(x), x)


def test_a_tensor_has_no_truth_value_in_a_legacy_kernel(rng):
    import opennki.legacy as legacy
    import opennki.legacy.language as lnl

    @legacy.jit
    def branch(x):
        out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
        t = lnl.load(x)
        if t:
            t = lnl.add(t, 1.0)
        lnl.store(out, t)
        return out

    with raises_at(opennki.KernelError, match="truth value"):
        branch(rand(rng, 8, 8))


def test_a_computed_tensor_has_no_truth_value_in_a_new_generation_kernel(rng):
    """Presence is true; a branch on data (`if t > 0:`) is still the spec's error, at the kernel line."""
    def branch(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if t > 0:
            nisa.dma_copy(dst=x, src=t)
        return x

    with raises_at(opennki.KernelError, match="err_ambiguous_tensor_truth_value") as exc:
        opennki.jit(branch)(rand(rng, 8, 8))
    assert "if t > 0:" in str(exc.value)

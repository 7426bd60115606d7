"""Legacy nl.matmul (both operand layouts, PSUM accumulation, operand masks) and nl.transpose against NumPy
(spec/language.md §6.5)."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy.language as nl
from opennki.errors import ShapeError
from tests.language.coverage import covers
from tests.language.helpers import apply, run
from tests.raises import raises_at


@covers("matmul")
@pytest.mark.parametrize("transpose_x", [False, True])
def test_matmul_layouts(transpose_x, rng):
    a = rng.standard_normal((64, 96)).astype(np.float32)          # [K, M] when transposed, else [M, K]
    b = rng.standard_normal((96 if not transpose_x else 64, 200)).astype(np.float32)
    out = apply(lambda x, y: nl.matmul(x, y, transpose_x=transpose_x), a, b)
    assert out.dtype == np.float32
    expected = (a.T if transpose_x else a).astype(np.float64) @ b
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@covers("matmul", "zeros", "psum", "affine_range", "bfloat16")
def test_psum_accumulation_over_k_tiles_in_bf16(rng):
    a = rng.standard_normal((256, 64)).astype(ml_dtypes.bfloat16)      # [K, M]
    b = rng.standard_normal((256, 128)).astype(ml_dtypes.bfloat16)     # [K, N]

    def kernel(a, b):
        out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((64, 128), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            acc += nl.matmul(nl.load(a[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]),
                             transpose_x=True)
        nl.store(out, value=acc)
        assert a.dtype == nl.bfloat16
        return out
    out = run(kernel, a, b)
    np.testing.assert_allclose(out, a.astype(np.float64).T @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


@covers("matmul")
@pytest.mark.parametrize("wide", ["x", "y"])
def test_fp32_times_bf16_widens_the_other_operand(wide, rng):
    # nc_matmul pairs fp32 only with fp32; nl.matmul has no such rule (NKI's attention tutorial multiplies
    # fp32 scores by bf16 values), so the bf16 operand is widened first: the product of the values held
    a = rng.standard_normal((64, 32)).astype(np.float32 if wide == "x" else ml_dtypes.bfloat16)   # [K, M]
    b = rng.standard_normal((64, 80)).astype(np.float32 if wide == "y" else ml_dtypes.bfloat16)   # [K, N]
    out = apply(lambda x, y: nl.matmul(x, y, transpose_x=True), a, b)
    expected = a.astype(np.float64).T @ b.astype(np.float64)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@covers("matmul", "arange")
def test_operand_masks_restrict_m_and_n(rng):
    a = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal((32, 40)).astype(np.float32)

    def kernel(a, b):
        out = nl.ndarray((48, 40), dtype=nl.float32, buffer=nl.shared_hbm)
        i_ap, i_af = nl.arange(32)[:, None], nl.arange(48)[None, :]
        i_bp, i_bf = nl.arange(32)[:, None], nl.arange(40)[None, :]
        res = nl.zeros((48, 40), dtype=nl.float32)
        res[...] = nl.matmul(nl.load(a)[i_ap, i_af][i_af < 20], nl.load(b)[i_bp, i_bf][i_bf < 30],
                             transpose_x=True)
        nl.store(out, value=res)
        return out
    out = run(kernel, a, b)
    expected = a.T.astype(np.float64) @ b
    np.testing.assert_allclose(out[:20, :30], expected[:20, :30], rtol=1e-5, atol=1e-5)
    # outside the masks the matmul computed nothing: those elements hold res's zeros or the never-written
    # poison of the result tile (NaN), never a product
    for outside in (out[20:, :], out[:, 30:]):
        assert (np.isnan(outside) | (outside == 0)).all()


@covers("transpose")
def test_transpose_into_psum(rng):
    x = rng.standard_normal((96, 128)).astype(np.float32)
    out = apply(nl.transpose, x)
    np.testing.assert_array_equal(out, x.T)
    with raises_at(ShapeError, match="err_exceed_max_supported_dimension"):
        apply(nl.transpose, rng.standard_normal((4, 4, 4)).astype(np.float32))

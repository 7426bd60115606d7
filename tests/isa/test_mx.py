"""nisa.quantize_mx and nisa.nc_matmul_mx (new generation, NeuronCore-v4; spec/isa.md §5.2, §6.12)."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
from opennki.errors import DtypeError, KernelError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf
from tests.language.coverage import covers

E4M3FN = ml_dtypes.float8_e4m3fn


def _quantize_ref(x, fp8, e_max):
    """Independent reference: scales from the group maxima (2.31+ rule), values rounded into fp8."""
    P, F = x.shape
    q = np.empty((P, F), fp8)
    e = np.empty((P // 8, F // 4), np.int64)
    for g in range(P // 8):
        for c in range(F // 4):
            block = x[8 * g:8 * g + 8, 4 * c:4 * c + 4].astype(np.float64)
            amax = np.abs(block).max()
            e[g, c] = int(np.floor(np.log2(amax))) - (e_max - 1) if amax > 0 else -127
            q[8 * g:8 * g + 8, 4 * c:4 * c + 4] = (block / 2.0 ** e[g, c]).astype(np.float32).astype(fp8)
    words = np.zeros((P, F // 4), np.uint32)
    raw = q.view(np.uint8).astype(np.uint32)
    for lane in range(4):
        words |= raw[:, lane::4] << np.uint32(8 * lane)
    return q, e, words


def _quadrant_rows(groups):
    return np.array([(i // 4) * 32 + i % 4 for i in range(groups)])


@pytest.mark.parametrize("scale_dtype", ["uint8", "e8m0"])
def test_quantize_mx_words_and_quadrant_scales(rng, scale_dtype):
    x = rand(rng, 64, 32, low=-3, high=3).astype(ml_dtypes.bfloat16)
    x[0:8, 0:4] = 0                                                   # an all-zero group

    def kernel(x):
        out = nl2.ndarray((64, 8), dtype=nl2.uint32, buffer=nl2.shared_hbm)
        scales = nl2.ndarray((64, 8), dtype=nl2.float32, buffer=nl2.shared_hbm)
        src = nl2.ndarray(x.shape, dtype=nl2.bfloat16, buffer=nl2.sbuf)
        q = nl2.ndarray((64, 8), dtype=nl2.float8_e4m3fn_x4, buffer=nl2.sbuf)
        sdt = nl2.uint8 if scale_dtype == "uint8" else nl2.float8_e8m0fnu
        s = nl2.ndarray((64, 8), dtype=sdt, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=src, src=x)
        nisa2.memset(dst=s, value=1)                                   # rows outside the layout keep this
        nisa2.quantize_mx(dst=q, src=src, dst_scale=s)
        nisa2.dma_copy(dst=out.view(nl2.float8_e4m3fn_x4), src=q)
        nisa2.dma_copy(dst=scales, src=s)
        return out, scales

    words, scales = run(kernel, x)
    _, e, ref_words = _quantize_ref(x.astype(np.float32), E4M3FN, 8)
    np.testing.assert_array_equal(words, ref_words)
    rows = _quadrant_rows(8)
    expected = (e + 127) if scale_dtype == "uint8" else 2.0 ** e
    np.testing.assert_array_equal(scales[rows], expected.astype(np.float32))
    np.testing.assert_array_equal(np.delete(scales, rows, 0), 1.0)
    assert scales[0, 0] == (0 if scale_dtype == "uint8" else 2.0 ** -127)


@covers("float8_e4m3fn_x4", "float8_e5m2_x4", new=True, as_name="nl2")
def test_quantize_then_mx_matmul_matches_the_dequantized_product(rng):
    K, M, N = 64, 16, 48
    a = rand(rng, K, 4 * M).astype(np.float16)
    b = rand(rng, K, 4 * N).astype(np.float16)

    def kernel(a, b):
        at = to_sbuf(a, nl2.float16)
        bt = to_sbuf(b, nl2.float16)
        qa = nl2.ndarray((K, M), dtype=nl2.float8_e4m3fn_x4, buffer=nl2.sbuf)
        qb = nl2.ndarray((K, N), dtype=nl2.float8_e5m2_x4, buffer=nl2.sbuf)
        sa = nl2.ndarray((36, M), dtype=nl2.uint8, buffer=nl2.sbuf)
        sb = nl2.ndarray((36, N), dtype=nl2.float8_e8m0fnu, buffer=nl2.sbuf)
        nisa2.quantize_mx(dst=qa, src=at, dst_scale=sa)
        nisa2.quantize_mx(dst=qb, src=bt, dst_scale=sb)
        p = nl2.ndarray((M, N), dtype=nl2.float32, buffer=nl2.psum)
        r = nl2.ndarray((M, N), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.nc_matmul_mx(dst=p, stationary=qa, moving=qb, stationary_scale=sa, moving_scale=sb)
        nisa2.nc_matmul_mx(dst=p, stationary=qa, moving=qb, stationary_scale=sa, moving_scale=sb)   # accumulates
        nisa2.tensor_copy(dst=r, src=p)
        return to_hbm(r)

    qa, ea, _ = _quantize_ref(a.astype(np.float32), E4M3FN, 8)
    qb, eb, _ = _quantize_ref(b.astype(np.float32), ml_dtypes.float8_e5m2, 15)
    da = qa.astype(np.float64).reshape(K, M, 4) * np.repeat(2.0 ** ea, 8, 0)[:, :, None]
    db = qb.astype(np.float64).reshape(K, N, 4) * np.repeat(2.0 ** eb, 8, 0)[:, :, None]
    ref = np.einsum("kmq,knq->mn", da, db)
    got = run(kernel, a, b)
    np.testing.assert_allclose(got, 2 * ref, rtol=1e-5, atol=1e-4)
    exact = np.einsum("kmq,knq->mn", a.astype(np.float64).reshape(K, M, 4), b.astype(np.float64).reshape(K, N, 4))
    assert np.abs(got / 2 - exact).max() < 0.1 * np.abs(exact).max()             # MX error stays small


@covers("float4_e2m1fn_x4", new=True, as_name="nl2")
def test_fp4_operands_unpack_low_nibble_first(rng):
    K, M, N = 32, 8, 16
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    sn = rng.integers(0, 16, size=(K, M, 4))
    mn = rng.integers(0, 16, size=(K, N, 4))
    sw = sum(sn[..., q].astype(np.uint16) << (4 * q) for q in range(4)).astype(np.uint16)
    mw = sum(mn[..., q].astype(np.uint16) << (4 * q) for q in range(4)).astype(np.uint16)
    s_scale = rng.integers(120, 134, size=(K // 8, M)).astype(np.uint8)     # compact [K/8, M] layout (K <= 32)
    m_scale = np.full((K // 8, N), 127, np.uint8)

    def kernel(sw, mw, s_scale, m_scale):
        st = nl2.ndarray((K, M), dtype=nl2.float4_e2m1fn_x4, buffer=nl2.sbuf)
        mv = nl2.ndarray((K, N), dtype=nl2.float4_e2m1fn_x4, buffer=nl2.sbuf)
        ss = nl2.ndarray(s_scale.shape, dtype=nl2.uint8, buffer=nl2.sbuf)
        ms = nl2.ndarray(m_scale.shape, dtype=nl2.uint8, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=st, src=sw.view(nl2.float4_e2m1fn_x4))
        nisa2.dma_copy(dst=mv, src=mw.view(nl2.float4_e2m1fn_x4))
        nisa2.dma_copy(dst=ss, src=s_scale)
        nisa2.dma_copy(dst=ms, src=m_scale)
        p = nl2.ndarray((M, N), dtype=nl2.float32, buffer=nl2.psum)
        r = nl2.ndarray((M, N), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.nc_matmul_mx(dst=p, stationary=st, moving=mv, stationary_scale=ss, moving_scale=ms,
                           tile_position=(0, 0), tile_size=(32, 128))
        nisa2.tensor_copy(dst=r, src=p)
        return to_hbm(r)

    sv = e2m1[sn] * np.repeat(2.0 ** (s_scale.astype(np.int64) - 127), 8, 0)[:, :, None]
    ref = np.einsum("kmq,knq->mn", sv, e2m1[mn])
    np.testing.assert_allclose(run(kernel, sw, mw, s_scale, m_scale), ref, rtol=1e-6, atol=1e-6)


def _words(shape, dtype=nl2.float8_e4m3fn_x4):
    return nl2.ndarray(shape, dtype=dtype, buffer=nl2.sbuf)


def _mm(K=64, M=16, N=16, scale_dtype=nl2.uint8, sdt=nl2.float8_e4m3fn_x4):
    nisa2.nc_matmul_mx(dst=nl2.ndarray((M, N), dtype=nl2.float32, buffer=nl2.psum), stationary=_words((K, M), sdt),
                       moving=_words((K, N)), stationary_scale=nl2.ndarray((36, M), dtype=scale_dtype,
                                                                           buffer=nl2.sbuf),
                       moving_scale=nl2.ndarray((36, N), dtype=nl2.uint8, buffer=nl2.sbuf))


def _mm_plain():
    _mm()


def _mm_k():
    _mm(K=48)


def _mm_scale_dtype():
    _mm(scale_dtype=nl2.float32)


def _mm_data_dtype():
    _mm(sdt=nl2.bfloat16)


def _mm_odd_m():
    _mm(M=15)


def _q_src_dtype():
    nisa2.quantize_mx(dst=_words((32, 4)), src=nl2.ndarray((32, 16), dtype=nl2.float32, buffer=nl2.sbuf),
                      dst_scale=nl2.ndarray((4, 4), dtype=nl2.uint8, buffer=nl2.sbuf))


def _q_dst_shape():
    nisa2.quantize_mx(dst=_words((32, 8)), src=nl2.ndarray((32, 16), dtype=nl2.bfloat16, buffer=nl2.sbuf),
                      dst_scale=nl2.ndarray((4, 4), dtype=nl2.uint8, buffer=nl2.sbuf))


def _q_scale_rows():
    nisa2.quantize_mx(dst=_words((64, 4)), src=nl2.ndarray((64, 16), dtype=nl2.bfloat16, buffer=nl2.sbuf),
                      dst_scale=nl2.ndarray((8, 4), dtype=nl2.uint8, buffer=nl2.sbuf))


REJECTS = [
    ("matmul_mx_needs_v4", _mm_plain, "trn2", KernelError, "NeuronCore-v4"),
    ("contraction_not_multiple_of_32", _mm_k, "trn3", ShapeError, "multiple of 32"),
    ("scale_dtype", _mm_scale_dtype, "trn3", DtypeError, "stationary_scale"),
    ("data_not_mx", _mm_data_dtype, "trn3", DtypeError, "MX x4"),
    ("odd_stationary_columns", _mm_odd_m, "trn3", ShapeError, "even"),
    ("quantize_src_fp32", _q_src_dtype, "trn3", DtypeError, "float16/bfloat16"),
    ("quantize_dst_shape", _q_dst_shape, "trn3", ShapeError, "F/4"),
    ("quantize_scale_layout", _q_scale_rows, "trn3", ShapeError, "quadrant layout"),
]


test_mx_rejects = rejecting(REJECTS, inputs=())

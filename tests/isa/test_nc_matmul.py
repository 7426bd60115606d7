"""nisa.nc_matmul (spec/isa.md §5.1): stationary.T @ moving on the Tensor Engine, fp32 accumulation in PSUM."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf

BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3


def _mm_ref(s, m):
    return s.astype(np.float64).T @ m.astype(np.float64)


@pytest.mark.parametrize("dtype", [BF16, np.float16, np.float32, FP8])
def test_single_matmul_into_psum(rng, dtype):
    s, m = rand(rng, 128, 96).astype(dtype), rand(rng, 128, 256).astype(dtype)

    def kernel(s, m):
        out = nl.ndarray((96, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.nc_matmul(nl.load(s), nl.load(m)))
        return out

    np.testing.assert_allclose(run(kernel, s, m, target="trn2"), _mm_ref(s, m), rtol=1e-5, atol=1e-4)


def test_legacy_psum_accumulation_over_k_and_output_mask(rng):
    s, m = rand(rng, 384, 64).astype(BF16), rand(rng, 384, 128).astype(BF16)

    def kernel(s, m):
        out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((64, 128), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(3):
            acc += nisa.nc_matmul(nl.load(s[k * 128:(k + 1) * 128, :]), nl.load(m[k * 128:(k + 1) * 128, :]))
        i_p, i_f = nl.mgrid[0:64, 0:128]
        acc[...] = nisa.nc_matmul(nl.load(s[0:128, :]), nl.load(m[0:128, :]), mask=(i_f >= 100))
        nl.store(out, acc)
        return out

    got = run(kernel, s, m)
    full = _mm_ref(s, m)
    np.testing.assert_allclose(got[:, :100], full[:, :100], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[:, 100:], _mm_ref(s[:128], m[:128])[:, 100:], rtol=1e-5, atol=1e-4)


def test_new_generation_accumulate_flags(rng):
    s, m = rand(rng, 64, 32), rand(rng, 64, 48)

    def kernel(s, m):
        out = nl2.ndarray((3, 32, 48), dtype=nl2.float32, buffer=nl2.shared_hbm)
        st = to_sbuf(s, nl2.float32)
        mv = to_sbuf(m, nl2.float32)
        p = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.psum)
        r = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.nc_matmul(dst=p, stationary=st, moving=mv)                     # None: first write overwrites
        nisa2.nc_matmul(dst=p, stationary=st, moving=mv)                     # None: then accumulates
        nisa2.tensor_copy(dst=r, src=p)                                      # a read ends the group
        nisa2.dma_copy(dst=out[0], src=r)
        nisa2.nc_matmul(dst=p, stationary=st, moving=mv)                     # overwrites again
        nisa2.nc_matmul(dst=p, stationary=st, moving=mv, accumulate=False)   # explicit overwrite
        nisa2.tensor_copy(dst=r, src=p)
        nisa2.dma_copy(dst=out[1], src=r)
        nisa2.nc_matmul(dst=p, stationary=st, moving=mv, accumulate=True)    # explicit accumulate
        nisa2.tensor_copy(dst=r, src=p)
        nisa2.dma_copy(dst=out[2], src=r)
        return out

    got = run(kernel, s, m)
    ref = _mm_ref(s, m)
    np.testing.assert_allclose(got, np.stack([2 * ref, ref, 2 * ref]), rtol=1e-5, atol=1e-4)


def test_transpose_mode_is_bit_exact_on_v3(rng):
    s = rand(rng, 64, 32).astype(BF16)
    s.view(np.uint16)[0, 0] = 0x7F80                                          # +inf survives

    def kernel(s):
        st = to_sbuf(s, nl2.bfloat16)
        eye = nl2.ndarray((64, 64), dtype=nl2.bfloat16, buffer=nl2.sbuf)
        p = nl2.ndarray((32, 64), dtype=nl2.bfloat16, buffer=nl2.psum)
        r = nl2.ndarray((32, 64), dtype=nl2.bfloat16, buffer=nl2.sbuf)
        nisa2.memset(dst=eye, value=0.0)
        nisa2.nc_matmul(dst=p, stationary=st, moving=eye, is_transpose=True)
        nisa2.tensor_copy(dst=r, src=p)
        return to_hbm(r)

    np.testing.assert_array_equal(run(kernel, s, target="trn2").view(np.uint16), s.T.view(np.uint16))


def test_double_row_fp8_and_tiling_and_v4_limits(rng):
    s = rand(rng, 128, 2, 64).astype(FP8)
    m = rand(rng, 128, 2, 128).astype(FP8)

    def double_row(s, m):
        out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.nc_matmul(nl.load(s), nl.load(m), perf_mode="double_row_gen3"))
        return out

    ref = np.einsum("kli,klj->ij", s.astype(np.float64), m.astype(np.float64))
    np.testing.assert_allclose(run(double_row, s, m, target="trn2"), ref, rtol=1e-5, atol=1e-4)

    a, b = rand(rng, 64, 64).astype(BF16), rand(rng, 64, 4096).astype(BF16)

    def wide(a, b):
        x = to_sbuf(a, nl2.bfloat16)
        y = to_sbuf(b, nl2.bfloat16)
        p = nl2.ndarray((64, 4096), dtype=nl2.bfloat16, buffer=nl2.psum)
        r = nl2.ndarray((64, 4096), dtype=nl2.bfloat16, buffer=nl2.sbuf)
        nisa2.nc_matmul(dst=p, stationary=x, moving=y, tile_position=(64, 0), tile_size=(64, 128))
        nisa2.tensor_copy(dst=r, src=p)
        return to_hbm(r)

    got = run(wide, a, b, target="trn3").astype(np.float32)
    ref = _mm_ref(a, b)
    np.testing.assert_allclose(got, ref, rtol=2 ** -8, atol=1e-3)     # fp32 sums rounded once to bf16


def _s_psum(s):
    p = nl.zeros((128, 64), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_matmul(p, nl.load(s))


def _k_mismatch(s):
    nisa.nc_matmul(nl.load(s), nl.zeros((64, 32), dtype=nl.bfloat16))


def _m_too_big(s):
    nisa.nc_matmul(nl.zeros((128, 256), dtype=nl.bfloat16), nl.load(s))


def _n_too_big(s):
    nisa.nc_matmul(nl.load(s), nl.zeros((128, 1024), dtype=nl.bfloat16))


def _fp32_with_bf16(s):
    nisa.nc_matmul(nl.zeros((128, 64), dtype=nl.float32), nl.load(s))


def _e4m3_with_e4m3fn(s):
    nisa.nc_matmul(nl.zeros((128, 64), dtype=nl.float8_e4m3), nl.zeros((128, 64), dtype=ml_dtypes.float8_e4m3fn))


def _e4m3fn_v3(s):
    t = nl.zeros((128, 64), dtype=ml_dtypes.float8_e4m3fn)
    nisa.nc_matmul(t, t)


def _bf16_dst_v3(s):
    p = nl2.ndarray((64, 64), dtype=nl2.bfloat16, buffer=nl2.psum)
    nisa2.nc_matmul(dst=p, stationary=nl.load(s), moving=nl.load(s))


def _double_row_v2(s):
    t = nl.zeros((128, 2, 32), dtype=nl.float8_e4m3)
    nisa.nc_matmul(t, t, perf_mode="double_row_gen3")


def _tile_32_on_v2(s):
    nisa.nc_matmul(nl.load(s)[0:32, 0:32], nl.load(s)[0:32, :], tile_position=(0, 0), tile_size=(32, 32))


def _dst_sbuf(s):
    nisa2.nc_matmul(dst=nl2.ndarray((64, 64), dtype=nl2.float32, buffer=nl2.sbuf), stationary=nl.load(s),
                    moving=nl.load(s))


REJECTS = [
    ("stationary_in_psum", _s_psum, "trn2", MemoryKindError, "from SBUF"),
    ("contraction_mismatch", _k_mismatch, "trn2", ShapeError, "contraction"),
    ("stationary_free_above_128", _m_too_big, "trn2", ShapeError, "128"),
    ("moving_free_above_512", _n_too_big, "trn2", ShapeError, "exceeds maximum 512"),
    ("fp32_paired_with_bf16", _fp32_with_bf16, "trn2", DtypeError, "fp32/tf32"),
    ("e4m3_mixed_with_e4m3fn", _e4m3_with_e4m3fn, "trn3", DtypeError, "cannot be mixed"),
    ("e4m3fn_before_v4", _e4m3fn_v3, "trn2", DtypeError, "NeuronCore-v4"),
    ("bf16_psum_before_v4", _bf16_dst_v3, "trn2", DtypeError, "fp32 in PSUM"),
    ("double_row_before_v3", _double_row_v2, "trn1", KernelError, "NeuronCore-v3"),
    ("tile_size_32_before_v3", _tile_32_on_v2, "trn1", KernelError, "tile row size"),
    ("dst_in_sbuf", _dst_sbuf, "trn2", MemoryKindError, "PSUM"),
]


test_nc_matmul_rejects = rejecting(REJECTS, inputs=lambda rng: (rand(rng, 128, 64).astype(BF16),), api="nc_matmul")

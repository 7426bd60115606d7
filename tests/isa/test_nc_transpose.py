"""nisa.nc_transpose (spec/isa.md §5.3): [P, F] -> [F, P] on the Tensor Engine or the Vector Engine."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run


def _legacy(dtype=None, via_psum=False, engine=nisa.unknown_engine):
    def kernel(x):
        r = nisa.nc_transpose(nl.load(x), dtype=dtype, engine=engine) if not via_psum else None
        if via_psum:
            p = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
            p[...] = nl.load(x)
            r = nisa.nc_transpose(p)                             # a PSUM tile goes to the Vector Engine
        out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out
    return kernel


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_tensor_engine_transpose_is_bit_exact_from_v3(rng, target):
    x = rand(rng, 128, 96)
    x[3, 5] = np.inf
    np.testing.assert_array_equal(run(_legacy(), x, target=target), x.T)


def test_v2_tensor_engine_transpose_multiplies_by_identity():
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    x[3, 5] = np.inf
    got = run(_legacy(), x, target="trn1")
    assert np.all(np.isnan(np.delete(got[5], 3))) and got[5, 3] == np.inf   # inf * 0 = NaN along output row 5
    np.testing.assert_array_equal(np.delete(got, 5, 0), np.delete(x.T, 5, 0))


def test_vector_engine_transpose_of_psum_and_bf16(rng):
    x = rand(rng, 32, 24).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run(_legacy(via_psum=True), x).view(np.uint16), x.T.view(np.uint16))
    y = rand(rng, 16, 32)
    np.testing.assert_array_equal(run(_legacy(engine=nisa.vector_engine, dtype=nl.bfloat16), y).view(np.uint16),
                                  y.T.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_new_generation_engine_from_dst_buffer(rng):
    x = rand(rng, 20, 30)

    def kernel(x):
        out = nl2.ndarray((30, 20), dtype=nl2.float32, buffer=nl2.shared_hbm)
        t = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        d = nl2.ndarray((30, 20), dtype=nl2.float32, buffer=nl2.sbuf)       # SBUF dst: Vector Engine
        nisa2.dma_copy(dst=t, src=x)
        nisa2.nc_transpose(dst=d, data=t)
        nisa2.dma_copy(dst=out, src=d)
        return out

    np.testing.assert_array_equal(run(kernel, x), x.T)


def _dve_too_big(x):
    nisa.nc_transpose(nl.load(x), engine=nisa.vector_engine)


def _pe_into_sbuf(x):
    nisa2.nc_transpose(dst=nl2.ndarray((64, 64), dtype=nl2.float32, buffer=nl2.sbuf), data=nl.load(x),
                       engine=nisa2.tensor_engine)


def _gpsimd(x):
    nisa.nc_transpose(nl.load(x), engine=nisa.gpsimd_engine)


def _dst_shape(x):
    nisa2.nc_transpose(dst=nl2.ndarray((64, 32), dtype=nl2.float32, buffer=nl2.psum), data=nl.load(x))


def _pe_too_big(x):
    nisa.nc_transpose(nl.zeros((128, 200), dtype=nl.float32))


REJECTS = [
    ("vector_engine_above_32x32", _dve_too_big, ShapeError, "32 x 32"),
    ("tensor_engine_into_sbuf", _pe_into_sbuf, MemoryKindError, "write PSUM"),
    ("gpsimd_engine", _gpsimd, KernelError, "tensor or vector engine"),
    ("dst_shape", _dst_shape, ShapeError, r"\[F, P\]"),
    ("tensor_engine_above_128", _pe_too_big, ShapeError, "128"),
]


test_nc_transpose_rejects = rejecting(REJECTS, inputs=((64, 64),), api="nc_transpose")


def _masked(mask_of):
    """Transposes into PSUM tiles holding 7.0 under masks laid over the [F, P] result."""
    def kernel(x):
        F, P = x.shape[1], x.shape[0]
        out = nl.ndarray((3, F, P), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_f, i_p = nl.mgrid[0:F, 0:P]
        for j, mask in enumerate(mask_of(i_f, i_p)):
            p = nl.full((F, P), 7.0, nl.float32, buffer=nl.psum)
            p[...] = nisa.nc_transpose(t, mask=mask)
            nl.store(out[j], value=nl.copy(p))
        return out
    return kernel


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_a_masked_transpose_writes_only_the_elements_its_mask_switches_on(rng, target):
    x = rand(rng, 64, 96)
    got = run(_masked(lambda i_f, i_p: (False, i_f < 40, (i_p >= 10) & (i_f > i_p))), x, target=target)
    i_f, i_p = np.mgrid[0:96, 0:64]
    for out, on in zip(got, (np.zeros((96, 64), bool), i_f < 40, (i_p >= 10) & (i_f > i_p))):
        np.testing.assert_array_equal(out, np.where(on, x.T, np.float32(7.0)))

"""nisa.memset (spec/isa.md §6.16): a tile filled with one value, converted to its dtype."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError
from tests.isa.helpers import rejecting, run, to_hbm


@pytest.mark.parametrize("value,dtype,expected", [
    (1.1, nl.bfloat16, np.float32(ml_dtypes.bfloat16(1.1))),
    (-2.5, nl.int32, -2),                   # round half to even
    (3.7, nl.uint8, 4),
    (1000, nl.int8, 127),                   # saturation
    (0.1, nl.float16, np.float32(np.float16(0.1))),
    (-0.0, nl.float32, -0.0),
], ids=["bf16", "int32_half_even", "uint8", "int8_saturates", "fp16", "negative_zero"])
def test_memset_converts_the_value(value, dtype, expected):
    def kernel():
        out = nl.ndarray((128, 8), dtype=dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.memset((128, 8), value, dtype))
        return out

    got = run(kernel)
    np.testing.assert_array_equal(got.astype(np.float32), np.full((128, 8), expected, np.float32))
    if value == -0.0:
        assert np.all(np.signbit(got))


def test_memset_engines_mask_and_new_generation():
    def kernel():
        out = nl.ndarray((64, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nisa.memset((64, 16), 2.0, nl.float32, engine=nisa.gpsimd_engine)
        i_p, i_f = nl.mgrid[0:64, 0:16]
        t[...] = nisa.memset((64, 16), 5.0, nl.float32, mask=(i_f >= 8))
        nl.store(out, t)
        return out

    got = run(kernel)
    np.testing.assert_array_equal(got[:, :8], 2.0)
    np.testing.assert_array_equal(got[:, 8:], 5.0)

    def new():
        t = nl2.ndarray((16, 4), dtype=nl2.int16, buffer=nl2.psum)
        s = nl2.ndarray((16, 4), dtype=nl2.int16, buffer=nl2.sbuf)
        nisa2.memset(dst=t, value=-7)
        nisa2.tensor_copy(dst=s, src=t)
        return to_hbm(s)

    np.testing.assert_array_equal(run(new), -7)


def _gpsimd_psum():
    t = nl2.ndarray((16, 4), dtype=nl2.float32, buffer=nl2.psum)
    nisa2.memset(dst=t, value=1.0, engine=nisa2.gpsimd_engine)


def _scalar_engine():
    nisa.memset((16, 4), 1.0, nl.float32, engine=nisa.scalar_engine)


def _tile_value():
    nisa.memset((16, 4), nl.zeros((16, 4), dtype=nl.float32), nl.float32)


REJECTS = [
    ("gpsimd_into_psum", _gpsimd_psum, MemoryKindError, "GpSimd cannot access PSUM"),
    ("scalar_engine", _scalar_engine, KernelError, "scalar engine"),
    ("tile_value", _tile_value, DtypeError, "scalar"),
]


test_memset_rejects = rejecting(REJECTS, inputs=())

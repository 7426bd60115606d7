"""nisa.nc_stream_shuffle (spec/isa.md §6.25): partition moves within each 32-partition quadrant."""

import numpy as np

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf


def _shuffle_ref(src, dst, mask):
    out = dst.copy()
    for q in range(0, dst.shape[0], 32):
        for i, m in enumerate(mask):
            if m != 255 and q + i < dst.shape[0]:
                out[q + i] = src[q + m]
    return out


def test_in_place_rotation_as_in_the_docs(rng):
    x = rand(rng, 32, 128)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        a = nl.load(x)
        g = nl.mgrid[0:32, 0:128]
        nisa.nc_stream_shuffle(src=a[g.p, g.x], dst=a[g.p, g.x], shuffle_mask=[(i - 1) % 32 for i in range(32)])
        nl.store(out, a)
        return out

    np.testing.assert_array_equal(run(kernel, x), x[[(i - 1) % 32 for i in range(32)]])


def test_every_quadrant_with_kept_partitions(rng):
    x, old = rand(rng, 128, 16), rand(rng, 128, 16)
    mask = list(rng.integers(0, 32, size=32))
    mask[3] = mask[17] = 255

    def kernel(x, old):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        d = nl.load(old)
        nisa.nc_stream_shuffle(nl.load(x), d, mask)
        nl.store(out, d)
        return out

    np.testing.assert_array_equal(run(kernel, x, old), _shuffle_ref(x, old, mask))


def test_new_generation_shuffle_psum_int(rng):
    x = rng.integers(-1000, 1000, size=(64, 8)).astype(np.int32)
    mask = [31 - i for i in range(32)]

    def kernel(x):
        s = to_sbuf(x, nl2.int32)
        p = nl2.ndarray(x.shape, dtype=nl2.int32, buffer=nl2.psum)
        nisa2.nc_stream_shuffle(dst=p, src=s, shuffle_mask=mask)
        nisa2.tensor_copy(dst=s, src=p)
        return to_hbm(s)

    np.testing.assert_array_equal(run(kernel, x), _shuffle_ref(x, x, mask))


def _short_mask(x):
    t = nl.load(x)
    nisa.nc_stream_shuffle(t, t, list(range(16)))


def _bad_entry(x):
    t = nl.load(x)
    nisa.nc_stream_shuffle(t, t, [40] + list(range(1, 32)))


def _dtype(x):
    nisa.nc_stream_shuffle(nl.load(x), nl.ndarray((32, 16), dtype=nl.bfloat16), list(range(32)))


def _beyond_src(x):
    nisa.nc_stream_shuffle(nl.load(x)[0:16, :], nl.ndarray((32, 16), dtype=nl.float32), list(range(32)))


REJECTS = [
    ("mask_length", _short_mask, ShapeError, "32 entries"),
    ("mask_entry", _bad_entry, ShapeError, "0..31"),
    ("dtype_mismatch", _dtype, DtypeError, "same dtype"),
    ("reads_beyond_src", _beyond_src, ShapeError, "beyond src"),
]


test_shuffle_rejects = rejecting(REJECTS, inputs=((32, 16),), api="nisa.nc_stream_shuffle")

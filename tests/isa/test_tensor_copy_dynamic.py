"""nisa.tensor_copy_dynamic_src / tensor_copy_dynamic_dst (spec/isa.md §6.15): copies whose source or
destination carries a run-time free-dim offset read from a one-element SBUF tile."""

import numpy as np

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf


def _gather(x, idx):
    out = nl.ndarray((128, idx.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:128, 0:1]
    src, offsets = nl.load(x), nl.load(idx)
    res = nl.ndarray((128, idx.shape[1]), dtype=x.dtype)
    for b in nl.affine_range(idx.shape[1]):
        res[ix, b] = nisa.tensor_copy_dynamic_src(src[ix, offsets[0, b] + iy])
    nl.store(out, res)
    return out


def _gather_3d(x, idx):
    out = nl.ndarray((128, idx.shape[1], 4), dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy, iz = nl.mgrid[0:128, 0:1, 0:4]
    src, offsets = nl.load(x), nl.load(idx)
    res = nl.ndarray((128, idx.shape[1], 4), dtype=x.dtype)
    for b in nl.affine_range(idx.shape[1]):
        res[ix, b, iz] = nisa.tensor_copy_dynamic_src(src[ix, offsets[0, b], iz], engine=nisa.gpsimd_engine)
    nl.store(out, res)
    return out


def test_dynamic_src_gathers_columns(rng):
    x = rand(rng, 128, 200)
    idx = rng.integers(0, 200, size=(1, 24)).astype(np.int32)
    np.testing.assert_array_equal(run(_gather, x, idx), np.take(x, idx[0], axis=1))
    x3 = rand(rng, 128, 50, 4)
    idx3 = rng.integers(0, 50, size=(1, 6)).astype(np.int32)
    np.testing.assert_array_equal(run(_gather_3d, x3, idx3), np.take(x3, idx3[0], axis=1))


def test_dynamic_dst_scatters_columns(rng):
    x = rand(rng, 64, 8)
    idx = np.array([[30, 3, 17, 0, 41, 9, 22, 12]], np.int32)

    def kernel(x, idx):
        out = nl.ndarray((64, 48), dtype=x.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:64, 0:1]
        src, offsets = nl.load(x), nl.load(idx)
        res = nl.zeros((64, 48), dtype=x.dtype)
        for b in nl.affine_range(8):
            nisa.tensor_copy_dynamic_dst(dst=res[ix, offsets[0, b] + iy], src=src[ix, b + iy])
        nl.store(out, res)
        return out

    ref = np.zeros((64, 48), np.float32)
    ref[:, idx[0]] = x
    np.testing.assert_array_equal(run(kernel, x, idx), ref)


def test_new_generation_dynamic_src(rng):
    x, idx = rand(rng, 32, 40), np.array([[33]], np.int32)

    def kernel(x, idx):
        t = to_sbuf(x, nl2.float32)
        o = nl2.ndarray((1, 1), dtype=nl2.int32, buffer=nl2.sbuf)
        d = nl2.ndarray((32, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=o, src=idx)
        ix, iy = nl.mgrid[0:32, 0:1]
        nisa2.tensor_copy_dynamic_src(dst=d, src=t[ix, o[0, 0] + iy])
        return to_hbm(d)

    np.testing.assert_array_equal(run(kernel, x, idx)[:, 0], x[:, 33])


def _static_src(x, idx):
    nisa.tensor_copy_dynamic_src(nl.load(x))


def _offset_out_of_range(x, idx):
    ix, iy = nl.mgrid[0:128, 0:4]
    o = nl.load(idx)
    nisa.tensor_copy_dynamic_src(nl.load(x)[ix, o[0, 0] + iy])


def _tile_of_offsets_on_free_dim(x, idx):
    ix = nl.arange(128)[:, None]
    nisa.tensor_copy_dynamic_src(nl.load(x)[ix, nl.load(idx)])


def _dynamic_dst_static(x, idx):
    nisa.tensor_copy_dynamic_dst(dst=nl.ndarray((128, 16), dtype=nl.float32), src=nl.load(x))


REJECTS = [
    ("src_without_runtime_offset", _static_src, KernelError, "run-time offset"),
    ("offset_out_of_bounds", _offset_out_of_range, IndexError, "out of bounds for axis 0 with size"),
    ("many_offsets_on_a_free_dim", _tile_of_offsets_on_free_dim, KernelError, "err_indirect_indices_free_dim"),
    ("dst_without_runtime_offset", _dynamic_dst_static, KernelError, "run-time offset"),
]


test_dynamic_copy_rejects = rejecting(REJECTS, inputs=lambda rng: (rand(rng, 128, 16), np.array([[14, 2]], np.int32)))

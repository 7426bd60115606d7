"""Legacy nl tensor creation, block dimensions, dtypes and constants (spec/language.md §2-§5.1)."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy.language as nl
from opennki.errors import KernelError, ShapeError
from tests.language.coverage import covers
from tests.language.helpers import run
from tests.raises import raises_at


@covers("ndarray", "zeros", "ones", "full", "zeros_like", "empty_like", "sbuf", "hbm", "private_hbm",
        "shared_hbm")
def test_creation_apis_fill_as_documented(rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((5, 16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        scratch = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.private_hbm)
        also_hbm = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(x)
        nl.store(scratch, value=t)
        nl.store(also_hbm, value=nl.load(scratch))
        nl.store(out[0], value=nl.zeros((16, 8), dtype=nl.float32, buffer=nl.sbuf))
        nl.store(out[1], value=nl.ones((16, 8), dtype=nl.float32))
        nl.store(out[2], value=nl.full((16, 8), 3.5, dtype=nl.float32))
        z = nl.zeros_like(t)
        e = nl.empty_like(t)
        e[...] = nl.add(z, t)
        nl.store(out[3], value=e)
        nl.store(out[4], value=nl.load(also_hbm))
        return out
    out = run(kernel, x)
    np.testing.assert_array_equal(out[:3], np.stack([np.zeros((16, 8)), np.ones((16, 8)), np.full((16, 8), 3.5)]))
    np.testing.assert_array_equal(out[3], x)
    np.testing.assert_array_equal(out[4], x)


@covers("ndarray", "par_dim", "zeros", "affine_range")
def test_block_dimensions_are_independent_tiles(rng):
    x = rng.standard_normal((4, 32, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        blocks = nl.ndarray((4, nl.par_dim(32), 8), dtype=nl.float32)
        acc = nl.zeros((2, nl.par_dim(32), 8), dtype=nl.float32)
        assert blocks.shape == (4, 32, 8) and blocks[1].shape == (32, 8)
        for b in nl.affine_range(4):
            blocks[b, :, :] = nl.load(x[b])
        for b in nl.affine_range(4):
            acc[b % 2] += blocks[b]
        for b in nl.affine_range(4):
            nl.store(out[b], value=nl.multiply(blocks[b], acc[b % 2]))
        return out
    out = run(kernel, x)
    pairs = np.stack([x[0] + x[2], x[1] + x[3]])
    np.testing.assert_allclose(out, x * pairs[[0, 1, 0, 1]], rtol=1e-6)


@covers("ndarray", "par_dim")
def test_a_block_tensor_is_not_a_tile():
    def kernel():
        blocks = nl.ndarray((2, nl.par_dim(16), 8), dtype=nl.float32)
        nl.exp(blocks)
    with raises_at(KernelError, match="err_failed_to_infer_tile_from_local_tensor"):
        run(kernel)


@covers("bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16",
        "float8_e4m3", "float8_e5m2", "tfloat32", "copy")
def test_dtype_objects_and_round_on_write(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32) * 4
    ours = (nl.bool_, nl.int8, nl.int16, nl.int32, nl.uint8, nl.uint16, nl.uint32, nl.float16, nl.float32,
            nl.bfloat16, nl.float8_e4m3, nl.float8_e5m2)
    assert [np.dtype(t) for t in ours] == [
        np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32, np.float16,
                              np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2)]
    assert np.dtype(nl.tfloat32).itemsize == 4

    def kernel(x):
        out = nl.ndarray((4, 8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        for k, dt in enumerate((nl.bfloat16, nl.float8_e4m3, nl.tfloat32, nl.int16)):
            nl.store(out[k], value=nl.copy(nl.copy(t, dtype=dt), dtype=nl.float32))
        return out
    out = run(kernel, x)
    np.testing.assert_array_equal(out[0], x.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(out[1], x.astype(ml_dtypes.float8_e4m3).astype(np.float32))
    tf32 = (x.view(np.uint32) + np.uint32(0x0FFF) + ((x.view(np.uint32) >> 13) & 1)) & np.uint32(0xFFFFE000)
    np.testing.assert_array_equal(out[2], tf32.view(np.float32))
    np.testing.assert_array_equal(out[3], np.rint(x))


@covers("fp32", "bfp16", "finfo", "static_cast", "full")
def test_dtype_helpers(rng):
    assert nl.fp32.min == np.float32(-3.4028235e38) == np.finfo(np.float32).min
    assert np.isneginf(nl.bfp16.min)                        # 0xff80 is -inf in bfloat16 (spec §9 item 8)
    assert nl.finfo(nl.bfloat16).max == ml_dtypes.finfo(ml_dtypes.bfloat16).max
    x = rng.standard_normal(10).astype(np.float32)
    np.testing.assert_array_equal(nl.static_cast(x, nl.bfloat16), x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(nl.static_cast(np.array([1.5, 2.5, 300.0]), nl.uint8), [2, 2, 255])

    def kernel():
        out = nl.ndarray((4, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.full((4, 2), nl.fp32.min, dtype=nl.float32))
        return out
    np.testing.assert_array_equal(run(kernel), np.finfo(np.float32).min)


@covers("tile_size")
@pytest.mark.parametrize("target,sbuf_kib", [("trn1", 192 - 16), ("trn2", 224 - 16), ("trn3", 256 - 16)])
def test_tile_size_follows_the_target(target, sbuf_kib, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    seen = {}

    def kernel():
        ts = nl.tile_size
        seen.update(pmax=ts.pmax, psum=ts.psum_fmax, stat=ts.gemm_stationary_fmax, mov=ts.gemm_moving_fmax,
                    bn=ts.bn_stats_fmax, sbuf=ts.total_available_sbuf_size)
        out = nl.ndarray((ts.pmax, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.full((ts.pmax, 1), float(ts.psum_fmax), dtype=nl.float32))
        return out
    out = run(kernel)
    assert seen == dict(pmax=128, psum=512, stat=128, mov=512, bn=512, sbuf=sbuf_kib * 1024)
    np.testing.assert_array_equal(out, 512)


@covers("gemm_grid", "gemm_stationary_grid", "load", "store")
def test_gemm_grids_index_matmul_tiles(rng):
    x = rng.standard_normal((128, 512)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        g = nl.gemm_grid()
        s = nl.gemm_stationary_grid()
        nl.store(out[g.p, g.x], value=nl.load(x[g.p, g.x]))
        nl.store(out[s.p, s.x], value=nl.zeros((128, 128), dtype=nl.float32))
        return out
    expected = x.copy()
    expected[:, :128] = 0
    np.testing.assert_array_equal(run(kernel, x), expected)


def test_hbm_tensors_take_no_initial_value():
    with raises_at(KernelError, match="err_hbm_tensor_with_init_value_not_supported"):
        run(lambda: nl.zeros((4, 4), dtype=nl.float32, buffer=nl.shared_hbm))


def test_one_dimensional_on_chip_tiles_are_rejected():
    with raises_at(ShapeError, match="Insufficient rank"):
        run(lambda: nl.ndarray((128,), dtype=nl.float32))

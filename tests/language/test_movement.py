"""Legacy nl data movement against NumPy: load / store (affine and run-time indices, masks), copy,
load_transpose2d, broadcast_to, expand_dims, gather_flattened, atomic_rmw, shared constants
(spec/language.md §5.1, §5.3-5.5)."""

import numpy as np

import opennki.legacy.language as nl
from opennki.errors import KernelError, ShapeError
from tests.language.coverage import covers
from tests.language.helpers import apply, run
from tests.raises import raises_at


@covers("load", "store", "arange", "affine_range", "ndarray", "shared_hbm", "float32")
def test_tiled_load_store_with_a_ragged_masked_last_tile(rng):
    x = rng.standard_normal((300, 24)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(24)[None, :]
        for t in nl.affine_range(3):
            rows = t * 128 + i_p
            tile = nl.load(x[rows, i_f], mask=rows < 300)
            nl.store(out[rows, i_f], value=tile, mask=rows < 300)
        return out
    np.testing.assert_array_equal(run(kernel, x), x)


@covers("mgrid", "ds", "load", "store")
def test_mgrid_and_ds_subscripts(rng):
    x = rng.standard_normal((64, 40)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((64, 20), dtype=x.dtype, buffer=nl.shared_hbm)
        g = nl.mgrid[0:64, 0:20]
        nl.store(out[g.p, g.x], value=nl.load(x[g.p, 2 * g.x + 1]))
        nl.store(out[:, nl.ds(0, 5)], value=nl.load(x[nl.ds(0, 64), nl.ds(10, 5)]))
        return out
    expected = x[:, 1::2].copy()
    expected[:, :5] = x[:, 10:15]
    np.testing.assert_array_equal(run(kernel, x), expected)


@covers("load", "store", "arange", "int32")
def test_indirect_partition_indices_gather_and_scatter_rows(rng):
    table = rng.standard_normal((50, 16)).astype(np.float32)
    idx = rng.permutation(50)[:32].astype(np.int32).reshape(32, 1)

    def kernel(table, idx):
        out = nl.ndarray((2, 50, 16), dtype=table.dtype, buffer=nl.shared_hbm)
        i_f = nl.arange(16)[None, :]
        ids = nl.load(idx)
        assert ids.dtype == nl.int32
        rows = nl.load(table[ids, i_f])                    # gather: rows[p] = table[idx[p]]
        nl.store(out[0, 0:32, :], value=rows)
        nl.store(out[1], value=nl.zeros((50, 16), dtype=nl.float32))
        nl.store(out[1, ids, i_f], value=rows)             # scatter them back to their rows
        return out
    out = run(kernel, table, idx)
    np.testing.assert_array_equal(out[0, :32], table[idx[:, 0]])
    expected = np.zeros_like(table)
    expected[idx[:, 0]] = table[idx[:, 0]]
    np.testing.assert_array_equal(out[1], expected)


@covers("copy", "store", "psum", "zeros")
def test_copy_casts_and_store_accepts_psum_and_scalars(rng):
    x = rng.standard_normal((32, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((3, 32, 8), dtype=nl.float16, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out[0], value=nl.copy(t, dtype=nl.float16))
        acc = nl.zeros((32, 8), dtype=nl.float32, buffer=nl.psum)
        acc[...] = nl.copy(t)
        nl.store(out[1], value=acc)
        nl.store(out[2], value=2.5)
        return out
    out = run(kernel, x)
    np.testing.assert_array_equal(out[0], x.astype(np.float16))
    np.testing.assert_array_equal(out[1], x.astype(np.float16))
    np.testing.assert_array_equal(out[2], 2.5)


@covers("load_transpose2d")
def test_load_transpose2d(rng):
    x = rng.standard_normal((96, 128)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((128, 96), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load_transpose2d(x))
        return out
    np.testing.assert_array_equal(run(kernel, x), x.T)


@covers("broadcast_to")
def test_broadcast_to_partition_and_free_dims(rng):
    row = rng.standard_normal((1, 24)).astype(np.float32)
    col = rng.standard_normal((32, 1)).astype(np.float32)
    np.testing.assert_array_equal(apply(lambda r: nl.broadcast_to(r, shape=(32, 24)), row),
                                  np.broadcast_to(row, (32, 24)))
    np.testing.assert_array_equal(apply(lambda c: nl.broadcast_to(c, shape=(32, 24)), col),
                                  np.broadcast_to(col, (32, 24)))


@covers("expand_dims")
def test_expand_dims_appends_axes(rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    seen = {}

    def kernel(x):
        t = nl.load(x)
        e = nl.expand_dims(t, axis=2)
        seen["shape"] = e.shape
        out = nl.ndarray((16, 8, 3), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(e, nl.zeros((16, 8, 3), dtype=nl.float32)))
        return out
    out = run(kernel, x)
    assert seen["shape"] == (16, 8, 1)
    np.testing.assert_array_equal(out, np.broadcast_to(x[:, :, None], (16, 8, 3)))
    with raises_at(ShapeError, match="new axes must come after the last existing axis", line="nl.expand_dims("):
        run(lambda x: nl.expand_dims(nl.load(x), axis=1), x)


@covers("gather_flattened", "uint32")
def test_gather_flattened_takes_along_the_flattened_free_dims(rng):
    data = rng.standard_normal((16, 4, 8)).astype(np.float32)
    idx = rng.integers(0, 32, (16, 12)).astype(np.uint32)

    def kernel(d, i):
        out = nl.ndarray((16, 12), dtype=nl.float32, buffer=nl.shared_hbm)
        ids = nl.load(i)
        assert ids.dtype == nl.uint32
        nl.store(out, value=nl.gather_flattened(nl.load(d), ids))
        return out
    np.testing.assert_array_equal(run(kernel, data, idx),
                                  np.take_along_axis(data.reshape(16, 32), idx.astype(np.int64), axis=1))


@covers("atomic_rmw")
def test_atomic_rmw_accumulates_duplicate_indices(rng):
    table = rng.standard_normal((10, 8)).astype(np.float32)
    vals = rng.standard_normal((64, 8)).astype(np.float32)
    idx = rng.integers(0, 10, (64, 1)).astype(np.int32)

    def kernel(vals, idx, table):
        out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(table))
        i_f = nl.arange(8)[None, :]
        nl.atomic_rmw(out[nl.load(idx), i_f], value=nl.load(vals), op=np.add)
        nl.atomic_rmw(out[0:1, :], value=1.0, op=np.add)
        return out
    expected = table.astype(np.float64)
    np.add.at(expected, idx[:, 0], vals)
    expected[0] += 1
    np.testing.assert_allclose(run(kernel, vals, idx, table), expected, rtol=1e-5, atol=1e-5)
    with raises_at(KernelError, match="supports op=np.add only", line="nl.atomic_rmw("):
        run(lambda v, t: nl.atomic_rmw(t, value=nl.load(v), op=np.multiply), vals[:10], table)


@covers("shared_constant", "shared_identity_matrix", "matmul", "bfloat16", "int8")
def test_shared_constants_load_like_inputs(rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    const = rng.integers(-5, 5, (64, 32)).astype(np.int8)

    def kernel(x):
        out = nl.ndarray((2, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        c = nl.shared_constant(const, dtype=nl.bfloat16)
        assert c.dtype == nl.bfloat16 and const.dtype == nl.int8
        nl.store(out[0], value=nl.add(nl.load(x), nl.load(c)))
        ident = nl.load(nl.shared_identity_matrix(64, dtype=nl.float32))
        nl.store(out[1], value=nl.matmul(ident, nl.load(x), transpose_x=True))
        return out
    out = run(kernel, x)
    np.testing.assert_allclose(out[0], x + const, rtol=1e-6)
    np.testing.assert_array_equal(out[1], x)

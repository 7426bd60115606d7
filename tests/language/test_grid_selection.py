"""NKI 0.7 grid selection beyond static tiles (docs: nki.language.contiguous_indices, interleaved_indices,
grid_element_offset, empty_like; tutorial "Tile-grid indexing and transformations"): shard slices and the
gapped views they make, element-offset keys, run-time keys (one coordinate, or a vector of gather rows),
empty_like's dense packing, navigation shape and transpose_axes, and the release the APIs belong to."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import DtypeError, OutOfBoundsError, ShapeError, UnsupportedError
from opennki.releases import ReleaseError
from tests.language.coverage import covers
from tests.raises import raises_at


def _sbuf_index(values):
    """An int32 SBUF tensor holding `values` (an HBM input)."""
    t = nl.ndarray(values.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=values)
    return t


# ------------------------------------------------------------------------------------ classes, factories

@covers("tiles", "blocks", "alloc_tiles", "alloc_blocks", "NkiGrid", "NkiTileGrid", "NkiBlockGrid", new=True)
def test_grid_factories_and_classes(rng):
    """A (96, 80) tensor through blocks of (2, 2) tiles of (32, 16) in SBUF (alloc_blocks), then per tile
    (alloc_tiles), plus 1: the last block and tile column are partial, so every .data runs clamped."""
    @nki.jit
    def kernel(src):
        dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
        b, ob = nl.blocks(src, tile_shape=(32, 16), block_shape=(2, 2)), nl.tiles(dst, tile_shape=(32, 16))
        assert isinstance(b, nl.NkiBlockGrid) and isinstance(b, nl.NkiGrid) and b.shape == (2, 3)
        regrouped = nl.blocks(nl.tiles(src, tile_shape=(32, 16)), block_shape=(2, 2))
        assert regrouped.shape == b.shape and regrouped[1, 2].element_shape == b[1, 2].element_shape == (32, 16)
        for i in range(b.shape[0]):
            for j in range(b.shape[1]):
                inner = nl.tiles(b[i, j])
                assert isinstance(inner, nl.NkiTileGrid) and isinstance(inner, nl.NkiGrid)
                held = nl.alloc_blocks(tile_shape=(32, 16), block_shape=(2, 2), element_shape=b[i, j].element_shape,
                                       buffer=nl.sbuf, dtype=src.dtype)
                for r in range(inner.shape[0]):
                    nisa.dma_copy(dst=nl.tiles(held)[r, :].data, src=inner[r, :].data)
                for r in range(inner.shape[0]):
                    for c in range(inner.shape[1]):
                        t = nl.alloc_tiles(tile_shape=(32, 16), element_shape=inner[r, c].element_shape,
                                           buffer=nl.sbuf, dtype=src.dtype)
                        nisa.tensor_scalar(dst=t.data, data=nl.tiles(held)[r, c].data, op0=nl.add, operand0=1.0)
                        nisa.dma_copy(dst=ob[2 * i + r, 2 * j + c].data, src=t.data)
        return dst
    x = rng.standard_normal((96, 80)).astype(np.float32)
    np.testing.assert_array_equal(kernel(x), x + np.float32(1.0))


# ------------------------------------------------------------------------------------------ shard slices

@covers("contiguous_indices", "interleaved_indices", new=True)
def test_shard_slices_cover_the_extent_once():
    for extent in (1, 7, 10, 64):
        for shards in range(1, min(extent, 6) + 1):
            runs = [nl.contiguous_indices(extent, shard_id=s, num_shards=shards) for s in range(shards)]
            sizes = [len(range(*r.indices(extent))) for r in runs]
            assert [i for r in runs for i in range(*r.indices(extent))] == list(range(extent))
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True) and min(sizes) > 0
            rr = [nl.interleaved_indices(extent, shard_id=s, num_shards=shards) for s in range(shards)]
            assert sorted(i for r in rr for i in range(*r.indices(extent))) == list(range(extent))
    assert [nl.contiguous_indices(10, shard_id=s, num_shards=3) for s in range(3)] == [
        slice(0, 4), slice(4, 7), slice(7, 10)]
    assert nl.interleaved_indices(10, shard_id=1, num_shards=3) == slice(1, 10, 3)
    np.testing.assert_array_equal(np.arange(10)[nl.interleaved_indices(10, shard_id=2, num_shards=3)], [2, 5, 8])


class _Int(int):
    pass


@pytest.mark.parametrize("fn", [nl.contiguous_indices, nl.interleaved_indices])
@pytest.mark.parametrize("args,error,match", [
    ((True, 0, 1), DtypeError, "exact Python int"), ((_Int(4), 0, 2), DtypeError, "exact Python int"),
    ((4.0, 0, 2), DtypeError, "exact Python int"), ((0, 0, 1), ShapeError, "extent must be positive"),
    ((3, 0, 4), ShapeError, r"num_shards must be in \[1, extent\]"), ((3, 3, 3), ShapeError, "shard_id"),
    ((3, -1, 3), ShapeError, "shard_id")])
def test_shard_slices_reject_what_the_docs_reject(fn, args, error, match):
    extent, shard_id, num_shards = args
    with pytest.raises(error, match=match) as info:
        fn(extent, shard_id=shard_id, num_shards=num_shards)
    assert isinstance(info.value, TypeError if error is DtypeError else ValueError)


@nki.jit
def sharded_scale(src, interleaved):
    """Each of the two cores of an LNC=2 launch scales the tile columns it owns by (its id + 2)."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    tiles, out = nl.tiles(src, tile_shape=(64, 32)), nl.tiles(dst, tile_shape=(64, 32))
    me, cores = nl.program_id(0), nl.num_programs(0)
    pick = nl.interleaved_indices if interleaved else nl.contiguous_indices
    cols = pick(tiles.shape[1], shard_id=me, num_shards=cores)
    mine, mine_out = tiles[:, cols], out[:, cols]
    for i in range(mine.shape[0]):
        for j in range(mine.shape[1]):
            t = nl.empty_like(mine[i, j], buffer=nl.sbuf)
            nisa.dma_copy(dst=t.data, src=mine[i, j].data)
            nisa.tensor_scalar(dst=t.data, data=t.data, op0=nl.multiply, operand0=float(me + 2))
            nisa.dma_copy(dst=mine_out[i, j].data, src=t.data)
    return dst


@pytest.mark.parametrize("interleaved", [False, True])
def test_sharded_kernel_body_is_unchanged_by_the_slice(rng, interleaved):
    x = rng.standard_normal((128, 32 * 5)).astype(np.float32)
    got = sharded_scale[2](x, interleaved)
    owner = np.arange(5) % 2 if interleaved else np.array([0, 0, 0, 1, 1])
    want = x * np.repeat(owner + 2.0, 32)[None, :]
    np.testing.assert_array_equal(got, want.astype(np.float32))


# ----------------------------------------------------------------------------------------- gapped views

@nki.jit
def gapped_copy(src, gap):
    """Every `gap`-th tile column of each tile row moves in one DMA into dense SBUF (nl.empty_like packs the
    cells), is negated there and goes back through the same gapped view."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=dst, src=src)
    g, out = nl.tiles(src, tile_shape=(32, 16)), nl.tiles(dst, tile_shape=(32, 16))
    for r in range(g.shape[0]):
        row, out_row = g[r, ::gap], out[r, ::gap]
        assert row.index_step_elements == (16 * gap,) and row.shape == (len(range(0, g.shape[1], gap)),)
        assert row.element_shape == (32, 16 * row.shape[0]) and row.is_data_representable
        dense = nl.empty_like(row, buffer=nl.sbuf)
        assert dense.shape == row.shape and dense.element_shape == row.element_shape
        assert row.data.shape == (32, row.shape[0], 16)
        nisa.dma_copy(dst=dense.data, src=row.data)
        nisa.tensor_scalar(dst=dense.data, data=dense.data, op0=nl.multiply, operand0=-1.0)
        nisa.dma_copy(dst=out_row.data, src=dense.data)
    return dst


@pytest.mark.parametrize("gap", [2, 3])
def test_gapped_view_moves_only_its_cells(rng, gap):
    x = rng.standard_normal((64, 16 * 7)).astype(np.float32)
    want = x.copy()
    for c in range(0, 7, gap):
        want[:, 16 * c:16 * c + 16] *= -1
    np.testing.assert_array_equal(gapped_copy(x, gap), want)


def test_gapped_geometry_and_its_limits():
    @nki.jit
    def geometry(src):
        g = nl.tiles(src, tile_shape=(32, 16))           # (64, 100): 2 x 7 tiles, the last column 4 wide
        odd = g[:, 1::2]                                  # columns 1, 3, 5: all full
        assert odd.shape == (2, 3) and odd.index_step_elements == (32, 32) and odd.element_shape == (64, 48)
        assert odd[1, 2].element_shape == (32, 16) and not odd.is_remainder and odd.data.shape == (64, 3, 16)
        even = g[0, ::2]                                  # columns 0, 2, 4, 6: the last one partial
        assert even.element_shape == (32, 52) and even.is_remainder and not even.is_data_representable
        assert g[0, ::3][1:].shape == (2,) and g[0, ::3][1:].index_step_elements == (48,)
        packed = nl.empty_like(even, buffer=nl.sbuf)      # dense storage still takes the 52 columns
        assert packed.element_shape == (32, 52) and packed.data.shape == (32, 52)
        on_chip = nl.alloc_tiles(tile_shape=(32, 16), element_shape=(32, 96), buffer=nl.sbuf, dtype=src.dtype)
        assert on_chip[0, 1::2].data.shape == (32, 3, 16)
        with raises_at(UnsupportedError, match="no single access pattern", line="even.data"):
            even.data
        with raises_at(UnsupportedError, match="regrouping", line="nl.tiles(odd)"):
            nl.tiles(odd)
        return src
    geometry(np.zeros((64, 100), np.float32))


def test_gapped_on_chip_tiles_are_one_strided_operand(rng):
    @nki.jit
    def every_other(src):
        grid = nl.alloc_tiles(tile_shape=(32, 16), element_shape=(32, 96), buffer=nl.sbuf, dtype=src.dtype)
        nisa.memset(dst=grid.data, value=0.0)
        hbm = nl.tiles(src, tile_shape=(32, 16))
        nisa.dma_copy(dst=grid[0, 1::2].data, src=hbm[0, 1::2].data)
        dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=dst, src=grid.data)
        return dst
    x = rng.standard_normal((32, 96)).astype(np.float32)
    want = np.zeros_like(x)
    for c in (1, 3, 5):
        want[:, 16 * c:16 * c + 16] = x[:, 16 * c:16 * c + 16]
    np.testing.assert_array_equal(every_other(x), want)


# ----------------------------------------------------------------------------------- element-offset keys

@covers("grid_element_offset", new=True)
def test_static_element_offsets_are_coordinates_in_elements(rng):
    @nki.jit
    def pick(src):
        g = nl.tiles(src, tile_shape=(32, 16))
        cell = g[nl.grid_element_offset(64), nl.grid_element_offset(48)]
        assert cell.element_shape == g[2, 3].element_shape == (32, 16)
        t = nl.empty_like(cell, buffer=nl.sbuf)
        nisa.dma_copy(dst=t.data, src=cell.data)
        out = nl.ndarray((32, 16), dtype=src.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t.data)
        return out
    x = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(pick(x), x[64:96, 48:64])


@pytest.mark.parametrize("use,error,match", [
    (lambda g: g[nl.grid_element_offset(40), 0], OutOfBoundsError, "aligned to the view's step"),
    (lambda g: g[nl.grid_element_offset(128), 0], OutOfBoundsError, "aligned to the view's step"),
    (lambda g: nl.grid_element_offset(-32), ShapeError, "nonnegative"),
    (lambda g: nl.grid_element_offset(True), DtypeError, "bool"),
    (lambda g: nl.grid_element_offset(1.5), DtypeError, "offset must be"),
    (lambda g: nl.grid_element_offset(nl.ndarray((2, 1), dtype=nl.int32, buffer=nl.sbuf)), ShapeError,
     "scalar-shaped"),
])
def test_element_offset_errors_name_the_kernel_line(use, error, match):
    @nki.jit
    def kernel(src):
        use(nl.tiles(src, tile_shape=(32, 16)))
        return src
    with raises_at(error, match=match) as info:
        kernel(np.zeros((128, 64), np.float32))
    assert info.value.location.filename == __file__


# ------------------------------------------------------------------------------------------ run-time keys

@nki.jit
def tile_at(src, where, how):
    """The tile at a tile coordinate read at run time: a (1, 1) tensor key, the same as an NkiScalar, or an
    element offset (`where` times the tile height) through nl.grid_element_offset."""
    g = nl.tiles(src, tile_shape=(32, 16))
    i = _sbuf_index(where)
    if how == "tensor":
        cell = g[i, 2]
    elif how == "scalar":
        cell = g[nisa.scalar_load(i), 2]
    else:
        rows = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rows, data=i, op0=nl.multiply, operand0=32)
        cell = g[nl.grid_element_offset(rows), 2]
    assert cell.element_shape == (32, 16)
    t = nl.empty_like(cell, buffer=nl.sbuf)
    nisa.dma_copy(dst=t.data, src=cell.data)
    out = nl.ndarray((32, 16), dtype=src.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t.data)
    return out


@pytest.mark.parametrize("how", ["tensor", "scalar", "offset"])
def test_run_time_coordinate_selects_its_tile(rng, how):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    for k in (0, 3):
        np.testing.assert_array_equal(tile_at(x, np.array([[k]], np.int32), how), x[32 * k:32 * k + 32, 32:48])


def test_an_nkiscalar_key_of_an_sbuf_grid_is_int32():
    @nki.jit
    def kernel(src, where):
        g = nl.tiles(nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf), tile_shape=(32, 16))
        i = nl.ndarray((1, 1), dtype=nl.int64, buffer=nl.sbuf)
        nisa.dma_copy(dst=i, src=where)
        g[0, nisa.scalar_load(i)]
        return src
    with raises_at(DtypeError, match="NkiScalar key of an SBUF grid is int32", line="g[0, nisa.scalar_load(i)]"):
        kernel(np.zeros((1, 1), np.float32), np.array([[1]], np.int64))


def test_run_time_coordinate_past_the_tensor_is_the_dmas_out_of_bounds(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    with raises_at(IndexError, line="nisa.dma_copy(dst=t.data, src=cell.data)"):
        tile_at(x, np.array([[4]], np.int32), "tensor")


@nki.jit
def gather_rows(table, indices):
    """out[k] = table[indices[k]]: each index tile of up to 64 rows (the last one partial) drives one
    gathering DMA per column tile of the table."""
    out = nl.ndarray((indices.shape[0], table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    rows, index_tiles, out_tiles = (nl.tiles(table, tile_shape=(64, 32)), nl.tiles(indices, tile_shape=(64, 1)),
                                    nl.tiles(out, tile_shape=(64, 32)))
    for i in range(out_tiles.shape[0]):
        idx = nl.empty_like(index_tiles[i, 0].data, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=index_tiles[i, 0].data)
        for j in range(out_tiles.shape[1]):
            picked = rows[idx, j]
            assert picked.element_shape == (idx.shape[0], 32)
            t = nl.empty_like(picked, buffer=nl.sbuf)
            nisa.dma_copy(dst=t.data, src=picked.data)
            nisa.dma_copy(dst=out_tiles[i, j].data, src=t.data)
    return out


def test_vector_key_gathers_rows(rng):
    table = rng.standard_normal((300, 96)).astype(np.float32)
    idx = rng.integers(0, 300, (100, 1)).astype(np.int32)
    np.testing.assert_array_equal(gather_rows(table, idx), table[idx[:, 0]])


@nki.jit
def gather_or_keep(table, indices):
    """A gather whose out-of-range rows are skipped by the DMA (oob_mode.skip): those rows keep -7."""
    out = nl.ndarray((indices.shape[0], table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    rows, out_tiles = nl.tiles(table, tile_shape=(64, 32)), nl.tiles(out, tile_shape=(64, 32))
    idx = _sbuf_index(indices)
    for j in range(out_tiles.shape[1]):
        t = nl.empty_like(out_tiles[0, j], buffer=nl.sbuf)
        nisa.memset(dst=t.data, value=-7.0)
        nisa.dma_copy(dst=t.data, src=rows[idx, j].data, oob_mode=nisa.oob_mode.skip)
        nisa.dma_copy(dst=out_tiles[0, j].data, src=t.data)
    return out


def test_out_of_range_gather_rows_follow_the_dmas_oob_mode(rng):
    table = rng.standard_normal((100, 64)).astype(np.float32)
    idx = rng.integers(-20, 120, (64, 1)).astype(np.int32)
    inside = (idx[:, 0] >= 0) & (idx[:, 0] < 100)
    assert 0 < inside.sum() < 64
    want = np.full((64, 64), -7.0, np.float32)
    want[inside] = table[idx[inside, 0]]
    np.testing.assert_array_equal(gather_or_keep(table, idx), want)


@nki.jit
def scatter_rows(table, src, indices):
    """out = table with out[indices[k]] = src[k]: the vector key on the destination of the DMA."""
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=table)
    rows, src_tiles = nl.tiles(out, tile_shape=(64, 32)), nl.tiles(src, tile_shape=(64, 32))
    index_tiles = nl.tiles(indices, tile_shape=(64, 1))
    for i in range(src_tiles.shape[0]):
        idx = nl.empty_like(index_tiles[i, 0].data, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=index_tiles[i, 0].data)
        for j in range(src_tiles.shape[1]):
            t = nl.empty_like(src_tiles[i, j], buffer=nl.sbuf)
            nisa.dma_copy(dst=t.data, src=src_tiles[i, j].data)
            nisa.dma_copy(dst=rows[idx, j].data, src=t.data)
    return out


def test_vector_key_scatters_rows(rng):
    table, src = rng.standard_normal((300, 96)).astype(np.float32), rng.standard_normal((100, 96)).astype(np.float32)
    idx = rng.permutation(300)[:100].reshape(100, 1).astype(np.int32)
    want = table.copy()
    want[idx[:, 0]] = src
    np.testing.assert_array_equal(scatter_rows(table, src, idx), want)


@pytest.mark.parametrize("use,error,match", [
    (lambda g, i: nl.tiles(_on_chip(), tile_shape=(32, 16))[i, 0], UnsupportedError, "across partitions"),
    (lambda g, i: g[0, _rows(8)], UnsupportedError, "leading dimension of an HBM grid"),
    (lambda g, i: g[i, i], UnsupportedError, "one run-time key"),
    (lambda g, i: g[nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf), 0], DtypeError, "int32 or uint32"),
])
def test_run_time_key_errors_name_the_kernel_line(use, error, match):
    @nki.jit
    def kernel(src):
        g = nl.tiles(src, tile_shape=(32, 16))
        use(g, nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf))
        return src
    with raises_at(error, match=match):
        kernel(np.zeros((128, 64), np.float32))


def _on_chip():
    return nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)


def _rows(k):
    return nl.ndarray((k, 1), dtype=nl.int32, buffer=nl.sbuf)


# ------------------------------------------------------------------------------- empty_like of a grid

def test_empty_like_keeps_the_navigation_shape_and_takes_an_address():
    @nki.jit
    def shapes(src):
        g = nl.blocks(src, tile_shape=(32, 16), block_shape=(1, 2))      # (64, 80): 2 x 3 blocks, the last 16 wide
        row = nl.empty_like(g[1, :], buffer=nl.sbuf)
        assert isinstance(row, nl.NkiBlockGrid) and row.shape == (3,) and row.element_shape == (32, 80)
        assert row.block_shape == (1, 2) and row[2].element_shape == (32, 16) and row[2].is_remainder
        column = nl.empty_like(g[:, 2])
        assert column.shape == (2,) and column.element_shape == (64, 16) and column.buffer == nl.shared_hbm
        one = nl.empty_like(g[0, 1], dtype=nl.bfloat16)
        assert one.shape == () and one.element_shape == (32, 32) and one.dtype == nl.bfloat16
        pinned = nl.empty_like(g[0, 0], buffer=nl.sbuf, address=(0, 4096))
        assert pinned.data.shape == (32, 32) and pinned.data.storage.placement.address == 4096
        plain = nl.empty_like(src, transpose_axes=(1, 0))
        assert plain.shape == (80, 64) and plain.buffer == nl.shared_hbm
        return src
    shapes(np.zeros((64, 80), np.float32))


@nki.jit
def transpose_tiles(src):
    """out = src.T: every (32, 64) tile goes through a (64, 32) SBUF tile made by empty_like(transpose_axes)."""
    rows, cols = src.shape
    out = nl.ndarray((cols, rows), dtype=src.dtype, buffer=nl.shared_hbm)
    g, og = nl.tiles(src, tile_shape=(32, 64)), nl.tiles(out, tile_shape=(64, 32))
    for i in range(g.shape[0]):
        for j in range(g.shape[1]):
            t = nl.empty_like(g[i, j], buffer=nl.sbuf, transpose_axes=(1, 0))
            assert t.tile_shape == (64, 32) and t.element_shape == (64, 32)
            nisa.dma_transpose(dst=t.data, src=g[i, j].data)
            nisa.dma_copy(dst=og[j, i].data, src=t.data)
    return out


def test_transpose_axes_prepares_a_dma_transpose(rng):
    x = rng.standard_normal((64, 128)).astype(np.float16)
    np.testing.assert_array_equal(transpose_tiles(x), x.T)


@pytest.mark.parametrize("axes,match", [((0, 1), "transpose_axes must be"), ((2, 1, 0), "transpose_axes must be")])
def test_transpose_axes_takes_dma_transposes_orders(axes, match):
    @nki.jit
    def kernel(src):
        nl.empty_like(nl.tiles(src, tile_shape=(32, 16))[0, 0], buffer=nl.sbuf, transpose_axes=axes)
        return src
    with raises_at(ShapeError, match=match):
        kernel(np.zeros((64, 64), np.float32))


def test_transposed_partition_extent_must_fit():
    @nki.jit
    def kernel(src):
        nl.empty_like(nl.tiles(src, tile_shape=(32, 256))[0, 0], buffer=nl.sbuf, transpose_axes=(1, 0))
        return src
    with raises_at(ShapeError, match="transposed partition extent .* exceeds 128"):
        kernel(np.zeros((64, 256), np.float32))


# --------------------------------------------------------------------------------------------- releases

@pytest.mark.parametrize("use,api", [
    (lambda s: nl.tiles(s, tile_shape=(32, 16)), "nl.tiles"),
    (lambda s: nl.blocks(s, tile_shape=(32, 16), block_shape=(1, 1)), "nl.blocks"),
    (lambda s: nl.alloc_tiles(tile_shape=(32, 16), element_shape=(32, 16), buffer=nl.sbuf, dtype=nl.float32),
     "nl.alloc_tiles"),
    (lambda s: nl.contiguous_indices(4, shard_id=0, num_shards=2), "nl.contiguous_indices"),
    (lambda s: nl.interleaved_indices(4, shard_id=0, num_shards=2), "nl.interleaved_indices"),
    (lambda s: nl.grid_element_offset(0), "nl.grid_element_offset")])
def test_grid_apis_are_nki_0_7s(use, api):
    def kernel(src):
        use(src)
        return src
    x = np.zeros((64, 64), np.float32)
    with raises_at(ReleaseError, match=rf"{api} does not exist in NKI 0\.6.*added in NKI 0\.7"):
        nki.jit(kernel, api_version="0.6")(x)
    np.testing.assert_array_equal(nki.jit(kernel, api_version="0.7")(x), x)

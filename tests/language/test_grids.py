"""NKI 0.7 tile and block grids: nl.tiles / nl.blocks views over tensors, nl.alloc_tiles / nl.alloc_blocks
storage (on chip: every tile side by side along the free dimension), their checks, and where tiles land."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import DtypeError, OutOfBoundsError, ShapeError, UnsupportedError
from opennki.events import InstructionExecuted
from opennki.listeners import Recorder
from tests.raises import raises_at


@nki.jit
def scale_tiles(src, factor):
    """Each (128, 96) tile (the last ones clamped) scaled in SBUF storage shaped like the tile."""
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_tiles, dst_tiles = nl.tiles(src, tile_shape=(128, 96)), nl.tiles(dst, tile_shape=(128, 96))
    for i in range(src_tiles.shape[0]):
        for j in range(src_tiles.shape[1]):
            t = nl.empty_like(src_tiles[i, j], buffer=nl.sbuf)
            nisa.dma_copy(dst=t.data, src=src_tiles[i, j].data)
            nisa.tensor_scalar(dst=t.data, data=t.data, op0=nl.multiply, operand0=factor)
            nisa.dma_copy(dst=dst_tiles[i, j].data, src=t.data)
    return dst


@pytest.mark.parametrize("shape", [(256, 192), (300, 200), (128, 96), (3, 2, 130, 100)])
def test_tiles_cover_the_tensor_with_clamped_edges(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    if len(shape) == 4:       # leading HBM dims are indexed a slab at a time
        @nki.jit
        def per_slab(src):
            dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
            grid, out = nl.tiles(src, tile_shape=(128, 96)), nl.tiles(dst, tile_shape=(128, 96))
            assert grid.shape == (3, 2, 2, 2) and grid.index_step_elements == (1, 1, 128, 96)
            for a in range(3):
                for b in range(2):
                    for i in range(2):
                        for j in range(2):
                            cell = grid[a, b, i, j]
                            t = nl.ndarray(cell.element_shape[2:], dtype=src.dtype, buffer=nl.sbuf)
                            nisa.dma_copy(dst=t, src=cell.data.reshape(cell.element_shape[2:]))
                            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=-1.0)
                            nisa.dma_copy(dst=out[a, b, i, j].data.reshape(cell.element_shape[2:]), src=t)
            return dst
        np.testing.assert_array_equal(per_slab(x), -x)
        return
    np.testing.assert_allclose(scale_tiles(x, 1.5), 1.5 * x, rtol=1e-6)


def test_grid_geometry():
    @nki.jit
    def geometry(src):
        g = nl.tiles(src, tile_shape=(128, 256))
        assert g.shape == (3, 2) and g.element_shape == (300, 400) and g.is_remainder
        corner = g[2, 1]
        assert corner.shape == () and corner.element_shape == (44, 144) and corner.is_remainder
        assert g[0, 0].element_shape == (128, 256) and not g[0, 0].is_remainder
        row = g[1, :]
        assert row.shape == (2,) and row.element_shape == (128, 400) and row.data.shape == (128, 400)
        assert g[-1, 0].element_shape == (44, 256) and isinstance(g[0], nl.NkiTileGrid)
        b = nl.blocks(src, tile_shape=(128, 256), block_shape=(2, 1))
        assert isinstance(b, nl.NkiBlockGrid) and isinstance(b, nl.NkiGrid)
        assert b.shape == (2, 2) and b.index_step_elements == (256, 256) and b.block_shape == (2, 1)
        assert b[1, 1].element_shape == (44, 144)
        inner = nl.tiles(b[0, 1])
        assert inner.shape == (2, 1) and inner.tile_shape == (128, 256) and inner[1, 0].element_shape == (128, 144)
        assert g.dtype == nl.float32 and g.buffer == nl.shared_hbm and g.is_data_representable
        return src
    geometry(np.zeros((300, 400), np.float32))


@nki.jit
def blocked_rows(src):
    """Blocks of one tile row by 4 tiles move in one DMA each into alloc_blocks SBUF storage; each tile of
    the block is then exponentiated on its own."""
    tile, block = (128, 128), (1, 4)
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    src_blocks = nl.blocks(src, tile_shape=tile, block_shape=block)
    dst_blocks = nl.blocks(dst, tile_shape=tile, block_shape=block)
    for i in range(src_blocks.shape[0]):
        for j in range(src_blocks.shape[1]):
            sb = nl.alloc_blocks(tile_shape=tile, block_shape=block, element_shape=src_blocks[i, j].element_shape,
                                 buffer=nl.sbuf, dtype=src.dtype)
            nisa.dma_copy(dst=sb.data, src=src_blocks[i, j].data)
            for t in nl.tiles(sb):
                for cell in t:
                    nisa.activation(dst=cell.data, op=nl.exp, data=cell.data)
            nisa.dma_copy(dst=dst_blocks[i, j].data, src=sb.data)
    return dst


def test_a_blocked_layout_kernel(rng):
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    rec = Recorder()
    got = blocked_rows.launch((x,), listeners=[rec])
    np.testing.assert_allclose(got, np.exp(x), rtol=2e-6)
    copies = [e for e in rec.of_type(InstructionExecuted) if e.opcode == "dma_copy"]
    assert len(copies) == 2 * 2 * 2        # one DMA in and one out per (1, 4) block
    assert all(o.shape == (128, 512) for e in copies for o in e.operands)


def test_on_chip_tiles_sit_side_by_side_along_the_free_dimension(rng):
    """alloc_tiles in SBUF: tile (r, c) of a 3 x 3 grid of (128, 64) fp32 tiles starts (3r + c) * 256 bytes
    after the first, in the same 128 partitions."""
    starts = {}

    @nki.jit
    def place(src):
        grid = nl.alloc_tiles(tile_shape=(128, 64), element_shape=(300, 150), buffer=nl.sbuf, dtype=src.dtype)
        assert grid.shape == (3, 3)
        hbm = nl.tiles(src, tile_shape=(128, 64))
        dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
        out = nl.tiles(dst, tile_shape=(128, 64))
        for r in range(3):
            for c in range(3):
                nisa.dma_copy(dst=grid[r, c].data, src=hbm[r, c].data)
        for r in range(3):
            for c in range(3):
                nisa.dma_copy(dst=out[r, c].data, src=grid[r, c].data)
        assert not grid[0:2, 0].is_data_representable and grid[2, :].is_data_representable  # one tile row
        assert grid[1, 0:2].is_data_representable
        return dst
    x = rng.standard_normal((300, 150)).astype(np.float32)
    rec = Recorder()
    np.testing.assert_array_equal(place.launch((x,), listeners=[rec]), x)
    loads = [e for e in rec.of_type(InstructionExecuted) if e.opcode == "dma_copy"][:9]
    for k, e in enumerate(loads):
        dst = next(o for o in e.operands if o.role == "dst")
        starts[k] = (dst.region.partition_start, dst.region.byte_start)
    base = starts[0][1]
    assert [s[1] - base for s in starts.values()] == [k * 64 * 4 for k in range(9)]
    assert {s[0] for s in starts.values()} == {0}


BAD = [
    (lambda s: nl.tiles(s, tile_shape=[128, 64]), DtypeError, "tuple of Python ints"),
    (lambda s: nl.tiles(s, tile_shape=(128,)), ShapeError, "at least 2 dimensions"),
    (lambda s: nl.tiles(s, tile_shape=(0, 64)), ShapeError, "must be positive"),
    (lambda s: nl.tiles(s, tile_shape=(1, 128, 64)), ShapeError, "more dimensions than the tensor"),
    (lambda s: nl.blocks(s, tile_shape=(128, 64), block_shape=(2,)), ShapeError, "one entry per tiled dimension"),
    (lambda s: nl.tiles(s, tile_shape=(128, 64))[2, 0], OutOfBoundsError, "out of range"),
    (lambda s: nl.tiles(s, tile_shape=(128, 64))[0, ::-1], UnsupportedError, "positive step"),
    (lambda s: nl.alloc_tiles(tile_shape=(256, 64), element_shape=(256, 64), buffer=nl.sbuf, dtype=nl.float32),
     ShapeError, "at most 128 partitions"),
    (lambda s: nl.alloc_tiles(tile_shape=(128, 64), element_shape=(128, 64), buffer="sbuf", dtype=nl.float32),
     DtypeError, "MemoryRegion"),
    (lambda s: nl.alloc_tiles(tile_shape=(128, 64), element_shape=(256, 64), buffer=nl.sbuf,
                              dtype=nl.float32)[:, 0].data, UnsupportedError, "no single access pattern"),
]


@pytest.mark.parametrize("use,error,match", BAD)
def test_grid_errors_name_the_kernel_line(use, error, match):
    @nki.jit
    def kernel(src):
        use(src)
        return src
    with raises_at(error, match=match) as exc:
        kernel(np.zeros((256, 128), np.float32))
    assert exc.value.location.filename == __file__

"""Block tensors as the official samples use them: a tensor with several block dims indexed by its leading
block dims only, and the sub-tensor handed to a helper function (regression: such indexing used to raise
err_failed_to_infer_tile_from_local_tensor)."""

import numpy as np

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError
from opennki.legacy.language import par_dim
from tests.language.helpers import run
from tests.raises import raises_at


def _row_sums(sums, x, head, n_tiles):
    """Helper in the samples' style: fills one row sum per tile of its (T, par_dim(P), 1) block tensor."""
    for t in nl.affine_range(n_tiles):
        tile = nl.load(x[head, t * 128:(t + 1) * 128, :])
        sums[t, :, 0] = nisa.tensor_reduce(np.add, tile, axis=(1,), dtype=nl.float32)


def _heads_kernel(x):
    heads, seq, width = x.shape
    n_tiles = seq // 128
    out = nl.ndarray((heads, seq, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((heads, n_tiles, par_dim(128), 1), dtype=nl.float32)
    for h in nl.affine_range(heads):
        _row_sums(sums[h], x, h, n_tiles)
    for h in nl.affine_range(heads):
        per_head = sums[h]
        assert per_head.shape == (n_tiles, 128, 1)
        for t in nl.affine_range(n_tiles):
            nl.store(out[h, t * 128:(t + 1) * 128, :], value=nl.multiply(per_head[t], 2.0))
    return out


def test_leading_block_index_gives_the_remaining_block_tensor(rng):
    x = rng.standard_normal((3, 256, 40)).astype(np.float32)
    out = run(_heads_kernel, x)
    np.testing.assert_allclose(out, 2.0 * x.sum(axis=2, keepdims=True), rtol=1e-5, atol=1e-5)


def test_a_slice_in_a_block_dim_is_still_rejected(rng):
    def kernel(x):
        blocks = nl.ndarray((2, 3, par_dim(128), 4), dtype=nl.float32)
        blocks[0, :, :, :] = nl.load(x)
    x = rng.standard_normal((128, 4)).astype(np.float32)
    with raises_at(KernelError, match="err_failed_to_infer_tile_from_local_tensor"):
        run(kernel, x)


def _rest(rng, tile_shape):
    """A random rest of a block tensor's key: ints and slices (in and out of bounds, any steps), sometimes an
    entry the one-subscript path does not take (an arange index, `...`, a NumPy int), sometimes one too many."""
    rest = []
    for n in tile_shape[:int(rng.integers(1, len(tile_shape) + 2))]:
        r = rng.random()
        if r < 0.3:
            rest.append(int(rng.integers(-n - 2, n + 2)))
        elif r < 0.85:
            bound = [None] + list(range(-n - 2, n + 3))
            rest.append(slice(bound[rng.integers(len(bound))], bound[rng.integers(len(bound))],
                              [None, 1, 2, 0][rng.integers(4)]))
        else:
            rest.append([nl.arange(n)[:, None], Ellipsis, np.int64(0)][rng.integers(3)])
    if len(rest) > len(tile_shape):
        rest.append(0)
    return tuple(rest)


def _outcome(get):
    try:
        view = get()
    except Exception as e:      # noqa: BLE001 - the errors are compared, type and message
        return type(e), str(e)
    return (type(view), view.storage, tuple(view.shape), view.amap, view.consts, view.coords, view.dynamic,
            view._geo or view._geometry(), view.in_bounds())


def test_a_block_tile_subscript_in_one_step_is_the_tile_subscripted(rng):
    """`blk[b, rest]` on an SBUF block tensor is one subscript of its storage (BlockTensor view_of): the view, its
    geometry and bounds verdict, and the errors are those of the block's tile subscripted with `rest`, for a block
    tensor and the sub-tensor of its leading block dims; PSUM block tensors (a storage per block) too."""
    checked = []

    def kernel(x):
        sbuf = nl.ndarray((2, 3, par_dim(16), 4, 5), dtype=nl.float32)
        psum = nl.ndarray((2, par_dim(16), 8), dtype=nl.float32, buffer=nl.psum)
        assert sbuf._view_of is not None and sbuf[1]._view_of is not None and psum._view_of is None
        for blk in (sbuf, sbuf[1], psum):
            nb = len(blk.blocks)
            for _ in range(300):
                index = tuple(int(rng.integers(-n, n)) for n in blk.blocks)
                rest = _rest(rng, blk.tile_shape)
                wrapped = tuple(i % n for i, n in zip(index, blk.blocks))
                # on one line: an error names the kernel line
                fast, slow = _outcome(lambda: blk[index + rest]), _outcome(lambda: blk._tile_of(wrapped)[rest])
                assert fast == slow, (index, rest)
                checked.append(nb)
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(kernel, x), x)
    assert checked == [2] * 300 + [1] * 600

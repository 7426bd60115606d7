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

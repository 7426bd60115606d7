"""`nl.range` (new generation): an nl loop iterator like Python's range, which NKI Library kernels use although
the spec lists only the deprecated affine/sequential/static aliases."""

import numpy as np

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl


@nki.jit
def column_block_sums(x, block: int):
    """out[:, j] = sum of x's j-th block of `block` columns, one nl.range iteration per block, every other
    block visited with a step of 2 on the way back."""
    rows, cols = x.shape
    n = cols // block
    t = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    sums = nl.ndarray((rows, n), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.range(n):
        nisa.tensor_reduce(dst=sums[:, j:j + 1], op=nl.add, data=t[:, nl.ds(j * block, block)], axis=1)
    for j in nl.range(n - 1, -1, -2):
        nisa.tensor_scalar(dst=sums[:, j:j + 1], data=sums[:, j:j + 1], op0=nl.multiply, operand0=-1.0)
    out = nl.ndarray((rows, n), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=sums)
    return out


def test_nl_range_iterates_like_range(rng):
    x = rng.standard_normal((8, 40)).astype(np.float32)
    want = x.reshape(8, 5, 8).sum(-1)
    want[:, 4::-2] *= -1
    np.testing.assert_allclose(column_block_sums(x, 8), want, rtol=1e-5, atol=1e-5)

"""`nisa.tensor_tensor` with a [P, 1] operand, as the official double-row matmul dequantizes [P, N] results
by [P, 1] scales: the column broadcasts along the free dims (a zero-stride access pattern; regression:
"'dst' and 'data2' must have the same number of elements per partition")."""

import numpy as np

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import ShapeError
from tests.language.helpers import run
from tests.raises import raises_at


def _scaled_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    peak = nisa.tensor_reduce(nl.max, nl.abs(tile), axis=[1])             # [P, 1]
    nl.store(out, value=nisa.tensor_tensor(tile, peak, nl.multiply))
    return out


def test_a_column_operand_broadcasts_along_the_free_dims(rng):
    x = rng.standard_normal((128, 300)).astype(np.float32)
    np.testing.assert_allclose(run(_scaled_rows, x), x * np.abs(x).max(axis=1, keepdims=True), rtol=1e-6)


def test_shapes_that_do_not_broadcast_are_still_rejected(rng):
    def kernel(x):
        tile = nl.load(x)
        nisa.tensor_tensor(tile, tile[:, 0:3], nl.add)
    with raises_at(ShapeError, match="'dst' and 'data2' must have the same number of elements per partition",
                   line="nisa.tensor_tensor(tile, tile[:, 0:3], nl.add)"):
        run(kernel, rng.standard_normal((16, 8)).astype(np.float32))

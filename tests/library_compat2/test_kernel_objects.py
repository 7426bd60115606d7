"""Plain Python objects that large new-generation kernels pass around: configuration classes derived from
`nl.NKIObject` (with `@dataclass` and unannotated class attributes, whose constructor NKI's compiler
synthesizes) and dtype objects passed as kernel arguments (`np.float32`, `ml_dtypes.bfloat16`)."""

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa
import opennki.language as nl
from tests.isa.helpers import rand, run


@dataclass
class _Tiling(nl.NKIObject):
    rows = None            # unannotated: still a constructor field, as NKI's compiler makes it
    cols = None
    scale: float = 1.0     # annotated fields keep working alongside

    def tile_count(self):
        return self.cols // 32


class _Plain(nl.NKIObject):
    offset = 0.0


def test_dataclass_nkiobject_takes_its_unannotated_class_attributes_as_fields():
    t = _Tiling(rows=64, cols=96, scale=2.0)
    assert (t.rows, t.cols, t.scale, t.tile_count()) == (64, 96, 2.0, 3)
    assert _Tiling().rows is None and _Tiling(cols=32).cols == 32
    with pytest.raises(TypeError):
        _Tiling(tile_count=4)         # methods are not fields
    assert _Plain(offset=1.5).offset == 1.5 and _Plain().offset == 0.0


def _scaled_copy(x, dtype):
    cfg = _Tiling(rows=x.shape[0], cols=x.shape[1], scale=3.0)
    out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((cfg.rows, cfg.cols), dtype=x.dtype, buffer=nl.sbuf)
    y = nl.ndarray((cfg.rows, cfg.cols), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for i in range(cfg.tile_count()):
        cols = nl.ds(32 * i, 32)
        nisa.tensor_scalar(dst=y[:, cols], data=t[:, cols], op0=nl.multiply, operand0=cfg.scale)
    nisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_a_dtype_class_is_a_plain_kernel_argument(rng, dtype):
    x = rand(rng, 64, 96)
    out = run(_scaled_copy, x, dtype)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.astype(np.float32), (x * 3.0).astype(dtype).astype(np.float32), rtol=1e-6)

"""A Tensor Engine transpose result (a PSUM tile) fed straight into `nisa.nc_matmul`, as the official
flash-attention backward kernel does: the legacy compiler copies the result tile to SBUF (regression: this
raised "nc_matmul reads 'stationary' from SBUF")."""

import numpy as np
import pytest

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import MemoryKindError
from tests.language.helpers import run
from tests.raises import raises_at


def _grad_like(dy_t, p):
    """sum over K chunks of (transpose of a [M, 64] chunk of dy_t) used as the stationary operand."""
    out = nl.ndarray((dy_t.shape[0], p.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((dy_t.shape[0], p.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(2):
        chunk = nl.load(dy_t[:, i * 64:(i + 1) * 64])                # [M, 64]
        trans = nisa.nc_transpose(chunk)                             # [64, M] in PSUM
        acc += nisa.nc_matmul(trans, nl.load(p[i * 64:(i + 1) * 64, :]))
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_transpose_result_feeds_nc_matmul(rng, target, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    dy = rng.standard_normal((128, 96)).astype(np.float32)
    p = rng.standard_normal((128, 80)).astype(np.float32)
    out = run(_grad_like, np.ascontiguousarray(dy.T), p)
    np.testing.assert_allclose(out, dy.T @ p, rtol=1e-4, atol=1e-4)


def test_a_declared_psum_tensor_is_still_no_matmul_operand(rng):
    def kernel(x):
        declared = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        declared[...] = nisa.nc_transpose(nl.load(x))
        nisa.nc_matmul(declared, nl.load(x))
    with raises_at(MemoryKindError, match="from SBUF"):
        run(kernel, rng.standard_normal((64, 64)).astype(np.float32))

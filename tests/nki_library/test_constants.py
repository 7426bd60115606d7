"""New-generation constant tensors (spec/language.md §5.1): `nl.shared_identity_matrix` gives the identity
in SBUF (optionally into `dst=`), `nl.shared_constant` takes an array or a `.npy` path and gives shared HBM."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl


@nki.jit
def transpose_by_identity(x, into_dst):
    """out = x.T, computed as an identity matmul: stationary = x [K, M], moving = I [K, K] -> x.T I."""
    k, m = x.shape
    out = nl.ndarray((m, k), dtype=nl.float32, buffer=nl.shared_hbm)
    x_sb = nl.ndarray((k, m), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x_sb, src=x)
    if into_dst:
        ident = nl.ndarray((k, k), dtype=nl.float32, buffer=nl.sbuf)
        nl.shared_identity_matrix(k, dtype=nl.float32, dst=ident)
    else:
        ident = nl.shared_identity_matrix(k, dtype=nl.float32)
    acc = nl.ndarray((m, k), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=x_sb, moving=ident)
    res = nl.ndarray((m, k), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("into_dst", [False, True])
def test_shared_identity_matrix_is_an_sbuf_operand(rng, into_dst):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    np.testing.assert_allclose(transpose_by_identity(x, into_dst), x.T, rtol=1e-6, atol=1e-6)


def add_constant(constant):
    """A kernel out = x + constant, the constant (an array or .npy path, fixed when the kernel is built) being
    an nl.shared_constant in shared HBM."""
    @nki.jit
    def kernel(x):
        c_hbm = nl.shared_constant(constant)
        c = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c, src=c_hbm)
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_tensor(dst=t, data1=t, data2=c, op=nl.add)
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    return kernel


@pytest.mark.parametrize("as_path", [False, True])
def test_shared_constant_from_array_or_npy_file(rng, tmp_path, as_path):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    const = rng.standard_normal((16, 8)).astype(np.float32)
    path = tmp_path / "const.npy"
    np.save(path, const)
    np.testing.assert_allclose(add_constant(str(path) if as_path else const)(x), x + const, rtol=1e-6)

"""Direct-allocation callbacks called as the compiler calls them: by the documented parameter names
`idx, pdim_size, fdim_size`, so a `functools.partial` that binds a leading parameter by keyword works
(regression: positional calls raised "got multiple values for argument")."""

import functools

import numpy as np

import opennki.legacy as nki
import opennki.legacy.compiler as ncc
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.events import TensorAllocated
from opennki.legacy.language import par_dim
from opennki.listeners import Recorder


def _bank_of(banks, idx, pdim_size, fdim_size):
    return (banks[idx], 0, 0)


def _sbuf_spot(offsets, idx, pdim_size, fdim_size):
    return (0, offsets[idx[0]] * fdim_size)


def _two_products(a, b):
    out = nl.ndarray((2, 64, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    lhs = nl.ndarray((2, par_dim(128), 64), dtype=nl.float32,
                     buffer=ncc.sbuf.alloc(functools.partial(_sbuf_spot, offsets={0: 0, 1: 1})))
    rhs = nl.ndarray((2, par_dim(128), 96), dtype=nl.float32,
                     buffer=ncc.sbuf.alloc(functools.partial(_sbuf_spot, offsets={0: 2, 1: 4})))
    res = nl.ndarray((2, par_dim(64), 96), dtype=nl.float32,
                     buffer=ncc.sbuf.alloc(functools.partial(_sbuf_spot, offsets={0: 8, 1: 9})))
    acc = nl.ndarray((2, par_dim(64), 96), dtype=nl.float32,
                     buffer=ncc.psum.alloc(functools.partial(_bank_of, banks={(0,): 3, (1,): 6})))
    for i in nl.affine_range(2):
        lhs[i] = nl.load(a[i])
        rhs[i] = nl.load(b[i])
        acc[i] = nisa.nc_matmul(lhs[i], rhs[i])
        res[i] = nisa.tensor_copy(acc[i])
        nl.store(out[i], value=res[i])
    return out


def test_partial_bound_allocation_functions_are_called_by_parameter_name(rng):
    a = rng.standard_normal((2, 128, 64)).astype(np.float32)
    b = rng.standard_normal((2, 128, 96)).astype(np.float32)
    rec = Recorder()
    out = nki.jit(_two_products).launch((a, b), listeners=[rec])
    np.testing.assert_allclose(out, np.einsum("ikm,ikn->imn", a, b), rtol=1e-4, atol=1e-4)
    banks = {e.byte_start // 2048 for e in rec.of_type(TensorAllocated) if e.kind.name == "PSUM"}
    assert banks == {3, 6}

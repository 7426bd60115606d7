"""nisa.tensor_tensor_scan (spec/isa.md §6.9): a per-partition scan with an fp32 carried state."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf


def _scan_ref(a, b, init, op0, op1, reverse0, reverse1):
    a, b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    state = np.broadcast_to(np.float32(init), (a.shape[0],)).astype(np.float32)
    out = np.empty_like(a)
    for i in range(a.shape[1]):
        t = op0(state, a[:, i]) if reverse0 else op0(a[:, i], state)
        state = (op1(b[:, i], t) if reverse1 else op1(t, b[:, i])).astype(np.float32)
        out[:, i] = state
    return out


@pytest.mark.parametrize("op0,op1,reverse0,reverse1", [(np.multiply, np.add, False, False),
                                                       (np.add, np.maximum, False, False),
                                                       (np.subtract, np.multiply, True, False),
                                                       (np.maximum, np.subtract, False, True)])
def test_scan_matches_sequential_reference(rng, op0, op1, reverse0, reverse1):
    a, b = rand(rng, 128, 4, 16, low=-1, high=1), rand(rng, 128, 64, low=-1, high=1)
    init = rand(rng, 128, 1)

    def kernel(a, b, init):
        out = nl.ndarray((128, 4, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        y = nisa.tensor_tensor_scan(nl.load(a), nl.load(b), nl.load(init), op0, op1, reverse0, reverse1)
        nl.store(out, y)
        return out

    ref = _scan_ref(a, b, init[:, 0], op0, op1, reverse0, reverse1)
    np.testing.assert_allclose(run(kernel, a, b, init).reshape(128, -1), ref, rtol=1e-5, atol=1e-6)


def test_chained_tiles_give_a_cumulative_sum_with_mask(rng):
    """The sample idiom: data0 = ones, op0 = multiply, op1 = add, the last column seeds the next tile."""
    x = rand(rng, 100, 96)

    def kernel(x):
        out = nl.ndarray((100, 96), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        ones = nl.ones((128, 64), dtype=nl.float32)
        init = nl.zeros((128, 1), dtype=nl.float32)
        for j in nl.sequential_range(2):
            mask = (i_p < 100) & (j * 64 + i_f < 96)
            data = nl.load(x[i_p, j * 64 + i_f], mask=mask)
            result = nisa.tensor_tensor_scan(data0=ones, data1=data, initial=init, op0=np.multiply, op1=np.add,
                                             mask=mask)
            nl.store(out[i_p, j * 64 + i_f], result, mask=mask)
            init[:, :] = nl.copy(result[:, 63])
        return out

    np.testing.assert_allclose(run(kernel, x), np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)


def test_new_generation_scan_with_scalar_initial(rng):
    a, b = rand(rng, 32, 24, low=0, high=1), rand(rng, 32, 24)

    def kernel(a, b):
        x = to_sbuf(a, nl2.float32)
        y = nl2.ndarray(a.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=y, src=b)
        nisa2.tensor_tensor_scan(dst=y, data0=x, data1=y, initial=0.5, op0=nl2.multiply, op1=nl2.add)
        return to_hbm(y)

    np.testing.assert_allclose(run(kernel, a, b), _scan_ref(a, b, 0.5, np.multiply, np.add, False, False),
                               rtol=1e-5, atol=1e-6)


def _both_psum(x):
    p = nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum)
    q = nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.tensor_tensor_scan(p, q, 0.0, np.multiply, np.add)


def _bitvec(x):
    t = nl.zeros((128, 16), dtype=nl.int32)
    nisa.tensor_tensor_scan(t, t, 0, np.bitwise_and, np.add)


def _initial_shape(x):
    t = nl.load(x)
    nisa.tensor_tensor_scan(t, t, nl.zeros((128, 2), dtype=nl.float32), np.multiply, np.add)


def _sizes(x):
    nisa.tensor_tensor_scan(nl.load(x), nl.zeros((128, 8), dtype=nl.float32), 0.0, np.multiply, np.add)


REJECTS = [
    ("both_psum", _both_psum, MemoryKindError, "both be in PSUM"),
    ("bitvec_op", _bitvec, KernelError, "arithmetic operator"),
    ("initial_not_a_column", _initial_shape, ShapeError, r"\[P, 1\]"),
    ("free_size_mismatch", _sizes, ShapeError, "elements per partition"),
]


test_scan_rejects = rejecting(REJECTS, api="nisa.tensor_tensor_scan")

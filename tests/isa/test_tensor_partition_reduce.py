"""nisa.tensor_partition_reduce (spec/isa.md §6.8): reduce across partitions on GpSimd, SBUF only."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf


def _kernel(op):
    def kernel(x):
        r = nisa.tensor_partition_reduce(op, nl.load(x))
        out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out
    return kernel


@pytest.mark.parametrize("op,ref", [(np.add, lambda x: x.sum(0, keepdims=True)),
                                    (np.max, lambda x: x.max(0, keepdims=True)),
                                    ("average", lambda x: x.mean(0, keepdims=True))], ids=["add", "max", "average"])
def test_float_partition_reductions(rng, op, ref):
    x = rand(rng, 128, 32, 4)
    got = run(_kernel(op), x)
    assert got.shape == (1, 32, 4)
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("op", [np.bitwise_or, np.bitwise_and])
def test_bitwise_partition_reductions(rng, op):
    x = rng.integers(0, 2 ** 31 - 1, size=(16, 8), dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(run(_kernel(op), x), op.reduce(x, axis=0, keepdims=True))


def test_new_generation_partition_reduce(rng):
    x = rand(rng, 96, 20)

    def kernel(x):
        t = to_sbuf(x, nl2.float32)
        r = nl2.ndarray((1, 20), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_partition_reduce(dst=r, op=nl2.add, data=t)
        return to_hbm(r)

    np.testing.assert_allclose(run(kernel, x), x.sum(0, keepdims=True), rtol=1e-5, atol=1e-6)


def _psum(x):
    nisa.tensor_partition_reduce(np.add, nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum))


def _minimum(x):
    nisa.tensor_partition_reduce(np.minimum, nl.load(x))


def _bitwise_float(x):
    nisa.tensor_partition_reduce(np.bitwise_or, nl.load(x))


REJECTS = [
    ("psum_input", _psum, MemoryKindError, "SBUF only"),
    ("minimum_op", _minimum, KernelError, "op must be"),
    ("bitwise_on_floats", _bitwise_float, DtypeError, "integer data"),
]


test_partition_reduce_rejects = rejecting(REJECTS, api="nisa.tensor_partition_reduce")

"""nisa.tensor_tensor (spec/isa.md §6.4): element-wise ops of two tiles, fp32 arithmetic or raw-bit ops."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm


def _binary_kernel(op, **kw):
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=kw.get("dtype", a.dtype), buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_tensor(nl.load(a), nl.load(b), op, **kw))
        return out
    return kernel


ARITH = [
    (np.add, np.add), (np.subtract, np.subtract), (np.multiply, np.multiply), (np.maximum, np.maximum),
    (np.minimum, np.minimum), (nl.divide, np.divide),
    (np.equal, lambda a, b: (a == b).astype(np.float32)),
    (np.greater, lambda a, b: (a > b).astype(np.float32)),
    (np.less_equal, lambda a, b: (a <= b).astype(np.float32)),
    (np.logical_and, lambda a, b: ((a != 0) & (b != 0)).astype(np.float32)),
    (np.logical_xor, lambda a, b: ((a != 0) ^ (b != 0)).astype(np.float32)),
]


@pytest.mark.parametrize("op,ref", ARITH, ids=[a[0].__name__ for a in ARITH])
def test_arithmetic_ops_in_fp32(rng, op, ref):
    a, b = rand(rng, 128, 64), rand(rng, 128, 64)
    b[:, ::7] = a[:, ::7]                        # some equal elements for the comparisons
    got = run(_binary_kernel(op), a, b)
    np.testing.assert_allclose(got, ref(a, b), rtol=1e-6)


def test_power_runs_on_gpsimd_by_default(rng):
    a, b = rand(rng, 64, 32, low=0.5, high=2.0), rand(rng, 64, 32)
    np.testing.assert_allclose(run(_binary_kernel(np.power), a, b), a ** b, rtol=1e-6)


def test_mixed_dtypes_promote_and_round_once(rng):
    a = rand(rng, 128, 32).astype(ml_dtypes.bfloat16)
    b = rand(rng, 128, 32).astype(np.float16)

    def kernel(a, b):
        r = nisa.tensor_tensor(nl.load(a), nl.load(b), np.add)
        out = nl.ndarray(a.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out

    got = run(kernel, a, b)
    assert got.dtype == np.float32                    # (bf16, fp16) -> fp32
    np.testing.assert_array_equal(got, a.astype(np.float32) + b.astype(np.float32))
    got16 = run(_binary_kernel(np.multiply, dtype=nl.bfloat16), a, b)
    ref16 = (a.astype(np.float32) * b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got16.view(np.uint16), ref16.view(np.uint16))


BITVEC = [
    (np.bitwise_and, np.bitwise_and), (np.bitwise_or, np.bitwise_or), (np.bitwise_xor, np.bitwise_xor),
    (np.left_shift, lambda a, b: (a.astype(np.int64) << b).astype(np.int32)),
    (np.right_shift, lambda a, b: (a.view(np.uint32) >> b.astype(np.uint32)).view(np.int32)),
]


@pytest.mark.parametrize("op,ref", BITVEC, ids=[b[0].__name__ for b in BITVEC])
def test_bitvec_ops_on_raw_int32_bits(rng, op, ref):
    a = rng.integers(-2 ** 31, 2 ** 31 - 1, size=(32, 16), dtype=np.int64).astype(np.int32)
    b = rng.integers(0, 31, size=(32, 16)).astype(np.int32) if "shift" in op.__name__ else \
        rng.integers(-2 ** 31, 2 ** 31 - 1, size=(32, 16), dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(run(_binary_kernel(op, engine=nisa.vector_engine), a, b), ref(a, b))


def test_int32_add_native_on_gpsimd_through_fp32_on_vector():
    a = np.full((16, 4), 2 ** 31 - 1, np.int32)
    a[:, 1] = 2 ** 24 + 1
    b = np.ones((16, 4), np.int32)
    b[:, 1] = 0
    pool = run(_binary_kernel(np.add, engine=nisa.gpsimd_engine), a, b)
    np.testing.assert_array_equal(pool[:, 0], -2 ** 31)              # two's-complement wrap
    np.testing.assert_array_equal(pool[:, 1], 2 ** 24 + 1)            # exact
    dve = run(_binary_kernel(np.add, engine=nisa.vector_engine), a, b)
    np.testing.assert_array_equal(dve[:, 1], 2 ** 24)                 # fp32 rounds 2^24 + 1
    np.testing.assert_array_equal(dve[:, 0], 2 ** 31 - 1)             # saturates on write


def test_psum_and_sbuf_inputs_with_mask(rng):
    a, b = rand(rng, 128, 32), rand(rng, 128, 32)

    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.psum)
        p[...] = nl.load(a)
        buf = nl.zeros((128, 32), dtype=nl.float32)
        i_p, i_f = nl.mgrid[0:128, 0:32]
        buf[...] = nisa.tensor_tensor(p, nl.load(b), np.subtract, mask=(i_f < 20) & (i_p >= 8))
        nl.store(out, buf)
        return out

    got = run(kernel, a, b)
    ref = np.zeros_like(a)
    ref[8:, :20] = a[8:, :20] - b[8:, :20]
    np.testing.assert_array_equal(got, ref)


def test_new_generation_tensor_tensor(rng):
    a, b = rand(rng, 64, 3, 8), rand(rng, 64, 24)

    def kernel(a, b):
        x = nl2.ndarray((64, 3, 8), dtype=nl2.float32, buffer=nl2.sbuf)
        y = nl2.ndarray((64, 24), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=x, src=a)
        nisa2.dma_copy(dst=y, src=b)
        nisa2.tensor_tensor(dst=y, data1=x, data2=y, op=nl2.maximum)    # ranks differ, free sizes match
        return to_hbm(y)

    np.testing.assert_array_equal(run(kernel, a, b), np.maximum(a.reshape(64, 24), b))


def _both_psum(a):
    p = nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum)
    q = nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.tensor_tensor(p, q, np.add)


def _partitions(a):
    nisa.tensor_tensor(nl.load(a), nl.zeros((64, 16), dtype=nl.float32), np.add)


def _free_size(a):
    nisa.tensor_tensor(nl.load(a), nl.zeros((128, 8), dtype=nl.float32), np.add)


def _bitvec_float(a):
    nisa.tensor_tensor(nl.load(a), nl.load(a), np.bitwise_and)


def _unary(a):
    nisa.tensor_tensor(nl.load(a), nl.load(a), np.abs)


def _gpsimd_psum(a):
    nisa.tensor_tensor(nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum), nl.load(a), np.add,
                       engine=nisa.gpsimd_engine)


def _scalar_engine(a):
    nisa.tensor_tensor(nl.load(a), nl.load(a), np.add, engine=nisa.scalar_engine)


def _abs_max_v3(a):
    nisa.tensor_tensor(nl.load(a), nl.load(a), "abs_max")


def _hbm_operand(a):
    nisa.tensor_tensor(a, nl.load(a), np.add)


REJECTS = [
    ("both_inputs_psum", _both_psum, "trn3", MemoryKindError, "both be in PSUM"),
    ("partition_mismatch", _partitions, "trn3", ShapeError, "same number of partitions"),
    ("free_size_mismatch", _free_size, "trn3", ShapeError, "elements per partition"),
    ("bitvec_on_floats", _bitvec_float, "trn3", DtypeError, "integer operands"),
    ("unary_operator", _unary, "trn3", KernelError, "binary operator"),
    ("gpsimd_reads_psum", _gpsimd_psum, "trn3", MemoryKindError, "GpSimd cannot access PSUM"),
    ("scalar_engine", _scalar_engine, "trn3", KernelError, "cannot run on the scalar engine"),
    ("abs_max_before_v4", _abs_max_v3, "trn2", KernelError, "NeuronCore-v4"),
    ("hbm_operand", _hbm_operand, "trn3", MemoryKindError, "SBUF/PSUM"),
]


test_tensor_tensor_rejects = rejecting(REJECTS, api="nisa.tensor_tensor")


def test_abs_max_on_v4(rng):
    a, b = rand(rng, 32, 16), rand(rng, 32, 16)
    got = run(_binary_kernel("abs_max"), a, b)
    np.testing.assert_array_equal(got, np.where(np.abs(a) > np.abs(b), a, b))

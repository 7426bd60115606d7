"""nisa.tensor_scalar (spec/isa.md §6.5): one or two ALU stages against scalars or [P, 1] columns."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, HardwareUnsupportedError, KernelError, MemoryKindError, ShapeError
from opennki.sim.options import SimOptions
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf
from tests.raises import raises_at


def _kernel(op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, **kw):
    """operand0/operand1: a Python scalar, or 'col0' / 'col1' for the [P, 1] inputs c0 / c1."""
    def kernel(x, c0, c1):
        out = nl.ndarray(x.shape, dtype=kw.get("dtype", x.dtype), buffer=nl.shared_hbm)
        o0 = nl.load(c0) if operand0 == "col0" else operand0
        o1 = nl.load(c1) if operand1 == "col1" else operand1
        nl.store(out, nisa.tensor_scalar(nl.load(x), op0, o0, reverse0, op1, o1, reverse1, **kw))
        return out
    return kernel


def _ref_stage(op, x, v, reverse):
    return op(v, x) if reverse else op(x, v)


CASES = [
    # (op0, operand0, reverse0, op1, operand1, reverse1)
    (np.add, 1.5, False, None, None, False),
    (np.subtract, 1.5, True, None, None, False),
    (np.multiply, "col0", False, np.add, "col1", False),
    (np.subtract, "col0", False, np.divide, 3.0, True),
    (np.maximum, 0.25, False, np.multiply, "col1", True),
    (np.multiply, -2.0, False, np.minimum, 0.5, False),
]


@pytest.mark.parametrize("op0,o0,r0,op1,o1,r1", CASES)
def test_two_stage_arithmetic_matches_numpy(rng, op0, o0, r0, op1, o1, r1):
    x, c0, c1 = rand(rng, 128, 40), rand(rng, 128, 1, low=0.5), rand(rng, 128, 1, low=0.5)
    ref = _ref_stage(op0, x, c0 if o0 == "col0" else np.float32(o0), r0)
    if op1 is not None:
        ref = _ref_stage(op1, ref, c1 if o1 == "col1" else np.float32(o1), r1)
    got = run(_kernel(op0, o0, r0, op1, o1, r1), x, c0, c1)
    np.testing.assert_allclose(got, ref.astype(np.float32), rtol=1e-6)


def test_unary_op0_ignores_its_operand(rng):
    x, c = rand(rng, 64, 16, low=0.25), rand(rng, 64, 1)
    got = run(_kernel(nl.rsqrt, 0.0, engine=nisa.gpsimd_engine), x, c, c)
    np.testing.assert_allclose(got, 1 / np.sqrt(x), rtol=1e-6)
    got = run(_kernel(np.abs, 0.0, op1=np.multiply, operand1=3.0), x - 1, c, c)
    np.testing.assert_allclose(got, np.abs(x - 1) * 3, rtol=1e-6)


def test_bitvec_stages_on_raw_bits(rng):
    x = rng.integers(-2 ** 31, 2 ** 31 - 1, size=(32, 8), dtype=np.int64).astype(np.int32)
    c = np.zeros((32, 1), np.int32)
    got = run(_kernel(np.bitwise_and, 0x0FF0FF0F, op1=np.right_shift, operand1=4), x, c, c)
    np.testing.assert_array_equal(got, (x & 0x0FF0FF0F).view(np.uint32) >> 4)


def test_scalar_engine_multiply_add(rng):
    x, c0, c1 = rand(rng, 128, 16), rand(rng, 128, 1), rand(rng, 128, 1)
    got = run(_kernel(np.multiply, "col0", op1=np.add, operand1="col1", engine=nisa.scalar_engine), x, c0, c1,
              target="trn2")
    np.testing.assert_allclose(got, x * c0 + c1, rtol=1e-6)


def test_mask_and_integer_result(rng):
    x = rand(rng, 128, 16, low=-20, high=20)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        buf = nl.full((128, 16), -1, dtype=nl.int32)
        i_p = nl.arange(128)[:, None]
        buf[...] = nisa.tensor_scalar(nl.load(x), np.multiply, 2.0, dtype=nl.int32, mask=(i_p < 100))
        nl.store(out, buf)
        return out

    got = run(kernel, x)
    np.testing.assert_array_equal(got[:100], np.rint(x[:100] * 2).astype(np.int32))   # round to nearest even
    np.testing.assert_array_equal(got[100:], -1)


def test_new_generation_tensor_scalar(rng):
    x, c = rand(rng, 128, 32), rand(rng, 128, 1)

    def kernel(x, c):
        t = to_sbuf(x, nl2.float32)
        ct = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=ct, src=c)
        nisa2.tensor_scalar(dst=t, data=t, op0=nl2.subtract, operand0=ct, op1=nl2.multiply, operand1=0.5)
        return to_hbm(t)

    np.testing.assert_allclose(run(kernel, x, c), (x - c) * 0.5, rtol=1e-6)


def _mixed_categories(x):
    nisa.tensor_scalar(nl.load(x), np.add, 1.0, op1=np.bitwise_and, operand1=3)


def _operand_shape(x):
    nisa.tensor_scalar(nl.load(x), np.add, nl.zeros((128, 2), dtype=nl.float32))


def _bitvec_float(x):
    nisa.tensor_scalar(nl.load(x), np.bitwise_and, 3)


def _act_pair(x):
    nisa.tensor_scalar(nl.load(x), np.subtract, 1.0, engine=nisa.scalar_engine)


def _bitvec_on_act(x):
    nisa.tensor_scalar(nl.zeros((128, 16), dtype=nl.int32), np.bitwise_or, 1, engine=nisa.scalar_engine)


def _gpsimd_psum(x):
    nisa.tensor_scalar(nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum), np.add, 1.0,
                       engine=nisa.gpsimd_engine)


def _operand_string(x):
    nisa.tensor_scalar(nl.load(x), np.add, "1.0")


REJECTS = [
    ("op_categories_differ", _mixed_categories, KernelError, "arithmetic or both bit-vector"),
    ("operand_not_a_column", _operand_shape, ShapeError, r"scalar or a \[P, 1\] vector"),
    ("bitvec_on_floats", _bitvec_float, DtypeError, "integer data"),
    ("scalar_engine_pair", _act_pair, KernelError, "Scalar Engine runs tensor_scalar only"),
    ("bitvec_on_scalar_engine", _bitvec_on_act, KernelError, "Vector Engine only"),
    ("gpsimd_reads_psum", _gpsimd_psum, MemoryKindError, "GpSimd cannot access PSUM"),
    ("operand_is_a_string", _operand_string, DtypeError, "scalar"),
]


test_tensor_scalar_rejects = rejecting(REJECTS, target="trn2", api="nisa.tensor_scalar")


def test_gpsimd_non_rsqrt_rejected_only_in_hardware_strict_mode(rng):
    x = rand(rng, 16, 8)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_scalar(nl.load(x), np.add, 1.0, engine=nisa.gpsimd_engine))
        return out

    np.testing.assert_allclose(run(kernel, x), x + 1, rtol=1e-6)
    with raises_at(HardwareUnsupportedError, match="rsqrt"):
        run(kernel, x, options=SimOptions(hardware_strict=True))


def test_masked_off_elements_are_not_read_so_out_of_bounds_is_fine(rng):
    x = rand(rng, 100, 16)

    def kernel(x):
        out = nl.ndarray((100, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_p, i_f = nl.mgrid[0:128, 0:16]                        # 28 rows past the end of t, masked off
        nl.store(out[i_p, i_f], nisa.tensor_scalar(t[i_p, i_f], np.add, 1.0, mask=(i_p < 100)), mask=(i_p < 100))
        return out

    np.testing.assert_array_equal(run(kernel, x), x + 1)

"""NKI 0.7 (Neuron SDK 2.33): NkiScalar and scalar_load / scalar_store / scalar_alu, scalars as `.ap` offsets
and `fori_loop` bounds beside VirtualRegisters, and kernels that use all of Python while they are specialized."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import DtypeError, KernelError, UnsupportedError
from opennki.events import InstructionExecuted
from opennki.listeners import Recorder
from opennki.releases import ReleaseError
from tests.raises import raises_at

INT32_MAX = np.iinfo(np.int32).max


def load(src):
    """A scalar loaded from the 1x1 HBM tensor `src` (through SBUF)."""
    t = nl.ndarray((1, 1), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return nisa.scalar_load(t)


def stored(values, dtype=nl.int32):
    """A (1, len(values)) HBM output holding the given scalars."""
    row = nl.ndarray((1, len(values)), dtype=dtype, buffer=nl.sbuf)
    for k, v in enumerate(values):
        nisa.scalar_store(row[0:1, k:k + 1], v)
    out = nl.ndarray((1, len(values)), dtype=dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=row)
    return out


@nki.jit
def arithmetic(a, b):
    x, y = load(a), load(b)
    return stored([x * 4 + 1, x - y, -x, 3 - y, x * y, nisa.scalar_alu(x, y, nl.divide),
                   nisa.scalar_alu(x, y, nl.fmod), nisa.scalar_alu(x, y, nl.maximum), nisa.scalar_alu(x, 7, nl.minimum),
                   x < y, x >= y, x == y, (x != y) + 10])


def trunc_div(a, b):
    q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
    return q, a - q * b


@pytest.mark.parametrize("a,b", [(-17, 4), (17, -4), (5, 5), (123456, 789), (-3, -7)])
def test_scalar_arithmetic_is_traced_at_int32(a, b):
    got = arithmetic(np.array([[a]], np.int32), np.array([[b]], np.int32))
    q, r = trunc_div(a, b)
    want = [a * 4 + 1, a - b, -a, 3 - b, a * b, q, r, max(a, b), min(a, 7), a < b, a >= b, a == b, (a != b) + 10]
    np.testing.assert_array_equal(got[0], np.array(want, np.int64).astype(np.int32))


def test_int32_scalars_wrap_and_int64_ones_do_not(rng):
    @nki.jit
    def wide(a32, a64):
        x, y = load(a32), load(a64)
        return stored([x * x, x + INT32_MAX]), stored([y * y, y + INT32_MAX], nl.int64)
    got32, got64 = wide(np.array([[100000]], np.int32), np.array([[100000]], np.int64))
    np.testing.assert_array_equal(got32[0], [1410065408, 100000 + INT32_MAX - 2 ** 32])
    np.testing.assert_array_equal(got64[0], [10 ** 10, 100000 + INT32_MAX])


def test_every_scalar_operation_is_a_scalar_alu_instruction():
    rec = Recorder()
    arithmetic.launch((np.array([[9]], np.int32), np.array([[2]], np.int32)), listeners=[rec])
    ops = [e.opcode for e in rec.of_type(InstructionExecuted)]
    assert ops.count("scalar_load") == 2 and ops.count("scalar_store") == 13
    assert ops.count("scalar_alu") == 15       # x*4+1 and (x != y)+10 are two each


def test_two_python_ints_are_evaluated_at_compile_time():
    assert nisa.scalar_alu(-17, 4, nl.divide) == -4 and nisa.scalar_alu(-17, 4, nl.fmod) == -1
    assert nisa.scalar_alu(3, 4, nl.less) is True


@nki.jit
def gather_rows(table, index):
    """out = table[index[0, 0]]: the row is addressed by a scalar read from a tensor at run time."""
    rows, cols = table.shape
    i = load(index)
    row = nl.ndarray((1, cols), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=table.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0))
    twice = nl.ndarray((1, cols), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=twice, src=table.ap([[cols, 1], [1, cols]], scalar_offset=(i * 2 + 1) - i - 1, indirect_dim=0))
    nisa.tensor_tensor(dst=row, data1=row, data2=twice, op=nl.add)
    out = nl.ndarray((1, cols), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=row)
    return out


@pytest.mark.parametrize("i", [0, 5, 11])
def test_a_gather_driven_by_a_scalar_loaded_from_a_tensor(rng, i):
    table = rng.standard_normal((12, 16)).astype(np.float32)
    got = gather_rows(table, np.array([[i]], np.int32))
    np.testing.assert_allclose(got[0], 2 * table[i], rtol=1e-6)


@nki.jit
def prefix_rows(x, n):
    """out[r] = x[r] * 3 for r < 2n - 1 (a fori_loop bound computed from a loaded scalar), other rows 0;
    the loop variable is an NkiScalar addressing the row."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    nisa.dma_copy(dst=out, src=zero)
    count = load(n) * 2 - 1
    seen = []

    def body(r):
        seen.append(type(r).__name__)
        t = nl.ndarray((1, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[cols, 1], [1, cols]], scalar_offset=r, indirect_dim=0))
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=out.ap([[cols, 1], [1, cols]], scalar_offset=r, indirect_dim=0), src=t)

    nl.fori_loop(0, count, body)
    assert set(seen) <= {"NkiScalar"}
    return out


@pytest.mark.parametrize("n", [1, 3, 4])
def test_a_fori_loop_bounded_by_scalar_arithmetic(rng, n):
    x = rng.standard_normal((8, 4)).astype(np.float32)
    want = np.zeros_like(x)
    want[:2 * n - 1] = 3 * x[:2 * n - 1]
    np.testing.assert_allclose(prefix_rows(x, np.array([[n]], np.int32)), want, rtol=1e-6)


def test_a_scalar_bounded_loop_traces_once_shape_only(rng):
    program = prefix_rows.specialize(rng.standard_normal((8, 4)).astype(np.float32), np.array([[2]], np.int32))
    assert [i["opcode"] for i in program.instructions].count("tensor_scalar") == 1


@nki.jit
def registers_and_scalars(n):
    """Both run-time integer kinds together: a register bound gives a VirtualRegister loop variable, int
    bounds an NkiScalar; register_store and .ap take either."""
    out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, t)
    kinds = []
    acc = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0)

    def by_register(i):
        kinds.append(type(i).__name__)
        nisa.register_store(acc[0:1, 0:1], i)             # the last value of i

    def by_scalar(i):
        kinds.append(type(i).__name__)
        nisa.register_store(acc[0:1, 1:2], i)
    nl.fori_loop(0, reg, by_register)
    nl.fori_loop(0, nisa.scalar_load(t) + 2, by_scalar)
    nisa.scalar_store(acc[0:1, 2:3], nisa.scalar_load(t) * 10)
    nisa.dma_copy(dst=out, src=acc)
    assert kinds[0] == "VirtualRegister" and kinds[-1] == "NkiScalar"
    return out


def test_virtual_registers_and_scalars_both_work():
    np.testing.assert_array_equal(registers_and_scalars(np.array([[5]], np.int32))[0], [4, 6, 50, 0])


def test_under_0_6_a_fori_loop_variable_is_a_register():
    got = nki.jit(registers_and_scalars.func, api_version="0.6")
    with raises_at(ReleaseError, match=r"nisa.scalar_load does not exist in NKI 0\.6.*added in NKI 0\.7"):
        got(np.array([[5]], np.int32))


def scalar_kernel(body):
    """A kernel loading `a` (int32) and `b` (int64) and running body(x32, x64)."""
    def kernel(a, b):
        body(load(a), load(b))
        return stored([load(a)])
    return nki.jit(kernel)


BAD_USES = [
    (lambda x, y: x < 3 if x < 3 else x, KernelError, "cannot be a Python if / while condition"),
    (lambda x, y: x + y, DtypeError, "same width and signedness"),
    (lambda x, y: y < y, DtypeError, "int64 scalars support only add, subtract and multiply"),
    (lambda x, y: nisa.scalar_alu(y, y, nl.divide), DtypeError, "only add, subtract and multiply"),
    (lambda x, y: x // 2, UnsupportedError, "no // operator"),
    (lambda x, y: x % 2, UnsupportedError, "no % operator"),
    (lambda x, y: nl.fori_loop(0, y, lambda i: None), KernelError, "must be 32-bit"),
    (lambda x, y: nisa.scalar_store(nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf), 3), DtypeError,
     "stores an NkiScalar"),
    (lambda x, y: nisa.scalar_store(nl.ndarray((1, 1), dtype=nl.int64, buffer=nl.sbuf), x), DtypeError,
     "width of the scalar"),
    (lambda x, y: nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf).ap([[4, 1], [1, 4]], scalar_offset=y),
     DtypeError, "must be nl.int32"),
    (lambda x, y: nisa.scalar_load(nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)), DtypeError,
     "unsigned dtypes"),
    (lambda x, y: x + 2 ** 40, DtypeError, "must fit the scalar's int32"),
    (lambda x, y: [0, 1][x], KernelError, "not a Python int"),
]


@pytest.mark.parametrize("use,error,match", BAD_USES)
def test_misused_scalars_are_errors_at_the_kernel_line(use, error, match):
    k = scalar_kernel(use)
    with raises_at(error, match=match) as exc:
        k(np.array([[3]], np.int32), np.array([[2 ** 40]], np.int64))
    assert "body(load(a), load(b))" not in exc.value.location.source       # the lambda's own line
    assert exc.value.location.filename == __file__


def test_the_custom_frontend_rejects_scalars(monkeypatch):
    monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")
    with raises_at(KernelError, match="needs the tracer frontend"):
        arithmetic(np.array([[1]], np.int32), np.array([[2]], np.int32))


# ----------------------------------------------------------------- all of Python during specialization

class Stage:
    """A user class hierarchy used while the kernel is specialized (NKI 0.7 traces kernels as Python)."""

    def __init__(self, scale):
        self.scale = scale

    def apply(self, tile):
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.multiply, operand0=float(self.scale))

    def __eq__(self, other):
        return type(other) is type(self) and other.scale == self.scale

    def __hash__(self):
        return hash(self.scale)


class Shift(Stage):
    def apply(self, tile):
        nisa.tensor_scalar(dst=tile, data=tile, op0=nl.add, operand0=float(self.scale))


class ScaleThenShift(Shift):
    def apply(self, tile):
        Stage.apply(self, tile)
        super().apply(tile)


def column_blocks(cols, width):
    """A generator of column ranges."""
    for start in range(0, cols, width):
        yield start, min(start + width, cols)


@nki.jit
def pipeline(x, stages):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    unique = []
    for s in stages:                # == on user classes: duplicates (equal stages) run once
        if s not in unique:
            unique.append(s)
    for lo, hi in column_blocks(cols, 3):
        t = nl.ndarray((rows, hi - lo), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[:, lo:hi])
        for s in unique:
            s.apply(t)
        nisa.dma_copy(dst=out[:, lo:hi], src=t)
    return out


def test_a_0_7_kernel_uses_generators_classes_and_equality_while_specialized(rng):
    x = rng.standard_normal((8, 10)).astype(np.float32)
    stages = (Stage(2), Shift(1), Stage(2), ScaleThenShift(3), Shift(1))
    got = nki.jit(pipeline.func, api_version="0.7")(x, stages)
    want = ((x * 2 + 1) * 3) + 3
    np.testing.assert_allclose(got, want, rtol=1e-5)

"""Virtual registers and device loops (spec/isa.md §7.5, spec/language.md §5.6): `nisa.register_*` move 32-bit
values between tensors and sequencer registers, and `nl.dynamic_range`, `nl.fori_loop`, `nl.while_loop` and
`while reg:` run a loop whose trip count is read at run time."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import DtypeError, KernelError, OutOfBoundsError, ShapeError, UninitializedReadError
from opennki.events import InstructionExecuted
from opennki.kernel import run_kernel
from opennki.listeners import Recorder
from opennki.sim import ShapeSpec, SimOptions
from tests.raises import raises_at


@nki.jit
def negate_leading_blocks(x, n_blocks):
    """out = x with its first n_blocks blocks of 4 rows negated (n_blocks read at run time); the other
    rows are copied unchanged first."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    whole = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=whole, src=x)
    nisa.dma_copy(dst=out, src=whole)
    count = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=count, src=n_blocks)
    trips = nisa.register_alloc()
    nisa.register_load(trips, count)
    first_row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=first_row, value=0)
    for _ in nl.dynamic_range(0, trips, 1):
        block = nl.ndarray((4, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=block, src=x.ap(pattern=[[cols, 4], [1, cols]], offset=0, scalar_offset=first_row,
                                          indirect_dim=0))
        nisa.tensor_scalar(dst=block, data=block, op0=nl.multiply, operand0=-1.0)
        nisa.dma_copy(dst=out.ap(pattern=[[cols, 4], [1, cols]], offset=0, scalar_offset=first_row,
                                 indirect_dim=0), src=block)
        nisa.tensor_scalar(dst=first_row, data=first_row, op0=nl.add, operand0=4)
    return out


@pytest.mark.parametrize("n", [0, 1, 3])
def test_dynamic_range_runs_as_many_times_as_the_register_says(rng, n):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    want = x.copy()
    want[:4 * n] *= -1
    got = negate_leading_blocks(x, np.array([[n]], np.int32))
    np.testing.assert_array_equal(got, want)


@nki.jit
def induction_values(bounds, length: int, step: int):
    """out[i] = i for i in dynamic_range(bounds[0], bounds[1], step), other elements -1: the loop variable
    is a register, stored to SBUF and from there to the row it names."""
    out = nl.ndarray((1, length), dtype=nl.int32, buffer=nl.shared_hbm)
    fill = nl.ndarray((1, length), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=fill, value=-1)
    nisa.dma_copy(dst=out, src=fill)
    b = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=bounds)
    start = nisa.register_alloc(b[0:1, 0:1])
    stop = nisa.register_alloc()
    nisa.register_load(stop, b[0:1, 1:2])
    for i in nl.dynamic_range(start, stop, step):
        value = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(value, i)
        nisa.dma_copy(dst=out.ap(pattern=[[length, 1], [1, 1]], offset=0, scalar_offset=value, indirect_dim=1),
                      src=value)
    return out


@pytest.mark.parametrize("start, stop, step", [(2, 9, 1), (1, 10, 3), (5, 5, 1), (7, 3, 1)])
def test_the_loop_variable_is_a_register_holding_the_iteration(start, stop, step):
    want = np.full((1, 12), -1, np.int32)
    for i in range(start, stop, step):
        want[0, i] = i
    got = induction_values(np.array([[start, stop]], np.int32), 12, step)
    np.testing.assert_array_equal(got, want)


@nki.jit
def count_down(start, use_while_loop: bool):
    """out[0, 0] = how many iterations a register counting down from `start` to 0 takes, with a bare
    `while reg:` or nl.while_loop; out[0, 1] = the same count from nl.fori_loop(0, start)."""
    state = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=state, value=0)
    left = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=left, src=start)
    cond = nisa.register_alloc()
    nisa.register_load(cond, left)

    def step(reg):
        nisa.tensor_scalar(dst=state[0:1, 0:1], data=state[0:1, 0:1], op0=nl.add, operand0=1)
        nisa.tensor_scalar(dst=left, data=left, op0=nl.subtract, operand0=1)
        nisa.register_load(reg, left)
        return reg

    if use_while_loop:
        nl.while_loop(cond, step)
    else:
        while cond:
            step(cond)
    upper = nisa.register_alloc(0)
    nisa.register_load(upper, start)

    def tick(i):
        nisa.tensor_scalar(dst=state[0:1, 1:2], data=state[0:1, 1:2], op0=nl.add, operand0=1)

    nl.fori_loop(0, upper, tick)
    out = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=state)
    return out


@pytest.mark.parametrize("use_while_loop", [False, True])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_while_loops_check_the_register_before_each_iteration(n, use_while_loop):
    got = count_down(np.array([[n]], np.int32), use_while_loop)
    np.testing.assert_array_equal(got, [[n, n]])


@nki.jit
def moved(x):
    """out = [immediate 7 moved in, x moved from another register, x's fp32 value round-tripped]."""
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    a, b = nisa.register_alloc(), nisa.register_alloc(x)
    nisa.register_move(a, 7)
    c = nisa.register_alloc(-1)
    nisa.register_move(c, b)
    res = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(res[0:1, 0:1], a)
    nisa.register_store(res[0:1, 1:2], c)
    out = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_register_move_and_a_tensor_initialiser():
    np.testing.assert_array_equal(moved(np.array([[-123456]], np.int32)), [[7, -123456]])


@nki.jit
def write_induction(n: int):
    for i in nl.dynamic_range(n):
        nisa.register_move(i, 3)


@nki.jit
def unset_bound():
    reg = nisa.register_alloc()
    for _ in nl.dynamic_range(0, reg):
        pass


@nki.jit
def load_two(x):
    t = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    reg = nisa.register_alloc()
    nisa.register_load(reg, t)


@nki.jit
def too_wide(value: int):
    nisa.register_alloc(value)


@pytest.mark.parametrize("kernel, args, error, source, message", [
    (write_induction, (2,), KernelError, "nisa.register_move(i, 3)", "read-only"),
    (unset_bound, (), UninitializedReadError, "nl.dynamic_range(0, reg)", "never written"),
    (load_two, (np.zeros((1, 2), np.int32),), ShapeError, "nisa.register_load(reg, t)", "1-element"),
    (too_wide, (1 << 33,), KernelError, "nisa.register_alloc(value)", "32-bit"),
    (too_wide, (1.5,), DtypeError, "nisa.register_alloc(value)", "integer immediate"),
])
def test_register_errors_name_the_kernel_line(kernel, args, error, source, message):
    with raises_at(error, match=message) as exc:
        kernel(*args)
    assert source in exc.value.location.source


def test_shape_only_runs_trace_a_device_loop_body_once():
    """No register value is known without data: a loop bounded by a register traces its body once."""
    rec = Recorder()
    out = run_kernel(negate_leading_blocks.func, (ShapeSpec((16, 8), "float32"), ShapeSpec((1, 1), "int32")),
                     listeners=[rec], options=SimOptions(shape_only=True))
    assert out.shape == (16, 8)
    assert [e.opcode for e in rec.of_type(InstructionExecuted)].count("tensor_scalar") == 2


@nki.jit
def rows_from_loop_variable(x, n_rows):
    """out[r] = 2 * x[r] for the first n_rows rows (n_rows read at run time), addressed through the device
    loop's variable as a scalar_offset of both access patterns; other rows 0."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=out, src=zeros)
    count = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=count, src=n_rows)
    stop = nisa.register_alloc(count)
    for r in nl.dynamic_range(stop):
        row = nl.ndarray((1, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x.ap(pattern=[[cols, 1], [1, cols]], offset=0, scalar_offset=r, indirect_dim=0))
        nisa.tensor_scalar(dst=row, data=row, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out.ap(pattern=[[cols, 1], [1, cols]], offset=0, scalar_offset=r, indirect_dim=0), src=row)
    return out


@pytest.mark.parametrize("n", [0, 2, 6])
def test_a_register_is_a_scalar_offset(rng, n):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    want = np.zeros_like(x)
    want[:n] = 2 * x[:n]
    np.testing.assert_array_equal(rows_from_loop_variable(x, np.array([[n]], np.int32)), want)


def test_a_register_offset_is_bounds_checked():
    with raises_at(OutOfBoundsError) as exc:
        rows_from_loop_variable(np.zeros((6, 5), np.float32), np.array([[7]], np.int32))
    assert "scalar_offset=r" in exc.value.location.source

"""Deferred legacy results keep Python semantics: a retarget changes only the instructions the listeners see.

`nl.exp(x)` is deferred until its result is consumed; `buf[...] = r` / `acc += r` may retarget it to write
the destination (sim/program.py, `Program.retarget`). Every value a kernel can still read must be what plain
Python semantics give it: each form below is checked against NumPy, and the instruction stream the cost
model sees is checked for the three cases (a temporary, a local never read again, a result read again).
"""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.events import InstructionExecuted
from opennki.listeners import Recorder
from tests.running import run

P, F = 128, 64


def _run(kernel, *args, grid=()):
    """The outputs and the opcodes the kernel issued, in order."""
    rec = Recorder()
    out = run(kernel, *args, grid=grid, recorder=rec)
    return out, [e.opcode for e in rec.of_type(InstructionExecuted)]


def _hbm(shape=(P, F), dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


def _close(got, want, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    assert not np.isnan(got).any()


@pytest.fixture
def a(rng):
    return rng.standard_normal((P, F), dtype=np.float32)


# -- buf[...] = r ----------------------------------------------------------------------------------------

def assigned_into_two_buffers(a):
    b1 = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    b2 = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.exp(nl.load(a))
    b1[...] = e
    b2[...] = e
    o1, o2 = _hbm(), _hbm()
    nl.store(o1, b1)
    nl.store(o2, b2)
    return o1, o2


def test_result_assigned_twice_fills_both_buffers(a):
    (o1, o2), ops = _run(assigned_into_two_buffers, a)
    _close(o1, np.exp(a))
    _close(o2, np.exp(a))
    assert ops.count("activation") == 1 and ops.count("tensor_copy") == 2    # e is kept: copied twice


def temporary_result(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    b[...] = nl.exp(nl.load(a))
    o = _hbm()
    nl.store(o, b)
    return o


def test_temporary_result_is_written_straight_into_the_destination(a):
    o, ops = _run(temporary_result, a)
    _close(o, np.exp(a))
    assert ops == ["dma_copy", "activation", "dma_copy"]


def dead_local(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.exp(nl.load(a))
    b[...] = e
    o = _hbm()
    nl.store(o, b)
    return o


def test_local_never_read_again_is_retargeted(a):
    o, ops = _run(dead_local, a)
    _close(o, np.exp(a))
    assert ops == ["dma_copy", "activation", "dma_copy"]


def aliased_through_a_list(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    keep = []
    e = nl.exp(nl.load(a))
    keep.append(e)
    b[...] = e
    o1, o2 = _hbm(), _hbm()
    nl.store(o1, b)
    nl.store(o2, keep[0])          # `e` itself is dead, but the list still holds its tile
    return o1, o2


def test_alias_made_before_the_assignment_reads_the_result(a):
    (o1, o2), _ = _run(aliased_through_a_list, a)
    _close(o1, np.exp(a))
    _close(o2, np.exp(a))


def read_after_and_as_operand(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.exp(nl.load(a))
    b[...] = e
    f = nl.add(e, 1.0)             # the result used as an operand after the assignment
    o1, o2 = _hbm(), _hbm()
    nl.store(o1, b)
    nl.store(o2, f)
    return o1, o2


def test_result_read_after_the_assignment(a):
    (o1, o2), _ = _run(read_after_and_as_operand, a)
    _close(o1, np.exp(a))
    _close(o2, np.exp(a) + 1.0)


def rebound_then_assigned(a):
    b1 = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    b2 = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    x = nl.load(a)
    r = nl.exp(x)
    b1[...] = r
    r = nl.tanh(x)                 # the name is rebound: its first tile is dead
    b2[...] = r
    o1, o2 = _hbm(), _hbm()
    nl.store(o1, b1)
    nl.store(o2, b2)
    return o1, o2


def test_rebound_name_is_retargeted_each_time(a):
    (o1, o2), ops = _run(rebound_then_assigned, a)
    _close(o1, np.exp(a))
    _close(o2, np.tanh(a), rtol=1e-5)
    assert "tensor_copy" not in ops


def low_precision_result_kept(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.exp(nl.load(a), dtype=nl.bfloat16)
    b[...] = e
    o1, o2 = _hbm(), _hbm(dtype=nl.bfloat16)
    nl.store(o1, b)
    nl.store(o2, e)                # the bf16 tile holds bf16-rounded values
    return o1, o2


def test_live_low_precision_result_is_rounded_then_copied(a):
    (o1, o2), _ = _run(low_precision_result_kept, a)
    want = np.exp(a).astype(nl.bfloat16)
    np.testing.assert_array_equal(o2, want)
    np.testing.assert_array_equal(o1, want.astype(np.float32))   # b = e: Python semantics, bf16 values


# -- buf[i] = r, loops, helpers ----------------------------------------------------------------------------

def indexed_in_a_loop(a):
    n = a.shape[0] // P
    buf = nl.ndarray((n, nl.par_dim(P), F), dtype=nl.float32, buffer=nl.sbuf)
    last = _hbm()
    o = _hbm(a.shape)
    for i in nl.sequential_range(n):
        t = nl.exp(nl.load(a[i * P:(i + 1) * P, :]))
        buf[i] = t
        nl.store(o[i * P:(i + 1) * P, :], value=buf[i])
        nl.store(last, value=t)    # read again after the assignment
    return o, last


def test_indexed_assignment_inside_a_loop(rng):
    a = rng.standard_normal((3 * P, F), dtype=np.float32)
    (o, last), _ = _run(indexed_in_a_loop, a)
    _close(o, np.exp(a))
    _close(last, np.exp(a[2 * P:]))


def helper_returns(t):
    return nl.exp(t)


def helper_assigns_and_returns(b, t):
    e = nl.exp(t)
    b[...] = e
    return e


def through_helpers(a):
    b1 = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    b2 = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    x = nl.load(a)
    b1[...] = helper_returns(x)
    e = helper_assigns_and_returns(b2, x)
    o1, o2, o3 = _hbm(), _hbm(), _hbm()
    nl.store(o1, b1)
    nl.store(o2, b2)
    nl.store(o3, e)                # returned after the helper assigned it
    return o1, o2, o3


def test_results_through_helper_functions(a):
    (o1, o2, o3), ops = _run(through_helpers, a)
    for o in (o1, o2, o3):
        _close(o, np.exp(a))
    assert ops.count("activation") == 2 and ops.count("tensor_copy") == 1


def carried_across_iterations(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    o = _hbm()
    x = nl.load(a)
    prev = nl.zeros((P, F), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.sequential_range(3):
        e = nl.add(prev, x)
        b[...] = e
        prev[...] = e              # read again, and on the next iteration through prev
    nl.store(o, value=nl.add(b, prev))
    return o


def test_result_assigned_twice_in_a_sequential_loop(a):
    o, _ = _run(carried_across_iterations, a)
    _close(o, 6 * a, rtol=1e-5)


# -- acc += r --------------------------------------------------------------------------------------------

def matmul_accumulated_then_read(x, y):
    acc = nl.zeros((F, P), dtype=nl.float32, buffer=nl.psum)
    m = nl.matmul(nl.load(x), nl.load(y), transpose_x=True)
    acc += m
    o1, o2 = _hbm((F, P)), _hbm((F, P))
    nl.store(o1, value=nl.copy(acc))
    nl.store(o2, value=nl.copy(m))
    return o1, o2


def test_matmul_accumulated_and_read_again(rng):
    x = rng.standard_normal((P, F), dtype=np.float32)
    y = rng.standard_normal((P, P), dtype=np.float32)
    (o1, o2), ops = _run(matmul_accumulated_then_read, x, y)
    ref = x.astype(np.float64).T @ y
    _close(o1, ref, rtol=1e-4, atol=1e-4)
    _close(o2, ref, rtol=1e-4, atol=1e-4)
    assert ops.count("nc_matmul") == 2       # computed where it is, accumulated by a second matmul


def matmul_accumulated_dead(x, y):
    acc = nl.zeros((F, P), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        m = nl.matmul(nl.load(x[k * P:(k + 1) * P, :]), nl.load(y[k * P:(k + 1) * P, :]), transpose_x=True)
        acc += m
    o = _hbm((F, P))
    nl.store(o, value=nl.copy(acc))
    return o


def test_matmul_local_never_read_again_accumulates_in_place(rng):
    x = rng.standard_normal((2 * P, F), dtype=np.float32)
    y = rng.standard_normal((2 * P, P), dtype=np.float32)
    o, ops = _run(matmul_accumulated_dead, x, y)
    _close(o, x.astype(np.float64).T @ y, rtol=1e-4, atol=1e-4)
    assert ops.count("nc_matmul") == 2 and "tensor_tensor" not in ops


def sbuf_accumulated_then_read(a):
    acc = nl.zeros((P, F), dtype=nl.float32, buffer=nl.sbuf)
    x = nl.load(a)
    e = nl.exp(x)
    acc += e
    acc += e
    o1, o2 = _hbm(), _hbm()
    nl.store(o1, acc)
    nl.store(o2, e)
    return o1, o2


def test_sbuf_accumulation_of_a_result_read_again(a):
    (o1, o2), _ = _run(sbuf_accumulated_then_read, a)
    _close(o1, 2 * np.exp(a), rtol=1e-6)
    _close(o2, np.exp(a))


# -- nisa results, random numbers, SPMD ------------------------------------------------------------------

def activation_result_read_after(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    t = nisa.activation(op=nl.exp, data=nl.load(a), scale=2.0)
    b[...] = t
    o1, o2 = _hbm(), _hbm()
    nl.store(o1, b)
    nl.store(o2, t)
    return o1, o2


def test_isa_activation_result_read_after_assignment(a):
    (o1, o2), _ = _run(activation_result_read_after, a)
    _close(o1, np.exp(2 * a), rtol=1e-5)
    _close(o2, np.exp(2 * a), rtol=1e-5)


def dropout_aliased(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    keep = []
    x = nl.load(a)
    d = nl.dropout(x, 0.5)
    keep.append(d)
    b[...] = d                     # retargeted: the list's tile is computed without a second draw
    after = nl.dropout(x, 0.5)
    o1, o2, o3 = _hbm(), _hbm(), _hbm()
    nl.store(o1, b)
    nl.store(o2, keep[0])
    nl.store(o3, after)
    return o1, o2, o3


def dropout_plain(a):
    b = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    x = nl.load(a)
    d = nl.dropout(x, 0.5)
    b[...] = nl.copy(d)
    after = nl.dropout(x, 0.5)
    o1, o3 = _hbm(), _hbm()
    nl.store(o1, b)
    nl.store(o3, after)
    return o1, o3


def test_random_results_are_drawn_once(a):
    (o1, o2, o3), _ = _run(dropout_aliased, a)
    (p1, p3), _ = _run(dropout_plain, a)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(o1, p1)      # the same stream as the plain path
    np.testing.assert_array_equal(o3, p3)
    kept = o1 != 0
    assert 0.3 < kept.mean() < 0.7
    np.testing.assert_array_equal(o1[kept], a[kept])


def spmd_assigned_twice(a):
    i = nl.program_id(0)
    b1 = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    b2 = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    e = nl.exp(nl.load(a[i * P:(i + 1) * P, :]))
    b1[...] = e
    b2[...] = nl.add(e, 1.0)
    b1[...] = nl.add(b1, b2)
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(o[i * P:(i + 1) * P, :], b1)
    return o


def test_spmd_programs_keep_their_results(rng):
    a = rng.standard_normal((2 * P, F), dtype=np.float32)
    o, _ = _run(spmd_assigned_twice, a, grid=(2,))
    _close(o, 2 * np.exp(a) + 1.0, rtol=1e-6)


def test_jit_front_door_keeps_results(a):
    o1, o2 = nki.jit(assigned_into_two_buffers)(a)
    _close(o1, np.exp(a))
    _close(o2, np.exp(a))


# -- masked results ------------------------------------------------------------------------------------

def masked_dead_local(a):
    res = nl.zeros((P, F), dtype=nl.float32, buffer=nl.sbuf)
    i_f = nl.arange(F)[None, :]
    e = nl.exp(nl.load(a), mask=(i_f < F // 2))
    res[...] = e
    o = _hbm()
    nl.store(o, res)
    return o


def masked_live_local(a):
    res = nl.zeros((P, F), dtype=nl.float32, buffer=nl.sbuf)
    i_p, i_f = nl.arange(P)[:, None], nl.arange(F)[None, :]
    e = nl.exp(nl.load(a), mask=(i_f < F // 2))
    res[...] = e
    o1, o2 = _hbm(), _hbm()
    nl.store(o1, res)
    nl.store(o2, e[i_p, i_f], mask=(i_f < F // 2))
    return o1, o2


def test_masked_result_in_a_local_gives_the_same_values_whether_read_again_or_not(a):
    dead, dead_ops = _run(masked_dead_local, a)
    (live, again), _ = _run(masked_live_local, a)
    np.testing.assert_array_equal(dead, live)    # liveness decides cost, never values
    _close(dead[:, :F // 2], np.exp(a[:, :F // 2]))
    _close(again[:, :F // 2], np.exp(a[:, :F // 2]))
    assert "tensor_copy" in dead_ops             # e = ...(mask=); res[...] = e copies the whole result tile


def masked_temporary(a):
    res = nl.zeros((P, F), dtype=nl.float32, buffer=nl.sbuf)
    i_f = nl.arange(F)[None, :]
    res[...] = nl.exp(nl.load(a), mask=(i_f < F // 2))
    o = _hbm()
    nl.store(o, res)
    return o


def test_masked_temporary_leaves_the_destination_masked_off_elements(a):
    o, ops = _run(masked_temporary, a)
    _close(o[:, :F // 2], np.exp(a[:, :F // 2]))
    np.testing.assert_array_equal(o[:, F // 2:], 0)   # the zeros res held: the instruction wrote res directly
    assert "tensor_copy" not in ops


# -- an index computed after the value ------------------------------------------------------------------------

def exp_into_columns_indexed_by_calls(a):
    """`buf[ip, c * 8 + nl.arange(8)[None, :]] = nl.exp(...)`: the destination's index is computed after the
    value (Python evaluates the right-hand side first), calling nl.arange; the value is still a temporary."""
    out = _hbm((P, 4 * 8))
    buf = nl.ndarray((P, 4 * 8), dtype=nl.float32, buffer=nl.sbuf)
    ip = nl.arange(P)[:, None]
    for c in nl.affine_range(4):
        buf[ip, c * 8 + nl.arange(8)[None, :]] = nl.exp(nl.load(a[:, c * 8:(c + 1) * 8]), mask=(ip < 100))
    nl.store(out[0:100, :], buf[0:100, :])
    return out


def test_an_index_computed_by_calls_after_the_value_still_retargets(a):
    from opennki.checks import checking
    with checking() as found:
        out, ops = _run(exp_into_columns_indexed_by_calls, a)
    _close(out[:100], np.exp(a[:100, :32]))
    # the masked exp writes the buffer itself: no copy reading the rows the mask skipped
    assert ops.count("activation") == 4 and "tensor_copy" not in ops
    assert found == []


def test_a_deferral_at_a_known_call_site_is_the_record_its_dataclass_makes(rng):
    """`Program.defer` sets a known call site's `Deferred` slot by slot (cheaper than calling the class): every
    field is set, to what the class's own __init__ sets from the same values, for a local read again."""
    import dataclasses

    from opennki.sim.program import Deferred, active

    seen = []

    @nki.jit
    def kernel(a):
        out = _hbm()
        acc = nl.load(a)
        for _ in nl.sequential_range(3):
            acc[...] = nl.add(acc, 1.0)
            t = nl.multiply(acc, 2.0)
            seen.append(active().pending)
            acc[...] = nl.add(t, acc)
        nl.store(out, value=acc)
        return out

    a = rng.standard_normal((P, F), dtype=np.float32)
    want = a
    for _ in range(3):
        want = want + np.float32(1)
        want = want * np.float32(2) + want
    np.testing.assert_array_equal(kernel(a), want)
    assert len(seen) == 3 and all(d.use == "local" and d.name == "t" for d in seen)
    names = [f.name for f in dataclasses.fields(Deferred)]
    for d in seen:
        made = Deferred(**{name: getattr(d, name) for name in names})
        assert all(getattr(made, name) is getattr(d, name) for name in names)

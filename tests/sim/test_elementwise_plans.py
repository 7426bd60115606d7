"""The legacy `nisa` element-wise front doors (`tensor_scalar`, `tensor_tensor`, `scalar_tensor_tensor`,
`tensor_scalar_reduce`, `reciprocal`, `tensor_copy`, `activation`, `activation_reduce`) take what they decide
of their arguments from one memo per key (`legacy.isa.ELEMENTWISE_PLANS`: the class, dtype, operand view
signatures and the other arguments by type and value) and defer planned instructions (`core.defer_planned`).
With the switch off (the plain path) every output or error (class, text, kernel line) and every event, field
by field, is the same, on random data, immediates equal but not identical to the key's (`-0.0` and `0.0`),
column and tile operands, two-stage ops, reductions, result dtypes, masks and strict rules (plain either way)."""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from tests.sim.outcomes import assert_same_outcome, fast_and_plain


@nki.jit
def elementwise(x, col):
    out = nl.ndarray((4, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    c = nl.load(col)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
    sums = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(6):
        zero = 0.0 if i % 2 else -0.0                       # equal immediates, not the same value
        acc[...] = nisa.tensor_scalar(acc, np.add, zero)
        acc[...] = nisa.tensor_scalar(t, np.multiply, 0.5 + i, op1=np.add, operand1=zero, reverse1=i % 3 == 0)
        u = nisa.tensor_scalar(acc, nl.subtract, c, reverse0=True, dtype=nl.bfloat16)   # a [P, 1] column
        w = nisa.tensor_tensor(acc, u, np.maximum, engine=nisa.vector_engine)
        acc[...] = nisa.tensor_tensor(w, t, nl.add)
        e = nisa.activation(np.exp, acc[:, 0:32], scale=-1.0 / (i + 1), bias=c)
        acc[:, 0:32] = nisa.activation(nl.tanh, e, scale=c, reduce_op=np.add, reduce_res=sums)
        acc[...] = nisa.tensor_scalar(acc, np.add, sums)                # a [P, 1] operand another wrote
        acc[...] = nisa.scalar_tensor_tensor(data=acc, op0=np.multiply, operand0=0.25 + zero, op1=np.add,
                                             operand1=t, reverse1=i % 2 == 1)
        acc[:, 32:64] = nisa.reciprocal(nisa.tensor_copy(acc[:, 0:32], engine=nisa.scalar_engine))
        acc[...] = nisa.tensor_scalar_reduce(data=acc, op0=np.add, operand0=zero, reduce_op=np.add,
                                             reduce_res=sums)
        acc[...] = nisa.activation_reduce(np.tanh, acc, reduce_op=np.add, reduce_res=sums, scale=0.5 + zero)
        m = nisa.tensor_tensor(acc, t, np.multiply, mask=nl.arange(128)[:, None] < 64 + i)   # masked: plain
        nl.store(out[i % 4], value=m)
    return out


@nki.jit
def operand_out_of_bounds(x, col):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    acc = nl.zeros((128, 96), nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(3):        # the third of the same signature reads past the end
        acc[:, 0:32] = nisa.tensor_scalar(acc[:, i * 40:i * 40 + 32], np.add, 1.0)
    nl.store(out, value=nisa.tensor_tensor(t, acc[:, 0:64], np.add))
    return out


@nki.jit
def bad_operator(x, col):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    for i in nl.sequential_range(2):
        t[...] = nisa.tensor_scalar(t, np.add, 2.0)
    t[...] = nisa.tensor_tensor(t, t, np.exp)           # a unary operator: the instruction's check rejects it
    nl.store(out, value=t)
    return out


@nki.jit
def shapes_differ(x, col):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    for i in nl.sequential_range(2):
        t[...] = nisa.activation(np.exp, t, scale=0.5)
    t[...] = nisa.activation(np.exp, t, bias=t[:, 0:2])   # a bias that is no [P, 1] column
    nl.store(out, value=t)
    return out


def _inputs(rng):
    return (rng.standard_normal((128, 64), dtype=np.float32) * 0.1,
            rng.standard_normal((128, 1), dtype=np.float32) * 0.1)


@pytest.mark.parametrize("kernel", [elementwise, operand_out_of_bounds, bad_operator, shapes_differ])
@pytest.mark.parametrize("strict", [False, True])
def test_elementwise_plans_give_the_plain_path_values_errors_and_events(rng, kernel, strict):
    import opennki.legacy.isa as isa_module

    from opennki.sim import SimOptions

    args = _inputs(rng)
    planned = []                        # before each run, the classes the last one planned

    def forget():
        planned.append({key[0].__name__ for key in isa_module._ELEMENTWISE_PLANS})
        isa_module._ELEMENTWISE_PLANS.clear()

    outcomes, events = fast_and_plain(kernel.func, args, isa_module, "ELEMENTWISE_PLANS", setup=forget,
                                      options=SimOptions(hardware_strict=strict))  # strict rules: plain either way
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]
    assert bool(planned[1]) is (not strict)     # the fast run planned (and the plain one did not)
    if kernel is elementwise and not strict:
        assert planned[1] == {"TensorScalar", "TensorTensor", "ScalarTensorTensor", "TensorScalarReduce", "Reciprocal",
                              "TensorCopy", "Activation", "ActivationReduce"}
        assert not isinstance(outcomes[0], Exception)
        written = outcomes[0][:, :64]           # the rows the masked multiply writes
        assert np.isfinite(written).all() and np.abs(written).max() > 0
    elif kernel is not elementwise:
        assert isinstance(outcomes[0], Exception)
        assert f"{kernel.func.__name__} (" in str(outcomes[0])          # the kernel line

"""An instruction's check runs once per signature (Instruction.signature): identical instructions are
checked once, and anything the check reads tells signatures apart, so a rejected instruction is still
rejected after accepted ones of other signatures."""

import numpy as np
import pytest

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import MemoryKindError
from opennki.instructions.vector import TensorScalar, TensorTensor
from opennki.instructions.dma import DmaCopy
from opennki.machine.dtypes import bfloat16, float32, int32
from opennki.machine.memory import MemoryRegion
from tests.isa.helpers import rand, rejects, run
from tests.sim.test_fast_paths import _root


def chain(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.load(a)
    for _ in nl.sequential_range(20):
        acc[...] = nl.add(acc, 1.5)
    nl.store(out, value=acc)
    return out


def _chain_reference(a):
    acc = a.copy()
    for _ in range(20):
        acc = acc + np.float32(1.5)
    return acc


def test_a_chain_of_identical_instructions_is_checked_once_per_signature(rng, monkeypatch):
    calls = []
    plain_check = TensorScalar.check

    def counting_check(self, ctx):
        calls.append(self)
        plain_check(self, ctx)

    monkeypatch.setattr(TensorScalar, "check", counting_check)
    a = rand(rng, 128, 64)
    np.testing.assert_array_equal(run(chain, a), _chain_reference(a))
    # 20 adds, each seen as a deferred result, as retargeted into acc and as issued: one signature
    assert len(calls) == 1


def accepted_then_rejected(a):
    x = nl.load(a)
    y = nl.load(a)
    for _ in nl.sequential_range(3):
        x[...] = nisa.tensor_tensor(x, y, op=nl.add)
    p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
    q = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
    p[...] = nisa.tensor_copy(x)
    q[...] = nisa.tensor_copy(y)
    z = nisa.tensor_tensor(p, q, op=nl.add)          # same shapes and dtypes, but both inputs in PSUM
    return z


def test_a_signature_that_fails_still_fails_after_others_passed(rng):
    err = rejects(accepted_then_rejected, rand(rng, 64, 32), error=MemoryKindError, match="both be in PSUM",
                  api="nisa.tensor_tensor")
    assert "z = nisa.tensor_tensor(p, q" in err.location.source


def _tt(dst, a, b, op="add", mask=None):
    return TensorTensor(dst=dst, data1=a, data2=b, op=op, mask=mask)


def test_signatures_tell_apart_what_checks_read():
    sb = lambda shape=(32, 8), dtype=float32: _root(MemoryRegion.sbuf, shape, dtype)    # noqa: E731
    base = _tt(sb(), sb(), sb()).signature()
    assert base is not None
    assert _tt(sb(), sb(), sb()).signature() == base                # other tensors, same signature
    assert _tt(sb(), sb(), sb(), op=np.add).signature() != base     # op spelt differently: checked again
    different = [
        _tt(sb(), sb(), sb(dtype=bfloat16)),                        # dtype
        _tt(sb(), sb(), _root(MemoryRegion.psum, (32, 8))),          # memory
        _tt(sb(), sb(), sb((32, 2, 4))),                            # shape (same element count)
        _tt(sb(), sb(), sb((32, 16)).subscript((slice(None), slice(0, 8)))),   # storage shape
        _tt(sb(), sb(), sb(), op="subtract"),                       # plain field
        _tt(sb(), sb(), sb(), mask=object()),                       # a mask
    ]
    keys = {t.signature() for t in different}
    assert base not in keys and len(keys) == len(different)
    scalar = dict(dst=sb(), data=sb(), op0="add")
    assert (TensorScalar(**scalar, operand0=1).signature() != TensorScalar(**scalar, operand0=True).signature()
            != TensorScalar(**scalar, operand0=1.0).signature())


def test_run_time_indices_and_unknown_fields_are_checked_every_time():
    sb = _root(MemoryRegion.sbuf, (32, 8))
    idx = _root(MemoryRegion.sbuf, (32, 1), int32)
    indirect = _root(MemoryRegion.shared_hbm, (64, 8)).subscript(idx)
    assert indirect.dynamic
    assert DmaCopy(dst=sb, src=indirect).signature() is None
    assert TensorScalar(dst=sb, data=sb, op0="add", operand0=1.0, engine=object()).signature() is None


@pytest.mark.parametrize("shape", [(128, 64), (16, 3, 5)])
def test_cached_and_plain_checks_give_the_same_results(rng, shape, monkeypatch):
    a = rand(rng, *shape)
    cached = run(chain, a)
    np.testing.assert_array_equal(cached, _chain_reference(a))
    monkeypatch.setattr(TensorScalar, "signature", lambda self: None)
    np.testing.assert_array_equal(run(chain, a), cached)


def test_operators_are_keyed_by_name_and_registers_are_not_keyed():
    from opennki.instructions.registers import VirtualRegister
    import opennki.language as nl2
    sb = _root(MemoryRegion.sbuf, (32, 8))
    by_token = _tt(sb, sb, sb, op=nl2.add).signature()
    assert by_token is not None and by_token == _tt(sb, sb, sb, op=nl.add).signature()
    assert by_token != _tt(sb, sb, sb, op=nl2.subtract).signature()

    class Holder:        # a program state for a register
        registers = {}
    register = VirtualRegister(Holder())
    assert TensorScalar(dst=sb, data=sb, op0="add", operand0=register).signature() is None


def test_view_signatures_are_numbers_never_given_to_other_contents(monkeypatch):
    """`view_signature` numbers a view's signature contents: equal contents, the same number while the table
    holds it; after the table is emptied (when full), new numbers, never an old one for other contents."""
    from opennki.instructions import base
    from opennki.machine import tensor
    monkeypatch.setattr(base, "_SIG_NUMBERS", {})
    for memo in ("_ROOTS", "_CHILDREN"):        # the views' layouts keep the numbers of the table's contents
        monkeypatch.setattr(tensor, memo, {})
    monkeypatch.setattr(base, "_SIG_NUMBERS_LIMIT", 3)
    views = [_root(MemoryRegion.sbuf, (32, 8 + k), float32) for k in range(3)]
    numbers = [base.view_signature(v) for v in views]
    assert len(set(numbers)) == 3 and all(numbers)
    assert base.view_signature(_root(MemoryRegion.sbuf, (32, 8), float32)) == numbers[0]    # while held
    again = [base.view_signature(_root(MemoryRegion.sbuf, (32, 8 + k), float32)) for k in (5, 0)]
    assert len(base._SIG_NUMBERS) == 2                         # emptied when full, then refilled
    assert not set(again) & set(numbers)                       # new numbers, the old contents' included
    assert base.view_signature(views[1]) == numbers[1]         # a view keeps its number

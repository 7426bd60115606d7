"""Instructions take the lean issue path (`program.LEAN_ISSUE`, `Program.lean`), with listeners too: checks
skipped by signature (`Simulator.clean`), the front doors' decisions memoised (`core._PLANS`), deferred
temporaries retargeted without the general machinery. Kernels give the values and the errors (class, text,
kernel line) of the plain path, where every instruction is checked and issued in full."""


import numpy as np
import pytest

import opennki as nki2
import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
import opennki.legacy.typing as nt
from examples.tiled_matmul import tiled_matmul
from opennki._src import core
from opennki.errors import MemoryKindError, OpenNKIError
from opennki.instructions.base import REGISTRY
from opennki.instructions.scalar import Activation, ActivationReduce
from opennki.instructions.tensor_engine import NcMatmul
from opennki.instructions.vector import Memset, TensorCopy, TensorReduce, TensorScalar, TensorTensor
from opennki.instructions.vector_move import TensorCopyDynamicDst, TensorCopyDynamicSrc
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder
from opennki.sim import program
from tests.isa.helpers import rand
from tests.sim.outcomes import assert_same_outcome, fast_and_plain


def _twice(kernel, *args):
    """`kernel(*args)` on the lean path and on the plain path: (lean, plain), each the outputs or the error."""
    out = []
    for lean in (True, False):
        program.LEAN_ISSUE = lean
        try:
            out.append(kernel(*args))
        except OpenNKIError as e:
            out.append(e)
        finally:
            program.LEAN_ISSUE = True
    return out


def _helper_exp(t):
    return nl.exp(t)


@nki.jit
def legacy_elementwise(a, c, m):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    low_out = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    bits_out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    x = nl.load(a)
    col = nl.load(c)
    bits = nl.load(m)
    acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    acc[...] = nl.multiply(x, 0.5)
    low = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    for i in nl.sequential_range(5):
        acc[...] = nl.add(acc, 1.0)
        acc[...] = nl.subtract(0.25, acc)                  # a scalar on the left
        acc[...] = nl.add(acc, x)                          # two tiles
        acc[...] = nl.maximum(acc, col)                    # a [P, 1] column
        acc[...] = nl.multiply(col, acc)                   # a column on the left
        acc[...] = _helper_exp(nl.multiply(acc, 0.1))      # an activation, through a helper
        acc[...] = nl.tanh(acc)
        low[...] = nl.multiply(acc, 1.25 + i, dtype=nl.bfloat16)   # another scalar value each time
        acc[...] = nl.add(acc, low)                        # bf16 with fp32
        acc += x                                           # in place
        acc *= 0.75
        acc[...] = acc - x                                 # a tile operator
        acc[:, 0:32] = nl.add(acc[:, 32:64], 1.0)          # views of part of a tile
        bits[...] = nl.bitwise_and(bits, 1023)
        bits[...] = nl.left_shift(bits, 1)
        acc[...] = nisa.tensor_scalar(acc, np.multiply, 0.5, op1=np.add, operand1=0.125)
    flag = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    flag[...] = nl.greater(acc, 0.5)
    acc[...] = nl.add(acc, flag)
    nl.store(out, value=acc)
    nl.store(low_out, value=low)
    nl.store(bits_out, value=bits)
    return out, low_out, bits_out


def test_legacy_elementwise_ops_give_the_plain_path_values(rng):
    a, c = rand(rng, 128, 64), rand(rng, 128, 1)
    m = rng.integers(0, 1 << 20, size=(128, 64), dtype=np.int32)
    core._PLANS.clear()
    lean, plain = _twice(legacy_elementwise, a, c, m)
    assert core._PLANS                       # the lean path memoised front-door decisions
    assert_same_outcome(lean, plain)
    acc = a * np.float32(0.5)
    want_bits = m.copy()
    for _ in range(5):
        acc = np.float32(0.25) - (acc + np.float32(1.0))
        acc = np.maximum(acc + a, c) * c
        acc = np.tanh(np.exp(acc * np.float32(0.1)))
        want_bits = (want_bits & 1023) << 1
    assert np.isfinite(lean[0]).all()
    np.testing.assert_array_equal(lean[2], want_bits)


def _new_generation(x, y):
    t = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
    u = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=t, src=x)
    nisa2.dma_copy(dst=u, src=y)
    for _ in range(4):
        nisa2.tensor_scalar(dst=t, data=t, op0=nl2.multiply, operand0=0.5, op1=nl2.add, operand1=0.25)
        nisa2.tensor_tensor(dst=t, data1=t, data2=u, op=nl2.add)
        nisa2.activation(dst=u, op=nl2.exp, data=t, scale=0.1)
        nisa2.tensor_tensor(dst=t, data1=t, data2=u, op=nl2.maximum)
        u[...] = nl2.multiply(t, 0.5)                  # the functional forms, deferred and retargeted
        u[...] = nl2.subtract(u, nl2.exp(u))
        t[...] = nl2.add(t, u)
    out = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.shared_hbm)
    nisa2.dma_copy(dst=out, src=t)
    return out


def test_new_generation_instructions_give_the_plain_path_values(rng):
    x, y = rand(rng, 128, 64), rand(rng, 128, 64)
    lean, plain = _twice(nki2.jit(_new_generation), x, y)
    assert_same_outcome(lean, plain)
    t, u = x, y
    for _ in range(4):
        t = t * np.float32(0.5) + np.float32(0.25) + u
        u = np.exp(t.astype(np.float64) * 0.1).astype(np.float32)
        t = np.maximum(t, u)
        u = t * np.float32(0.5)
        u = u - np.exp(u.astype(np.float64)).astype(np.float32)
        t = t + u
    np.testing.assert_allclose(lean, t, rtol=1e-5, atol=1e-5)


@nki.jit
def out_of_scope(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    for _ in nl.sequential_range(3):
        t = nl.add(acc, 1.0)
        acc[...] = nl.add(t, 1.0)
    acc[...] = nl.add(t, 1.0)                      # t belongs to the finished loop
    nl.store(out, value=acc)
    return out


@nki.jit
def out_of_bounds(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    wide = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(3):
        wide[:, i * 16:i * 16 + 64] = nl.add(acc, 1.0)     # i = 2: columns 32..95, in bounds
    wide[:, 48:112] = nl.add(acc, 1.0)
    nl.store(out, value=acc)
    return out


@nki.jit
def into_hbm(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    for _ in nl.sequential_range(3):
        out[...] = nl.multiply(acc, 2.0)            # no instruction writes HBM: computed, then stored
        acc[...] = nl.add(acc, 1.0)
    return out


@nki.jit
def parallel_writes(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.affine_range(3):
        res[...] = nl.multiply(acc, 2.0)            # every iteration writes all of res
    nl.store(out, value=res)
    return out


@nki.jit(uninitialized="raise")
def half_written(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.sequential_range(2):
        acc[...] = nl.add(acc, 1.0)
    t[:, 0:32] = nl.add(acc[:, 0:32], 1.0)
    acc[...] = nl.add(t, 1.0)                     # half of t was never written
    nl.store(out, value=acc)
    return out


@nki.jit
def spills(a):
    """More live SBUF tiles than SBUF holds, read by deferred instructions in a shuffled order: which tile
    spills (the least recently touched) depends on when each was last touched."""
    out = nl.ndarray((128, 4096), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = [nl.load(a) for _ in range(10)]
    acc = nl.zeros((128, 4096), nl.float32, buffer=nl.sbuf)
    for i in (6, 0, 8, 1, 3, 0):
        acc[...] = nl.add(acc, tiles[i])            # touches tiles[i]: it spills later than the others
    for i in (4, 9, 2, 7, 5, 1, 6):
        more = nl.exp(tiles[i])                     # deferred, then flushed by the load
        tiles.append(nl.load(a))
        tiles[i] = more
    for t in tiles:
        acc[...] = nl.add(acc, t)
    nl.store(out, value=acc)
    return out


@nki.jit
def out_of_scope_and_bounds(a):
    """After a scoped loop finished (the lean path then finds bounds, scopes and memory in one pass over the
    operands): an instruction both out of bounds and using a tensor out of its scope raises the bounds error."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    wide = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.sequential_range(2):
        t = nl.add(acc, 1.0)
        acc[...] = nl.add(t, acc)
    wide[:, 0:64] = nl.add(acc, 2.0)
    acc[...] = nl.add(wide[:, 48:112], t)
    nl.store(out, value=acc)
    return out


@nki.jit
def stored_out_of_scope(a: nt.tensor):
    """After stores and loads that pass the one-pass check, a store (an HBM write, which the parameter rules
    look at) of a tile out of its scope into an immutable parameter: two rules reject it."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.sequential_range(2):
        t = nl.load(a)
        acc = nl.add(t, 1.0)
        nl.store(out, value=acc)
    u = nl.load(out)
    nl.store(out, value=nl.multiply(u, 2.0))
    nl.store(out, value=nl.add(u, 1.0))
    nl.store(a, value=t)                           # t is out of its scope, and `a` a parameter, not mutable
    return out


@nki.jit
def written_out_of_scope(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    for _ in nl.sequential_range(2):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.add(acc, 1.0)
        acc[...] = nl.multiply(t, acc)
    acc[...] = nl.exp(acc)
    t[...] = nl.add(acc, 1.0)                      # writes t after its loop finished
    nl.store(out, value=acc)
    return out


@nki.jit
def read_out_of_scope(a):
    """A call site planned and deferred before reads a tile out of its scope (its result kept in a local, so
    the deferral's own check raises the error: nothing checks it again when it is flushed)."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    for _ in nl.sequential_range(2):
        t = nl.add(acc, 1.0)
        acc[...] = nl.add(t, 1.0)
    for i in range(3):
        u = nl.multiply(acc if i < 2 else t, 2.0)     # the third reads t, out of its scope
        acc[...] = nl.add(u, acc)
    nl.store(out, value=acc)
    return out


@nki.jit
def spills_after_a_loop(a):
    """`spills` once a scoped loop has finished: the one-pass check touches and places the operands."""
    out = nl.ndarray((128, 4096), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 4096), nl.float32, buffer=nl.sbuf)
    for _ in nl.sequential_range(2):
        acc[...] = nl.add(acc, 1.0)
    tiles = [nl.load(a) for _ in range(10)]
    for i in (6, 0, 8, 1, 3, 0):
        acc[...] = nl.add(acc, tiles[i])
    for i in (4, 9, 2, 7, 5, 1, 6):
        more = nl.exp(tiles[i])
        tiles.append(nl.load(a))
        tiles[i] = more
    for t in tiles:
        acc[...] = nl.add(acc, t)
    nl.store(out, value=acc)
    return out


@nki.jit
def bad_operand(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    for _ in nl.sequential_range(2):
        acc[...] = nl.add(acc, 1.0)
    acc[...] = nl.bitwise_and(acc, 3)             # a bit-vector op on floats
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("kernel", [out_of_scope, out_of_bounds, into_hbm, parallel_writes, half_written,
                                    bad_operand, out_of_scope_and_bounds, stored_out_of_scope,
                                    written_out_of_scope, spills_after_a_loop],
                         ids=lambda k: k.__name__ if hasattr(k, "__name__") else None)
def test_the_lean_path_gives_the_plain_path_values_and_errors(rng, kernel):
    a = rand(rng, 128, 64)
    lean, plain = _twice(kernel, a)
    assert_same_outcome(lean, plain)


def test_errors_name_the_kernel_line(rng):
    a = rand(rng, 128, 64)
    lean, _ = _twice(out_of_scope, a)
    assert lean.code == "err_local_variable_used_out_of_scope"
    assert "belongs to the finished loop" in lean.location.source
    lean, _ = _twice(out_of_bounds, a)
    assert "wide[:, 48:112]" in lean.location.source
    one = np.float32(1)
    np.testing.assert_array_equal(_twice(into_hbm, a)[0], (a + one + one) * np.float32(2))
    assert _twice(parallel_writes, a)[0].code == "err_unexpected_output_dependencies"
    assert type(_twice(half_written, a)[0]).__name__ == "UninitializedReadError"
    lean, _ = _twice(out_of_scope_and_bounds, a)
    assert lean.code == "err_tensor_access_out_of_bound" and "wide[:, 48:112]" in lean.location.source
    lean, _ = _twice(written_out_of_scope, a)
    assert lean.code == "err_local_variable_used_out_of_scope" and "writes t after" in lean.location.source


def test_a_claimed_instruction_moved_to_its_destination_equals_its_replace(rng):
    """`Instruction.moved_to` (the lean path's retarget of a claimed temporary) gives the fields, operands
    and signature that `replace(dst=...)` gives."""
    captured = []

    @nki.jit
    def kernel(a):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        t = nl.add(x, 1.0)                          # held: deferred, then issued as it is
        captured.append((program.active().pending.instr, acc))
        acc[...] = nl.multiply(t, 2.0)
        nl.store(out, value=acc)
        return out

    np.testing.assert_array_equal(kernel(rand(rng, 128, 64)) > -np.inf, True)
    instr, dst = captured[0]
    instr.operands()
    replaced = instr.replace(dst=dst)
    moved = instr.replace().moved_to({"dst": dst})
    assert moved.operands() == replaced.operands() and moved.dst is dst
    assert moved.signature() == replaced.signature()
    # the operand cache the issue path reads directly (`instr._operands or instr.operands()`) is what a fresh
    # build gives; an instruction without one reads the class's None
    rebuilt = type(moved)(**{k: v for k, v in vars(moved).items() if not k.startswith("_")})
    assert rebuilt._operands is None and moved._operands == rebuilt.operands() == rebuilt._operands
    assert {k: v for k, v in vars(moved).items() if not k.startswith("_")} == \
        {k: v for k, v in vars(replaced).items() if not k.startswith("_")}
    only_dst = instr.replace().moved_dst(dst)       # what `assign` moves a planned temporary with
    fields = {k for k in vars(moved) if k != "_signature"}
    assert set(vars(only_dst)) == fields and all(getattr(only_dst, k) is getattr(moved, k) for k in fields
                                                 if k != "_operands")
    assert [(r, id(v), k) for r, v, k in only_dst._operands] == [(r, id(v), k) for r, v, k in moved._operands]
    assert only_dst.signature() == replaced.signature()


def test_a_claimed_matmul_moved_with_its_accumulate_flag_equals_its_replace(rng):
    """`moved_to` with a parameter change too (`acc += nisa.nc_matmul(...)`: the accumulate flag), on a matmul
    built from its plan's template: the fields, operands, signature and kept parameters `replace` gives."""
    from opennki.instructions.tensor_engine import NcMatmul
    from opennki.machine.memory import MemoryRegion
    from tests.sim.test_fast_paths import _root

    p, q = _root(MemoryRegion.psum, (8, 8)), _root(MemoryRegion.psum, (8, 8))
    s, m = _root(MemoryRegion.sbuf, (4, 8)), _root(MemoryRegion.sbuf, (4, 8))
    make, template, _, _, claim = NcMatmul(dst=p, stationary=s, moving=m, accumulate=False).maker(
        ("dst", "stationary", "moving"))
    for flag in (True, False):
        instr = make(template, (p, s, m))
        instr.signature()
        changes = {"dst": q, "accumulate": flag}
        replaced = instr.replace(**changes)
        moved = instr.replace().moved_to(changes)
        assert [(r, id(v), k) for r, v, k in moved.operands()] == [(r, id(v), k) for r, v, k in replaced.operands()]
        assert moved.signature() == replaced.signature() and moved.accumulate is flag
        assert moved._params == replaced._params == replaced.params() and moved._params is not template["_params"]
        given = instr.replace().moved_to(changes, replaced._params)     # the params the plan kept for them
        assert given._params is replaced._params and given.signature() == replaced.signature()
        assert {k: v for k, v in vars(given).items() if k != "_params"} == \
            {k: v for k, v in vars(moved).items() if k != "_params"}
        assert {k: v for k, v in vars(moved).items() if not k.startswith("_")} == \
            {k: v for k, v in vars(replaced).items() if not k.startswith("_")}
        # one not built yet (`core.accumulate`): built writing `q` (`maker`'s claim), then moved with `built`
        for params in (None, replaced._params):
            built = claim(template, q, (p, s, m)).moved_to(changes, params, True)
            assert [(r, id(v), k) for r, v, k in built._operands] == \
                [(r, id(v), k) for r, v, k in replaced.operands()]
            assert built.signature() == replaced.signature() and built._params == replaced.params()
            assert {k: v for k, v in vars(built).items() if not k.startswith("_")} == \
                {k: v for k, v in vars(replaced).items() if not k.startswith("_")}


@nki.jit
def immutable_written(a: nt.tensor, b: nt.mutable_tensor):
    acc = nl.load(a)
    for _ in nl.sequential_range(2):
        acc[...] = nl.add(acc, 1.0)                # on-chip writes: the parameter rules are not asked
    nl.store(b, value=acc)                         # a mutable parameter, returned
    nl.store(a, value=acc)                         # an immutable one
    return b


@nki.jit
def mutable_not_returned(a, b: nt.mutable_tensor):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    acc[...] = nl.multiply(acc, 2.0)
    nl.store(b, value=acc)
    nl.store(out, value=acc)
    return out


def test_the_parameter_rules_give_the_plain_path_errors(rng):
    a, b = rand(rng, 128, 64), rand(rng, 128, 64)
    for kernel, code in ((immutable_written, "err_cannot_update_immutable_parameter"),
                         (mutable_not_returned, "err_mutable_parameter_not_returned")):
        lean, plain = _twice(kernel, a, b.copy())
        assert_same_outcome(lean, plain)
        assert lean.code == code


def test_the_instructions_that_write_only_on_chip_reject_an_hbm_destination(rng):
    """`writes_on_chip_only` (the lean path then skips the observers of HBM writes) holds for exactly these
    classes, and their check rejects an HBM destination."""
    assert {cls for cls in REGISTRY.values() if cls.writes_on_chip_only} == {
        TensorScalar, TensorTensor, NcMatmul, TensorCopy, TensorCopyDynamicSrc, TensorCopyDynamicDst, TensorReduce,
        Memset, Activation, ActivationReduce}       # (the subclasses: their base's check, and more)

    def tensor_scalar_into_hbm(a):
        out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        x = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=x, src=a)
        nisa2.tensor_scalar(dst=out, data=x, op0=nl2.add, operand0=1.0)
        return out

    def tensor_tensor_into_hbm(a):
        out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        x = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=x, src=a)
        nisa2.tensor_tensor(dst=out, data1=x, data2=x, op=nl2.add)
        return out

    def matmul_into_hbm(a):
        out = nl2.ndarray((64, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        x = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=x, src=a)
        nisa2.nc_matmul(dst=out, stationary=x, moving=x)
        return out

    def tensor_copy_into_hbm(a):
        out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        x = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=x, src=a)
        nisa2.tensor_copy(dst=out, src=x)
        return out

    def tensor_reduce_into_hbm(a):
        out = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.shared_hbm)
        x = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=x, src=a)
        nisa2.tensor_reduce(dst=out, op=nl2.add, data=x, axis=1, keepdims=True)
        return out

    def activation_into_hbm(a):
        out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        x = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=x, src=a)
        nisa2.activation(dst=out, op=nl2.exp, data=x)
        return out

    def activation_reduce_into_hbm(a):
        out = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.shared_hbm)
        x = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        y = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=x, src=a)
        nisa2.activation_reduce(dst=y, op=nl2.exp, data=x, reduce_op=nl2.add, reduce_res=out)
        return out

    def memset_into_hbm(a):
        out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        nisa2.memset(dst=out, value=0.0)
        return out

    for fn in (tensor_scalar_into_hbm, tensor_tensor_into_hbm, matmul_into_hbm, tensor_copy_into_hbm,
               tensor_reduce_into_hbm, memset_into_hbm, activation_into_hbm, activation_reduce_into_hbm):
        lean, plain = _twice(nki2.jit(fn), rand(rng, 128, 64))
        assert_same_outcome(lean, plain)
        assert isinstance(lean, MemoryKindError), lean


def _helper_add(t, v):
    return nl.add(t, v)              # one call site; what its result becomes depends on the caller


@nki.jit
def helper_results(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(a)
    kept = []
    for i in nl.sequential_range(3):
        acc[...] = _helper_add(acc, 1.0)            # a temporary, through the helper's return
        t = _helper_add(acc, 0.5)                   # bound to a local, read again below
        kept.append(_helper_add(t, 0.25))           # held by a list
        acc[...] = nl.multiply(t, 0.5)
        u = _helper_add(acc, 2.0)                   # a local never read again
    acc[...] = nl.add(acc, kept[0])
    acc[...] = nl.add(acc, kept[2])
    nl.store(out, value=acc)
    return out


def test_results_through_a_helper_give_the_plain_path_values(rng):
    lean, plain = _twice(helper_results, rand(rng, 128, 64))
    assert_same_outcome(lean, plain)


@nki.jit
def constant_masks(q, k):
    """A causal kernel's shape (the flash-attention backward's): every instruction of a tile pair takes `mask=`
    a comparison of loop indices, True on and below the diagonal, False above it; matmuls accumulate into
    PSUM and read a transpose's PSUM result (copied to SBUF first)."""
    out = nl.ndarray((2, 128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    qs = nl.load(q)
    for i in nl.affine_range(2):
        acc = nl.zeros((128, 256), nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(2):
            mask = i >= j
            ks = nl.load(k[:, j * 256:(j + 1) * 256])
            s = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
            s[:, :] += nisa.nc_matmul(qs, ks, mask=mask)
            e = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf)
            e[:, :] = nisa.activation(np.exp, data=s[:, :], scale=0.01, mask=mask)
            iq, ik = nl.mgrid[0:128, 0:256]
            e[:, :] = nisa.affine_select(pred=(i * 128 + iq >= j * 256 + ik), on_true_tile=e[:, :],
                                         on_false_value=-1.0, mask=mask)
            t = nisa.nc_transpose(e[:, 0:128], mask=mask)
            d = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
            d[:, :] += nisa.nc_matmul(t, ks, mask=mask)
            d[:, :] += nisa.nc_matmul(t, e, mask=mask)
            c = nl.multiply(d, 0.5, mask=mask)
            acc[:, :] = nl.loop_reduce(c, op=np.add, loop_indices=(j,), mask=mask)
        nl.store(out[i], value=acc)
    return out


@nki.jit
def masked_out_of_bounds(q):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    qs = nl.load(q)
    wide = nl.ndarray((128, 150), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(3):
        for j in nl.sequential_range(2):
            # past the end for i = 2: under mask=False (j = 0) nothing is checked, under mask=True an error
            wide[:, i * 16:i * 16 + 128] = nisa.activation(np.exp, data=qs, mask=j == 1)
    nl.store(out, value=wide[:, 0:128])
    return out


def test_constant_masks_give_the_plain_path_values_and_errors(rng):
    """A constant `mask=True` / `False` takes the lean path (checked once per signature, planned matmuls): the
    outputs, and an out-of-bounds error with its kernel line, are the plain path's."""
    q, k = rand(rng, 128, 128), rand(rng, 128, 512)
    lean, plain = _twice(constant_masks, q, k)
    assert_same_outcome(lean, plain)
    assert np.isfinite(lean).all() and (lean[1] != 0).any() and not np.array_equal(lean[0], lean[1])
    rec = Recorder()
    run_kernel(constant_masks.func, (q, k), listeners=[rec])
    masks = [e.mask for e in rec.events if getattr(e, "opcode", None) == "nc_matmul"]
    # every matmul keeps its mask (the planned ones too): all True on and below the diagonal, else all False
    assert len(masks) == 12 and [bool(m.all()) for m in masks] == [True] * 3 + [False] * 3 + [True] * 6
    assert all(m.shape == (128, 256) and (m.all() or not m.any()) for m in masks)
    lean, plain = _twice(masked_out_of_bounds, q)
    assert_same_outcome(lean, plain)
    assert "wide[:, i * 16" in lean.location.source


def _matmul_steps(a, b):
    """Planned loads and `acc += nisa.nc_matmul(...)` retargeted into PSUM, then copied out and stored."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(a.shape[0] // 128):
        s = nl.load(a[k * 128:(k + 1) * 128, :])
        m = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(s, m)
    nl.store(out, value=nl.copy(acc, dtype=out.dtype))
    return out



@pytest.mark.parametrize("case", ["legacy_elementwise", "new_generation", "matmul_steps", "helper_results",
                                  "out_of_scope", "out_of_bounds", "parallel_writes", "bad_operand", "spills",
                                  "constant_masks", "masked_out_of_bounds", "out_of_scope_and_bounds",
                                  "stored_out_of_scope", "written_out_of_scope", "spills_after_a_loop"])
def test_with_a_listener_the_lean_path_gives_the_plain_path_values_errors_and_events(rng, case):
    """With listeners the front doors' plans and the planned deferrals apply too (`Program.lean`): every event,
    field by field, is the plain path's, and so are the outputs or the error."""
    kernel, args = _listener_case(rng, case)
    outcomes, events = fast_and_plain(kernel.func, args, program, "LEAN_ISSUE", setup=core._PLANS.clear)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]
    if case == "matmul_steps":
        np.testing.assert_allclose(outcomes[0], args[0].T.astype(np.float64) @ args[1], rtol=1e-4, atol=1e-3)
    if case in ("spills", "spills_after_a_loop"):
        assert sum(e[4] == "sbuf_spill" for e in events[0] if e[0] == "InstructionExecuted") > 3


@pytest.mark.parametrize("case", ["legacy_elementwise", "new_generation", "matmul_steps", "helper_results",
                                  "out_of_scope", "out_of_bounds", "parallel_writes", "bad_operand", "spills",
                                  "constant_masks", "masked_out_of_bounds", "out_of_scope_and_bounds",
                                  "stored_out_of_scope", "written_out_of_scope", "spills_after_a_loop",
                                  "read_out_of_scope", "tiled_after_loops", "matmul_out_of_scope",
                                  "accumulate_out_of_scope", "blocked_sums"])
def test_quiet_deferrals_give_the_checked_deferrals_values_errors_and_events(rng, case):
    """`program.QUIET_DEFERRALS`: a planned deferral calls `_check_clean` only when a lean observer looks at it
    or an operand is not known in bounds or not placed (spilled tiles read again, tiles out of their scope,
    views out of bounds): outputs or errors, and every event field by field, are those of calling it always."""
    kernel, args = _listener_case(rng, case)
    outcomes, events = fast_and_plain(kernel.func, args, program, "QUIET_DEFERRALS", setup=core._PLANS.clear)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]
    if case in ("spills", "spills_after_a_loop"):
        assert sum(e[4] == "sbuf_reload" for e in events[0] if e[0] == "InstructionExecuted") > 3


@pytest.mark.parametrize("case", ["legacy_elementwise", "matmul_steps", "helper_results", "out_of_scope",
                                  "out_of_bounds", "spills", "constant_masks", "out_of_scope_and_bounds",
                                  "stored_out_of_scope", "written_out_of_scope", "spills_after_a_loop",
                                  "read_out_of_scope", "tiled_after_loops", "matmul_out_of_scope",
                                  "accumulate_out_of_scope", "blocked_sums", "front_doors_in_helpers"])
def test_claims_checked_at_their_destination_give_the_whole_checks_values_errors_and_events(rng, case):
    """`program.CLAIMED_CHECKS`: a planned deferral claimed in its statement (`acc += nisa.nc_matmul(...)`,
    `buf[...] = nl.add(x, 1.0)`) after a quiet check is checked at its destination alone, which takes the
    deferral's touch: outputs or errors (their kernel lines too), and every event field by field (spills
    chosen by the touches included), are those of the whole `_check_clean`."""
    kernel, args = _listener_case(rng, case)
    outcomes, events = fast_and_plain(kernel.func, args, program, "CLAIMED_CHECKS", setup=core._PLANS.clear)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]
    if case in ("spills", "spills_after_a_loop"):
        assert sum(e[4] == "sbuf_spill" for e in events[0] if e[0] == "InstructionExecuted") > 3


def test_claims_are_checked_at_their_destination(rng, monkeypatch):
    """The fast path above is taken: each `acc += nisa.nc_matmul(...)` of the tiled matmul once its plan knows
    the destination (all but the first two: the first matmul, checked as it is deferred and retargeted) is
    checked by `_check_claimed` alone, and the values are NumPy's."""
    calls = []
    whole = program.Program._check_clean
    monkeypatch.setattr(program.Program, "_check_clean", lambda self, *a: calls.append(a[0].opcode) or whole(self, *a))
    kernel, args = _listener_case(rng, "tiled_after_loops")
    for claimed in (True, False):
        monkeypatch.setattr(program, "CLAIMED_CHECKS", claimed)
        calls.clear()
        out = kernel(*args)
        np.testing.assert_allclose(out, args[0].T.astype(np.float64) @ args[1], rtol=1e-4, atol=1e-3)
        assert calls.count("nc_matmul") == (2 if claimed else 13)


def test_quiet_deferrals_are_taken_while_the_scope_rule_looks(rng, monkeypatch):
    """The fast path above is taken once a scoped loop has finished: of the tiled matmul's 12 k-steps, only the
    `+=` of each matmul checks (its loads' and matmul's deferrals find their operands placed and in scope), where
    checking every deferral checks 3 more per k-step, and the values are NumPy's."""
    calls = []
    check = program.Program._check_clean
    monkeypatch.setattr(program.Program, "_check_clean", lambda self, *a: calls.append(a[0].opcode) or check(self, *a))
    kernel, args = _listener_case(rng, "tiled_after_loops")
    monkeypatch.setattr(program, "CLAIMED_CHECKS", False)      # every claim takes `_check_clean` (counted)
    counts = []
    for quiet in (True, False):
        monkeypatch.setattr(program, "QUIET_DEFERRALS", quiet)
        calls.clear()
        out = kernel(*args)
        np.testing.assert_allclose(out, args[0].T.astype(np.float64) @ args[1], rtol=1e-4, atol=1e-3)
        counts.append(len(calls))
    assert counts[1] - counts[0] == 3 * 12 and calls.count("nc_matmul") == 2 * 12


@pytest.mark.parametrize("case", ["legacy_elementwise", "helper_results", "out_of_scope", "out_of_bounds",
                                  "bad_operand", "spills", "out_of_scope_and_bounds", "read_out_of_scope",
                                  "blocked_sums", "accumulate_out_of_scope", "new_generation", "matmul_steps",
                                  "front_doors_in_helpers", "load_unwritten", "stored_in_parallel",
                                  "matmul_out_of_scope"])
def test_kernel_frame_hints_give_the_stack_walks_values_errors_and_events(rng, case):
    """`frames.KERNEL_FRAME_HINTS`: a legacy binary front door, `nl.zeros` / `nl.ndarray`, `nl.load`, `nl.store`,
    `nl.copy`, `nisa.nc_matmul`, `nl.affine_range` or `acc += x` called from the kernel (or from a helper in a
    kernel file) hands its caller's frame on instead of `user_frame` / `user_location` / `Program.issue` walking
    the stack: outputs or errors (their kernel lines too), and every event with its kernel line, are those of the
    walk."""
    from opennki.sim import SimOptions, frames

    kernel, args = _listener_case(rng, case)
    launch = {"options": SimOptions(uninitialized="raise")} if case == "load_unwritten" else {}
    outcomes, events = fast_and_plain(kernel.func, args, frames, "KERNEL_FRAME_HINTS", setup=core._PLANS.clear,
                                      **launch)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]
    assert all(e[-3] is not None for e in events[0] if e[0] == "InstructionExecuted")     # kernel lines
    if case == "blocked_sums":
        lhsT, rhs = args
        np.testing.assert_allclose(outcomes[0], lhsT.T.astype(np.float64) @ rhs * 2, rtol=1e-4, atol=1e-3)
    if case == "accumulate_out_of_scope":
        assert isinstance(outcomes[0], OpenNKIError) and outcomes[0].location.source.startswith("acc += t")
    if case == "front_doors_in_helpers":
        a, b = args
        np.testing.assert_allclose(outcomes[0], a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    lines = {"load_unwritten": "u = nl.load(scratch)", "stored_in_parallel": "nl.store(out, value=nl.load(a))",
             "matmul_out_of_scope": "acc += nisa.nc_matmul(s, m)"}
    if case in lines:
        assert isinstance(outcomes[0], OpenNKIError) and outcomes[0].location.source.startswith(lines[case])
    if case == "load_unwritten":            # and the line of the `nl.ndarray` that made the tensor
        assert f"created at line {load_unwritten.func.__code__.co_firstlineno + 4}," in str(outcomes[0])
    if case == "matmul_out_of_scope":       # and the line of the affine_range loop that made the operand
        assert f"inside the loop at line {matmul_out_of_scope.func.__code__.co_firstlineno + 4}," in str(outcomes[0])


def _loaded_product(s_src, m_src):
    return nisa.nc_matmul(nl.load(s_src), nl.load(m_src))  # front doors in a helper in the kernel's file


def _store_copy(dst, acc):
    nl.store(dst, value=nl.copy(acc, dtype=dst.dtype))


def _tiles(n):
    return nl.affine_range(n)                       # the loop's kernel line is here


def _sbuf_tile(shape):
    return nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)


@nki.jit
def front_doors_in_helpers(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in _tiles(2):
        acc += _loaded_product(a[k * 128:(k + 1) * 128, :], b[k * 128:(k + 1) * 128, :])
    res = _sbuf_tile((128, 512))
    res[...] = nl.copy(acc)
    _store_copy(out, res)
    return out


@nki.jit(uninitialized="raise")              # (the test launches it with these options)
def load_unwritten(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), 1.0))
    scratch = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(out), 2.0))
    u = nl.load(scratch)                            # never written
    nl.store(out, value=u)
    return out


@nki.jit
def stored_in_parallel(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), 1.0))
    for _ in nl.affine_range(2):
        nl.store(out, value=nl.load(a))             # every iteration writes all of out
    return out


@nki.jit
def matmul_out_of_scope(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        s = nl.load(a[k * 128:(k + 1) * 128, :])
        m = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(s, m)
    nl.store(out, value=nl.copy(acc, dtype=out.dtype))
    acc += nisa.nc_matmul(s, m)                     # s and m belong to the finished loop
    nl.store(out, value=nl.copy(acc, dtype=out.dtype))
    return out


def _accumulate_into(acc, x):
    acc += x                                        # `+=` in a helper in the kernel's file: the kernel line is here


@nki.jit
def blocked_sums(lhsT, rhs):
    """`nl.zeros` (tiles, SBUF and PSUM block tensors) and `acc[m] += part`, as the blocked matmul example
    writes them, and `acc += part` through a helper: result = 2 * lhsT.T @ rhs."""
    out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, nl.par_dim(128), 512), nl.float32, buffer=nl.sbuf)
    again = nl.zeros((2, nl.par_dim(128), 512), nl.float32, buffer=nl.sbuf)
    spare = nl.zeros((2, nl.par_dim(128), 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        rhs_tile = nl.load(rhs[k * 128:(k + 1) * 128, :])
        for m in nl.affine_range(2):
            part = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            part += nisa.nc_matmul(nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128]), rhs_tile)
            acc[m] += part
            _accumulate_into(again[m], part)
    for m in nl.affine_range(2):
        nl.store(out[m * 128:(m + 1) * 128, :], value=nl.add(nl.add(acc[m], again[m]), spare[m]))
    return out


@nki.jit
def accumulate_out_of_scope(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
    for _ in nl.sequential_range(3):
        t = nl.add(nl.load(a), 1.0)
        acc += t
    acc += t                                        # t belongs to the finished loop
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("case", ["legacy_elementwise", "new_generation", "matmul_steps", "helper_results",
                                  "out_of_scope", "out_of_bounds", "parallel_writes", "bad_operand", "spills",
                                  "constant_masks", "masked_out_of_bounds", "out_of_scope_and_bounds",
                                  "stored_out_of_scope", "written_out_of_scope", "spills_after_a_loop",
                                  "read_out_of_scope", "tiled_after_loops", "matmul_out_of_scope",
                                  "accumulate_out_of_scope", "blocked_sums"])
def test_instructions_built_when_claimed_give_the_built_ones_values_errors_and_events(rng, case):
    """`core.BUILD_WHEN_CLAIMED`: a planned deferral from a template is kept unbuilt (`Deferred.instr` builds it
    when read), and the lean retarget of a temporary builds it with its destination: outputs or errors (their
    kernel lines too), and every event field by field, are those of building it at once and moving `dst`."""
    kernel, args = _listener_case(rng, case)
    outcomes, events = fast_and_plain(kernel.func, args, core, "BUILD_WHEN_CLAIMED", setup=core._PLANS.clear)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]


def test_a_deferral_built_when_claimed_is_unbuilt_until_read(rng):
    """The fast path above is taken: a planned temporary bound to a local is pending unbuilt, and reading it
    (`Deferred.instr`, here by the retarget that the local's later read refuses) builds the instruction the
    plain path built, once; the kernel's values are NumPy's."""
    import dataclasses

    from opennki.sim.program import active

    seen = []

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.load(a)
        for _ in nl.sequential_range(4):
            t = nl.multiply(acc, 3.0)
            pending = active().pending
            seen.append((pending, pending._instr))
            acc[...] = nl.add(t, acc)
        nl.store(out, value=acc)
        return out

    a = rand(rng, 128, 64)
    want = a
    for _ in range(4):
        want = want * np.float32(3) + want
    core._PLANS.clear()
    np.testing.assert_array_equal(kernel(a), want)
    # the first two are built at once (no plan yet, then its memo's first), the others when read
    assert seen[1][1] is not None and all(built is None for _, built in seen[2:])
    plain = seen[1][1]
    for pending, _ in seen[2:]:
        instr = pending.instr
        assert pending.instr is instr and instr.dst is pending.result and type(instr) is type(plain)
        assert all(getattr(instr, f.name) == getattr(plain, f.name) for f in dataclasses.fields(plain)
                   if f.name not in ("dst", "data"))
        assert [(r, k) for r, _, k in instr._operands] == [(r, k) for r, _, k in plain.operands()]


def _listener_case(rng, case: str) -> tuple:
    """(kernel, args) of a case of the comparisons with a listener."""
    a, c = rand(rng, 128, 64), rand(rng, 128, 1)
    kernels = {
        "legacy_elementwise": (legacy_elementwise, (a, c, rng.integers(0, 1 << 20, size=(128, 64), dtype=np.int32))),
        "new_generation": (nki2.jit(_new_generation), (a, rand(rng, 128, 64))),
        "matmul_steps": (nki.jit(_matmul_steps), (rand(rng, 512, 128), rand(rng, 512, 512))),
        "helper_results": (helper_results, (a,)),
        "out_of_scope": (out_of_scope, (a,)), "out_of_bounds": (out_of_bounds, (a,)),
        "parallel_writes": (parallel_writes, (a,)), "bad_operand": (bad_operand, (a,)),
        "spills": (spills, (rand(rng, 128, 4096),)),
        "constant_masks": (constant_masks, (rand(rng, 128, 128), rand(rng, 128, 512))),
        "masked_out_of_bounds": (masked_out_of_bounds, (rand(rng, 128, 128),)),
        "out_of_scope_and_bounds": (out_of_scope_and_bounds, (a,)),
        "stored_out_of_scope": (stored_out_of_scope, (a,)),
        "written_out_of_scope": (written_out_of_scope, (a,)),
        "spills_after_a_loop": (spills_after_a_loop, (rand(rng, 128, 4096),)),
        "read_out_of_scope": (read_out_of_scope, (a,)),
        "blocked_sums": (blocked_sums, (rand(rng, 256, 256), rand(rng, 256, 512))),
        "accumulate_out_of_scope": (accumulate_out_of_scope, (a,)),
        "front_doors_in_helpers": (front_doors_in_helpers, (rand(rng, 256, 128), rand(rng, 256, 512))),
        "load_unwritten": (load_unwritten, (a,)), "stored_in_parallel": (stored_in_parallel, (a,)),
        "matmul_out_of_scope": (matmul_out_of_scope, (rand(rng, 256, 128), rand(rng, 256, 512))),
        # the bundled tiled matmul: from its second output tile on, a scoped loop has finished (the scope rule
        # looks), so the quiet deferrals of its loads and matmuls also look at their operands' scopes
        "tiled_after_loops": (nki.jit(tiled_matmul), (rand(rng, 384, 512), rand(rng, 384, 512))),
    }
    return kernels[case]


def _transpose_into(dst, x):
    dst[...] = nl.transpose(x)          # one call site: its retarget fails into SBUF, succeeds into PSUM


@nki.jit
def copies_reductions_transposes(a, b):
    """Planned copies and reductions (`core.copy`, `core.reduce`), retargeted or read again, and transposes
    into SBUF (whose retarget fails its check: the Tensor Engine writes PSUM) and into PSUM from one call site."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    cols = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.shared_hbm)
    low_out = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    tout = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    sq = nl.load(b)
    acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    low = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    c = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
    t_sb = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    t_ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    acc[...] = nl.copy(x)
    for i in nl.sequential_range(4):
        acc[...] = nl.add(acc, 0.5)
        low[...] = nl.copy(acc, dtype=nl.bfloat16)
        acc[...] = nl.copy(acc)                          # in place
        kept = nl.copy(acc)                              # a local read again
        acc[...] = nl.multiply(kept, 0.75)
        c[:, 0:1] = nl.max(acc, axis=1, keepdims=True)
        c[:, 1:2] = nl.sum(acc, axis=(1,), keepdims=True)
        c[:, 2:3] = nl.min(acc, axis=1)
        c[:, 3:4] = nl.mean(acc, axis=1, keepdims=True)
        c[:, 4:5] = nl.prod(nl.multiply(acc, 0.001), axis=1, keepdims=True)
        c[:, 5:6] = nl.sum(acc, axis=[1], keepdims=True)     # a list axis
        m = nl.max(acc, axis=1, keepdims=True)
        acc[...] = nl.subtract(acc, m)
        low[...] = m                                     # a held column copied, broadcast (`copy_into`)
        acc[...] = nl.add(acc, low)
        c[...] = kept[:, 0:6]                            # a held tile's slice copied
        for dst in (t_sb, t_ps, t_sb):
            _transpose_into(dst, sq)
        sq[...] = nl.add(t_sb, t_ps)
        nl.store(cols, value=nl.add(c, m))
    nl.store(out, value=acc)
    nl.store(low_out, value=low)
    nl.store(tout, value=sq)
    return out, cols, low_out, tout


@nki.jit
def bad_reduction(a):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    c = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    for axis in (1, 1, 0):
        c[...] = nl.max(x, axis=axis, keepdims=True)      # the partition axis at the third
    nl.store(out, value=c)
    return out


@nki.jit
def bad_copy(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    c = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for dt in (nl.float32, nl.float32, np.float64):
        c[...] = nl.copy(x, dtype=dt)                       # no 64-bit dtype on chip at the third
    nl.store(out, value=c)
    return out


@nki.jit
def nl_matmuls(a, b):
    """nl.matmul planned (`core.matmul`): accumulated into PSUM (the first one starting the group), held and
    read again, with x transposed first, with a bf16 operand widened, and products of other widths."""
    out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b[:, 0:128])
    yb = nl.copy(y, dtype=nl.bfloat16)
    acc = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
    res = nl.ndarray((64, 128), nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(3):
        acc += nl.matmul(x, y, transpose_x=True)
        acc += nl.matmul(x, yb, transpose_x=True)
        p = nl.matmul(x, y, transpose_x=True)
        res[...] = nl.add(res if i else 0.0, p)
        res[...] = nl.add(res, nl.multiply(p, 0.5))
        sq = nl.matmul(nl.copy(x[0:64, :]), y[0:64, 0:64])          # x [M, K]: transposed first
        res[:, 0:64] = nl.add(res[:, 0:64], sq)
    res[...] = nl.add(res, acc)
    for n in (128, 256, 640):
        wide = nl.matmul(x, nl.load(b[:, 0:n]), transpose_x=True)
        res[...] = nl.add(res, wide[:, 0:128])
    nl.store(out, value=res)
    return out


@nki.jit
def bad_matmul(a, b):
    out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    acc = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
    for k in (128, 128, 64):
        acc += nl.matmul(x[0:k, :], y, transpose_x=True)                # contraction dims differ at the third
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("kernel", ["copies_reductions_transposes", "bad_reduction", "bad_copy", "nl_matmuls",
                                    "bad_matmul"])
def test_planned_copies_reductions_and_failed_retargets_give_the_plain_path_outcome_and_events(rng, kernel):
    """nl.copy, the reductions and nl.matmul are planned, and a retarget whose check failed is not tried again
    for its signature (`core._retargeted`): the outputs or the error and, with a listener, every event field by
    field are the plain path's."""
    a = rand(rng, 128, 64)
    args = {"copies_reductions_transposes": (a, rand(rng, 128, 128)), "bad_reduction": (a,), "bad_copy": (a,),
            "nl_matmuls": (a, rand(rng, 128, 640)), "bad_matmul": (a, rand(rng, 128, 128))}
    fn = {"copies_reductions_transposes": copies_reductions_transposes, "bad_reduction": bad_reduction,
          "bad_copy": bad_copy, "nl_matmuls": nl_matmuls, "bad_matmul": bad_matmul}[kernel]
    outcomes, events = fast_and_plain(fn.func, args[kernel], program, "LEAN_ISSUE", setup=core._PLANS.clear)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 6 and events[0] == events[1]
    if kernel in ("copies_reductions_transposes", "nl_matmuls"):
        assert not isinstance(outcomes[0], OpenNKIError)
        if kernel == "copies_reductions_transposes":
            assert sum(e[4] == "tensor_reduce" for e in events[0] if e[0] == "InstructionExecuted") >= 4 * 7
    else:
        assert isinstance(outcomes[0], OpenNKIError)


def test_a_retarget_that_failed_its_check_is_not_checked_again(rng, monkeypatch):
    """`sbuf[...] = nl.transpose(x)` in a loop: the lean path checks the transpose retargeted into SBUF once
    (it fails: the result is transposed into PSUM, then copied), the plain path at every statement."""
    from opennki.instructions.tensor_engine import NcTranspose
    into_sbuf = []
    check = NcTranspose.check

    def counted(self, ctx):
        into_sbuf.append(self.dst.kind.name == "SBUF")
        return check(self, ctx)
    monkeypatch.setattr(NcTranspose, "check", counted)

    @nki.jit
    def transposes(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        for _ in nl.sequential_range(6):
            t[...] = nl.transpose(x)
            x[...] = nl.add(t, 1.0)
        nl.store(out, value=x)
        return out

    a = rand(rng, 128, 128)
    lean, plain = _twice(transposes, a)
    assert sum(into_sbuf) == 1 + 6          # lean: one retarget check; plain: one per statement
    assert_same_outcome(lean, plain)
    np.testing.assert_allclose(lean, _transposed_adds(a, 6), rtol=1e-6)


def _transposed_adds(a, n):
    x = a.astype(np.float32)
    for _ in range(n):
        x = x.T + np.float32(1.0)
    return x

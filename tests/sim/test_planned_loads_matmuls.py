"""`nl.load` and the legacy `nisa.nc_matmul` defer planned instructions on the lean path (`core.defer_planned`):
checked until their signature is clean, then deferred as checked; `acc += nisa.nc_matmul(...)` then retargets
into a destination (and accumulate flag) it was clean with without checking again. Kernels give the values
and the errors (class, text, kernel line) of the plain path, on random fp32 and bf16 data, odd shapes and
several accumulation groups."""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from tests.sim.outcomes import assert_same_outcome
from tests.isa.helpers import rand
from tests.sim.test_lean_issue import _twice


@nki.jit
def tiled(lhsT, rhs):
    """K, M, N need not be multiples of the tile sizes: the last tiles are smaller (other signatures)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range((M + 63) // 64):
        for n in nl.affine_range((N + 255) // 256):
            ms, ns = min(64, M - m * 64), min(256, N - n * 256)
            acc = nl.zeros((ms, ns), nl.float32, buffer=nl.psum)
            for k in nl.affine_range((K + 127) // 128):
                ks = min(128, K - k * 128)
                a = nl.load(lhsT[k * 128:k * 128 + ks, m * 64:m * 64 + ms])
                b = nl.load(rhs[k * 128:k * 128 + ks, n * 256:n * 256 + ns])
                acc += nisa.nc_matmul(a, b)
            nl.store(out[m * 64:m * 64 + ms, n * 256:n * 256 + ns], value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def groups(lhsT, rhs):
    """Accumulation groups: a declared PSUM tile the first `+=` overwrites, groups closed by a copy, a second
    accumulator of another shape, a product bound to a local, and loads assigned into a declared tile."""
    out = nl.ndarray((3, 64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
    small = nl.zeros((32, 128), nl.float32, buffer=nl.psum)
    buf = nl.ndarray((128, 64), lhsT.dtype, buffer=nl.sbuf)
    for g in nl.sequential_range(3):
        for k in nl.sequential_range(2):
            buf[...] = nl.load(lhsT[k * 128:(k + 1) * 128, 0:64])
            b = nl.load(rhs[k * 128:(k + 1) * 128, :])
            acc += nisa.nc_matmul(buf, b)
            small += nisa.nc_matmul(buf[:, 0:32], b)
            p = nisa.nc_matmul(buf, b)
            acc += p
        nl.store(out[g], value=nl.copy(acc))          # reading the tile ends the group: the next overwrites
    nl.store(out[0, 0:32, :], value=nl.copy(small))
    return out


@nki.jit
def load_out_of_bounds(lhsT, rhs):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
    for k in nl.sequential_range(3):          # the third load of the same signature reads past the end
        a = nl.load(lhsT[k * 100:k * 100 + 128, 0:64])
        b = nl.load(rhs[0:128, 0:128])
        acc += nisa.nc_matmul(a, b)
    nl.store(out[0:64, :], value=nl.copy(acc[:, 0:64]))
    return out


@nki.jit
def mixed_dtypes(lhsT, rhs):
    out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
    a = nl.load(lhsT[0:128, 0:64])
    b = nl.load(rhs[0:128, 0:128])
    acc += nisa.nc_matmul(a, b)
    acc += nisa.nc_matmul(a, nl.load(rhs[0:128, 0:128], dtype=nl.bfloat16))     # fp32 with bf16: an error
    nl.store(out, value=nl.copy(acc))
    return out


def _inputs(rng, shape_l, shape_r, dtype):
    lhsT = rng.standard_normal(shape_l, dtype=np.float32).astype(dtype)
    rhs = rng.standard_normal(shape_r, dtype=np.float32).astype(dtype)
    return lhsT, rhs


@pytest.mark.parametrize("dtype", [np.float32, nl.bfloat16])
@pytest.mark.parametrize("shapes", [((384, 128), (384, 512)), ((200, 100), (200, 300))])
def test_tiled_matmul_gives_the_plain_path_values(rng, dtype, shapes):
    assert_same_outcome(*_twice(tiled, *_inputs(rng, *shapes, dtype)))


@pytest.mark.parametrize("dtype", [np.float32, nl.bfloat16])
def test_accumulation_groups_give_the_plain_path_values(rng, dtype):
    assert_same_outcome(*_twice(groups, *_inputs(rng, (256, 64), (256, 128), dtype)))


@pytest.mark.parametrize("kernel", [load_out_of_bounds, mixed_dtypes])
def test_planned_instructions_give_the_plain_path_errors(rng, kernel):
    lean, plain = _twice(kernel, *_inputs(rng, (256, 64), (128, 128), np.float32))
    assert isinstance(plain, Exception)
    assert_same_outcome(lean, plain)


def test_planned_instructions_are_the_ones_their_recipe_builds(rng, monkeypatch):
    """A planned instruction is built from its memo's template (`Instruction.maker`): on the loads, matmuls and
    element-wise ops of these kernels every field, the operand cache and the parameters kept for its events are
    what the keyword call, `operands()` and `params()` give; and one built for a claim by its destination
    (`maker`'s `claim`, `core.assign`) is, identically, the one built with that destination first."""
    from opennki._src import core
    from opennki.instructions.base import Instruction
    from tests.sim.test_lean_issue import legacy_elementwise

    compared = []
    maker = Instruction.maker

    def checked_maker(self, names):
        made = maker(self, names)
        if made is None:
            return None
        make, template, cls, positions, claim = made

        def make_checked(template, values):
            instr = make(template, values)
            fixed = {k: v for k, v in template.items() if k not in names and not k.startswith("_")}
            plain = type(self)(**dict(zip(names, values)), **fixed)
            cell = {"_usual"} if "_usual" in template else set()      # a run cell (`Instruction.usual_cells`)
            assert set(vars(instr)) == set(vars(plain)) | {"_operands", "_params"} | cell
            assert all(getattr(instr, f) is getattr(plain, f) for f in vars(plain)), instr
            assert [(r, id(v), k) for r, v, k in instr._operands] == [(r, id(v), k) for r, v, k in plain.operands()]
            assert instr._params == plain.params()
            compared.append(instr.opcode)
            return instr
        def claim_checked(template, dst, values):      # `make_checked` of the same values but `dst` first
            instr, plain = claim(template, dst, values), make_checked(template, (dst,) + values[1:])
            assert vars(instr).keys() == vars(plain).keys()
            assert all(v is vars(plain)[k] for k, v in vars(instr).items() if k != "_operands")
            assert [(r, id(v), k) for r, v, k in instr._operands] == [(r, id(v), k) for r, v, k in plain._operands]
            compared.append("claimed")
            return instr
        return make_checked, template, cls, positions, claim_checked if claim is not None else None
    monkeypatch.setattr(Instruction, "maker", checked_maker)
    core._PLANS.clear()
    tiled(*_inputs(rng, (384, 128), (384, 512), np.float32))
    legacy_elementwise(rand(rng, 128, 64), rand(rng, 128, 1), rng.integers(0, 1 << 20, size=(128, 64), dtype=np.int32))
    assert {"dma_copy", "nc_matmul", "tensor_scalar", "tensor_tensor", "activation", "claimed"} <= set(compared)


def test_an_operand_pattern_is_only_of_fields_holding_views():
    """An index tile of run-time indices, or a view in a tuple field, gives no pattern (`operands()` lists it
    under a role that is no field name); views in plain fields give theirs, in field order."""
    from opennki.instructions.base import REGISTRY
    from opennki.machine.memory import MemoryRegion
    from opennki.machine.tensor import DynamicTerm
    from tests.sim.test_fast_paths import _root

    a, b = _root(MemoryRegion.sbuf, (4, 8)), _root(MemoryRegion.sbuf, (4, 8))
    index = _root(MemoryRegion.sbuf, (4, 1))
    scalar = REGISTRY["tensor_scalar"](dst=a, data=b, op0="add", operand0=b.subscript((slice(None), slice(0, 1))))
    assert scalar.operand_pattern() == tuple((r, k) for r, _, k in scalar.operands())
    assert [r for r, _ in scalar.operand_pattern()] == ["dst", "data", "operand0"]
    assert REGISTRY["tensor_scalar"](dst=a, data=b, op0="add", operand0=1.0).operand_pattern()[1][0] == "data"
    gathered = b._derive(b.shape, b.amap, b.consts, (DynamicTerm(index, 0, (1, 0)),))
    assert REGISTRY["tensor_copy"](dst=a, src=gathered).operand_pattern() is None
    assert REGISTRY["dma_compute"](dst=a, srcs=(b, b), reduce_op="add").operand_pattern() is None


def test_parameters_kept_with_a_template_are_the_instructions_params(rng):
    """An instruction built from a plan's template carries its parameters for its events (`_params`); a copy
    with new parameter values (`replace`) carries the new ones; every event gets a dict of its own."""
    from opennki.instructions.base import REGISTRY
    from opennki.machine.memory import MemoryRegion
    from opennki.sim.program import event_params
    from tests.sim.test_fast_paths import _root

    a, b, c = (_root(MemoryRegion.sbuf, (4, 8)) for _ in range(3))
    p, s = _root(MemoryRegion.psum, (8, 8)), _root(MemoryRegion.sbuf, (4, 8))
    cases = [(REGISTRY["tensor_scalar"](dst=a, data=b, op0="add", operand0=1.5, reverse0=True),
              ("dst", "data", "operand0"), (c, a, 2.5), {"reverse0": False, "op1": "max"}),
             (REGISTRY["nc_matmul"](dst=p, stationary=s, moving=b, accumulate=False), ("dst", "stationary", "moving"),
              (p, b, s), {"accumulate": True, "tile_position": (32, 0)})]
    for first, names, values, changes in cases:
        make, template, *_ = first.maker(names)
        made = make(template, values)
        assert event_params(made) == made.params() == first.params()
        assert event_params(made) is not event_params(made)
        changed = made.replace(**changes)
        assert event_params(changed) == changed.params() != made.params()
        assert event_params(made) == first.params()                    # the original keeps its own


@nki.jit
def flagged(lhsT, rhs):
    """Matmuls of one call site with other flags and a constant mask (other keys of `_MATMUL_PLANS`), a
    transpose, and at the end a contraction that does not match (an error on the last line)."""
    out = nl.ndarray((3, 64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
    for i in nl.affine_range(3):
        a = nl.load(lhsT[i * 128:(i + 1) * 128, 0:64])
        b = nl.load(rhs[i * 128:(i + 1) * 128, :])
        acc += nisa.nc_matmul(a, b, mask=i * 128 >= 0)
        acc += nisa.nc_matmul(a, b, is_stationary_onezero=i >= 1)
        t = nisa.nc_matmul(b[0:128, 0:64], a, is_transpose=False)
        nl.store(out[i], value=nl.copy(acc))
        nl.store(out[i, :, 0:64], value=nl.copy(t))
    acc += nisa.nc_matmul(nl.load(lhsT[0:64, 0:64]), nl.load(rhs[0:128, :]))
    return out


_PLAN_CASES = ("tiled_fp32", "tiled_bf16_odd", "groups_bf16", "flagged", "load_out_of_bounds", "mixed_dtypes")


def _plan_case(rng, case):
    """(kernel, inputs) of one of `_PLAN_CASES`: tiles of fp32 and of odd bf16 shapes, groups, and three errors."""
    return {
        "tiled_fp32": (tiled, _inputs(rng, (384, 128), (384, 512), np.float32)),
        "tiled_bf16_odd": (tiled, _inputs(rng, (200, 100), (200, 300), nl.bfloat16)),
        "groups_bf16": (groups, _inputs(rng, (256, 64), (256, 128), nl.bfloat16)),
        "flagged": (flagged, _inputs(rng, (384, 64), (384, 128), np.float32)),
        "load_out_of_bounds": (load_out_of_bounds, _inputs(rng, (256, 64), (128, 128), np.float32)),
        "mixed_dtypes": (mixed_dtypes, _inputs(rng, (256, 64), (128, 128), np.float32)),
    }[case]


@pytest.mark.parametrize("case", _PLAN_CASES)
def test_matmul_plans_give_the_plain_path_values_errors_and_events(rng, case):
    """`legacy.isa.MATMUL_PLANS`: a usual `nc_matmul` takes its result tile's shape and dtype, its plan key and
    recipe from one memo of its operands' signatures and flags: outputs or errors (with their kernel lines), and
    every event field by field, are those of `_MATMUL_RESULTS` and `core.defer_planned`."""
    import opennki.legacy.isa as isa_module
    from tests.sim.outcomes import fast_and_plain

    kernel, args = _plan_case(rng, case)

    def forget():
        isa_module._MATMUL_PLANS.clear()
        isa_module._MATMUL_RESULTS.clear()

    outcomes, events = fast_and_plain(kernel.func, args, isa_module, "MATMUL_PLANS", setup=forget)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]
    if case in ("flagged", "load_out_of_bounds", "mixed_dtypes"):
        assert isinstance(outcomes[1], Exception)
    if case == "tiled_fp32":
        np.testing.assert_allclose(outcomes[0], args[0].T.astype(np.float64) @ args[1], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("case", _PLAN_CASES)
def test_load_plans_give_the_plain_path_values_errors_and_events(rng, monkeypatch, case):
    """`core.LOAD_PLANS`: a usual `nl.load` takes its result tile's shape and `defer_planned`'s memo key from one
    memo of its source's signature: outputs or errors (with their kernel lines), and every event field by field,
    are those of `defer_planned`, which the plan's loads skip (loads into a declared tile, with `dtype=`, past the
    end of their tensor, of odd tile shapes)."""
    from opennki._src import core
    from tests.sim.outcomes import fast_and_plain

    kernel, args = _plan_case(rng, case)
    calls = []
    counted = case in ("tiled_fp32", "groups_bf16")     # signatures loaded 3+ times, and no error: a wrapper's
    if counted:                                         # frame would change what an error's traceback holds
        defer_planned = core.defer_planned
        monkeypatch.setattr(core, "defer_planned",
                            lambda *a, **k: calls.append(core.LOAD_PLANS) or defer_planned(*a, **k))
    outcomes, events = fast_and_plain(kernel.func, args, core, "LOAD_PLANS", setup=core._LOAD_PLANS.clear)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]
    if case in ("flagged", "load_out_of_bounds", "mixed_dtypes"):
        assert isinstance(outcomes[1], Exception)
    if counted:                 # the plans' loads skipped `defer_planned`
        assert 0 < calls.count(True) < calls.count(False)
    if case == "tiled_fp32":
        np.testing.assert_allclose(outcomes[0], args[0].T.astype(np.float64) @ args[1], rtol=1e-4, atol=1e-3)

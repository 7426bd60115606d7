"""The simulator's fast paths give what the plain computations give: cached view geometry and extents,
`Instruction.replace`, and the whole-tile branches of PSUM accumulation (flags kept as one value per tile), the
in-place fp32 accumulate and late poisoning."""

import dataclasses
import enum

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
from opennki.events import MemoryKind
from opennki.hw import get_target
from opennki.instructions.dma import DmaCopy
from opennki.instructions.tensor_engine import NcMatmul
from opennki.instructions.vector import TensorScalar
from opennki.machine.dtypes import bfloat16, float32
from opennki.machine.machine import Machine
from opennki.machine.memory import Allocator, Memory, MemoryRegion
from opennki.machine.tensor import TensorView
from tests.isa.helpers import rand, run


def _root(region, shape, dtype=float32):
    hw = get_target("trn2")
    mem = Memory(hw, Allocator(MemoryKind.HBM, 1 << 30, 64, hw.name), precise=True, shape_only=False, program=())
    st = mem.new_storage(region, dtype, shape, "t", None)
    st.array[:] = np.arange(st.array.size) % 251
    return TensorView.root(st)


def _random_key(rng, shape):
    key = []
    for n in shape:
        if rng.random() < 0.2:
            key.append(int(rng.integers(0, n)))
        else:
            start = int(rng.integers(0, n))
            key.append(slice(start, int(rng.integers(start + 1, n + 1)), int(rng.integers(1, 4))))
    return tuple(key)


@pytest.mark.parametrize("region, shape", [(MemoryRegion.sbuf, (16, 6, 10)), (MemoryRegion.shared_hbm, (9, 12)),
                                           (MemoryRegion.psum, (8, 40))])
def test_cached_geometry_and_extent_match_the_elements_touched(rng, region, shape):
    root = _root(region, shape, bfloat16 if region is MemoryRegion.sbuf else float32)
    full = root.storage.array.reshape(shape)
    row = int(np.prod(shape[1:])) if root.is_on_chip else root.size
    it = root.itemsize
    for _ in range(40):
        key = _random_key(rng, shape)
        view = root.subscript(key)
        # strides / offset address exactly NumPy's elements
        np.testing.assert_array_equal(view.np_view().reshape(-1), full[key].reshape(-1))
        offs = view.flat_offsets().reshape(-1)
        # the rectangle: partitions and the byte range within a partition (on chip) or the tensor (HBM)
        p0, pc, b0, b1 = view.extent()
        if root.is_on_chip:
            parts, within = offs // row, offs % row
            assert (p0, pc) == (parts.min(), parts.max() - parts.min() + 1)
        else:
            within = offs
            assert (p0, pc) == (0, 1)
        assert (b0, b1) == (within.min() * it, (within.max() + 1) * it)
        assert view.in_bounds()
        assert view.free_size == (int(np.prod(view.shape[1:])) if root.is_on_chip else view.size)


def test_a_view_of_all_of_a_tensor_shares_its_values_and_drops_the_operand_mask(rng):
    root = _root(MemoryRegion.sbuf, (8, 4, 6))
    part = root.subscript((slice(2, 7), 1, slice(0, 6, 2)))
    part.extent()
    for key in (Ellipsis, (slice(None), slice(None))):
        whole = part.subscript(key)
        assert whole.same_view(part) and whole is not part
        assert (whole.strides, whole.offset, whole.extent(), whole.free_size) == \
               (part.strides, part.offset, part.extent(), part.free_size)
        np.testing.assert_array_equal(whole.np_view(), part.np_view())
    too_far = root.subscript((slice(4, 12), slice(None), slice(None)))   # out of bounds: checked when used
    assert not too_far.subscript(Ellipsis).in_bounds()


def test_instruction_replace_is_dataclasses_replace(rng):
    a, b = _root(MemoryRegion.sbuf, (4, 8)), _root(MemoryRegion.sbuf, (4, 8))
    s, m, p = _root(MemoryRegion.sbuf, (4, 3)), _root(MemoryRegion.sbuf, (4, 5)), _root(MemoryRegion.psum, (3, 5))
    q = _root(MemoryRegion.psum, (3, 5))
    hbm = _root(MemoryRegion.shared_hbm, (4, 8))
    cases = [(TensorScalar(dst=a, data=b, op0="add", operand0=1.5, reverse0=True), {"dst": b}),
             (TensorScalar(dst=a, data=b, op0="add", operand0=1.5, mask=True), {"mask": None, "operand0": 2}),
             (NcMatmul(dst=p, stationary=s, moving=m, accumulate=False, tile_size=()), {"dst": q, "accumulate": True}),
             (DmaCopy(dst=a, src=b, name="copy"), {"src": a, "dst": b}),
             (DmaCopy(dst=a, src=b), {"src": hbm, "name": "x"}),
             (DmaCopy(dst=a, src=b), {"src": object()})]          # a value no signature can key
    for instr, changes in cases:
        instr.operands()                                       # fill the operand cache
        instr.signature()                                      # and the signature: the copy's is patched
        fast, slow = instr.replace(**changes), dataclasses.replace(instr, **changes)
        assert fast.signature() == slow.signature()
        assert type(fast) is type(slow)
        for f in dataclasses.fields(slow):
            assert getattr(fast, f.name) is getattr(slow, f.name), f.name
        assert [(r, v, k) for r, v, k in fast.operands()] == [(r, v, k) for r, v, k in slow.operands()]
        assert fast.params() == slow.params()
        assert all(getattr(instr, f) is not v for f, v in changes.items())   # the original is unchanged
    with pytest.raises(TypeError, match="no field"):
        cases[0][0].replace(dest=a)


def test_equal_params_keys_give_equal_params():
    """`Instruction.params_key` (what events' parameters are kept by, `program.event_params`): equal keys only
    for equal `params()`, whether the key is the signature or the parameter fields alone. Values equal in
    Python but not in their plain form (1, 1.0 and True; (1,) and (1.0,); an IntEnum member and its int)
    key apart (and an empty tuple from a tuple of one); a value no key holds gives None."""
    class Mode(enum.IntEnum):
        ONE = 1

    a, b = _root(MemoryRegion.sbuf, (4, 8)), _root(MemoryRegion.sbuf, (4, 8))
    s, m, p = _root(MemoryRegion.sbuf, (4, 3)), _root(MemoryRegion.sbuf, (4, 5)), _root(MemoryRegion.psum, (3, 5))
    made = [TensorScalar(dst=a, data=b, op0="add", operand0=1.0, reverse0=v)
            for v in (True, 1, 1.0, np.float32(1), Mode.ONE, False)]
    made += [TensorScalar(dst=b, data=a, op0="add", operand0=2.0), TensorScalar(dst=a, data=b, op0="max", operand0=1.0)]
    made += [NcMatmul(dst=p, stationary=s, moving=m, tile_position=v) for v in ((32, 0), (32.0, 0), (32, 0.0))]
    made += [NcMatmul(dst=p, stationary=s, moving=m, tile_position=(32, 0), tile_size=((32, 32),))]
    made += [NcMatmul(dst=p, stationary=s, moving=m), NcMatmul(dst=p, stationary=s, moving=m, tile_size=((),))]
    made += [DmaCopy(dst=a, src=b), DmaCopy(dst=b, src=a)]
    signed = [dataclasses.replace(i) for i in made]
    for i in signed:
        assert i.signature() is not None and i.params_key() is i.signature()    # the signature, once made
    keys = [i.params_key() for i in made] + [i.params_key() for i in signed]
    assert all(k is not None and hash(k) is not None for k in keys)
    params = [repr(i.params()) for i in made + signed]     # repr: 32 and 32.0 differ, in tuples too
    for k1, p1 in zip(keys, params):
        for k2, p2 in zip(keys, params):
            if k1 == k2:
                assert p1 == p2
    # keyed by the parameter fields alone, the instructions differing only in operands share a key
    assert len(set(params[:len(made)])) == 13 and len(set(keys[:len(made)])) == 14    # np.float32(1): '1.0'
    assert made[-4].params_key()[1] != "params"     # empty tuples key themselves (the parameter fields' values)
    assert DmaCopy(dst=a, src=b, dge_mode=object()).params_key() is None


def test_accumulate_none_with_a_partly_closed_group_mixes_overwrite_and_accumulate(rng):
    s, m = rand(rng, 64, 32), rand(rng, 64, 48)

    def kernel(s, m):
        out = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.shared_hbm)
        st = nl2.ndarray(s.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        mv = nl2.ndarray(m.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=st, src=s)
        nisa2.dma_copy(dst=mv, src=m)
        p = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.psum)
        r = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.nc_matmul(dst=p, stationary=st, moving=mv)              # the group's first write
        nisa2.tensor_copy(dst=r[:, 0:20], src=p[:, 0:20])             # a read closes the group for columns < 20
        nisa2.nc_matmul(dst=p, stationary=st, moving=mv)              # overwrites columns < 20, accumulates the rest
        nisa2.tensor_copy(dst=r, src=p)
        nisa2.dma_copy(dst=out, src=r)
        return out

    got = run(kernel, s, m)
    ref = s.astype(np.float64).T @ m.astype(np.float64)
    np.testing.assert_allclose(got[:, :20], ref[:, :20], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[:, 20:], 2 * ref[:, 20:], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [float32, bfloat16])
def test_in_place_accumulate_stores_what_read_add_write_stores(rng, dtype):
    hw = get_target("trn2")
    for key in [Ellipsis, (slice(0, 16), slice(8, 40))]:       # the whole tile, and a strided corner of it
        fast, plain = (_root(MemoryRegion.psum, (32, 64), dtype) for _ in range(2))
        init = rng.standard_normal((32, 64)).astype(np.float32)
        for t in (fast, plain):
            Machine(hw, None, precise=True).write(t, init)
        fast, plain = fast.subscript(key), plain.subscript(key)
        values = rng.standard_normal(fast.shape).astype(np.float32)
        m = Machine(hw, None, precise=True)
        m.accumulate(fast, values)
        m.write(plain, m.read_f32(plain) + values)                # the plain path: read, add in fp32, write
        np.testing.assert_array_equal(m.read(fast), m.read(plain))
        assert fast.storage.written


def test_poison_is_made_when_first_needed_and_never_for_a_tile_written_whole(rng):
    hw = get_target("trn2")
    mem = Memory(hw, Allocator(MemoryKind.HBM, 1 << 30, 64, hw.name), precise=True, shape_only=False, program=())
    m = Machine(hw, mem, precise=True)
    whole, part, untouched = (TensorView.root(mem.new_storage(MemoryRegion.sbuf, float32, (16, 8), "t", None))
                              for _ in range(3))
    values = rand(rng, 16, 8)
    m.write(whole, values)
    m.write(part.subscript((slice(0, 8), slice(None))), values[:8])
    np.testing.assert_array_equal(m.read(whole), values)
    got = m.read(part)
    np.testing.assert_array_equal(got[:8], values[:8])
    assert np.isnan(got[8:]).all()                                 # the rest is still poison
    assert untouched.storage._array is None                        # nothing made for a tile never touched
    assert np.isnan(m.read(untouched)).all()


def test_events_made_positionally_are_the_records_the_dataclass_makes():
    from opennki.events import AccessKind, InstructionExecuted, Operand, Region, positional_maker
    region_args = (MemoryKind.SBUF, 7, 0, 128, 64, 1088)
    fast, plain = positional_maker(Region)(*region_args), Region(*region_args)
    assert fast == plain and hash(fast) == hash(plain) and fast.size_bytes == plain.size_bytes
    operand_args = ("dst", AccessKind.WRITE, plain, (128, 256), "float32", 4, 128, 256, (256, 1), 0, "t",
                    (128, 256), None, False, 1, 2)
    made, init = positional_maker(Operand)(*operand_args), Operand(*operand_args)
    assert dataclasses.asdict(made) == dataclasses.asdict(init)
    kept = {"engine": None}
    event_args = (3, (0,), 0, "tensor_copy", None, (made,), dict(kept), None, None, None, True, kept)
    assert dataclasses.asdict(positional_maker(InstructionExecuted)(*event_args)) == \
        dataclasses.asdict(InstructionExecuted(*event_args))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.role = "src"
    with pytest.raises(TypeError, match="missing 1 required positional argument: .form."):
        positional_maker(Operand)(*operand_args[:-1])


def _views_everywhere(a, b):
    """Operands of many view layouts: HBM roots and slices (steps, ints), SBUF and PSUM tiles, partition ranges
    that do not start at 0, block tiles of a block tensor, and the same layouts on new storages each iteration."""
    import opennki.legacy.isa as nisa
    import opennki.legacy.language as nl
    out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    blk = nl.ndarray((2, nl.par_dim(128), 96), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        blk[i] = nl.load(a[i * 128:(i + 1) * 128, 0:96])
    acc = nl.zeros((64, 96), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        s = nl.load(b[k * 64:(k + 1) * 64, 0:128:2])
        m = nl.load(a[k * 64:(k + 1) * 64, 0:96])
        acc += nisa.nc_matmul(s, m)
        part = nl.load(a[k:k + 1, 0:96])
        blk[k, 32:96, 8:40] = nl.add(blk[1 - k, 0:64, 0:32], part[0:1, 0:32])
    t = nl.copy(acc)
    nl.store(out[0:64, :], value=t)
    nl.store(out[64:128, 0:96:1], value=blk[0, 64:128, :])
    return out


def test_operand_records_from_layout_templates_are_the_plain_records(rng, monkeypatch):
    """`Program._event` fills records in from their view layout's template (`program.RECORD_TEMPLATES`); the
    plain path makes each with `operand_record`: every event, field by field, is the same (storage ids, which
    count up across launches, by order of first appearance), and so are the outputs."""
    import opennki.legacy as nki
    from opennki.kernels.base import run_kernel
    from opennki.listeners import Recorder
    from opennki.machine.tensor import forget_layouts
    from opennki.sim import program
    from tests.sim.outcomes import assert_same_outcome, by_first_appearance, event_fields

    kernel = nki.jit(_views_everywhere)
    args = (rand(rng, 256, 96), rand(rng, 128, 256))
    outcomes, events = [], []
    for templates in (True, False):
        monkeypatch.setattr(program, "RECORD_TEMPLATES", templates)
        forget_layouts()                # the templates live on the layouts: made afresh in each run
        rec = Recorder()
        outcomes.append(run_kernel(kernel.func, args, listeners=[rec]))
        sid = by_first_appearance()
        events.append([event_fields(e, sid, field_order=True) for e in rec.events])
    assert_same_outcome(*outcomes)
    operands = [o for e in events[0] if e[0] == "InstructionExecuted" for o in e[6]]
    assert len(operands) > 30 and len({o[3][3:7] for o in operands}) > 10     # many regions
    assert events[0] == events[1]


def _records_again(a, b):
    """The same operand records again and again (an HBM view loaded in each round, a PSUM tile accumulated into),
    a tile written then accumulated (the same role, another access: a new record), one view as two operands of an
    instruction (another role), and a tile moved between two uses: tiles of another layout fill PSUM, so it is
    spilled, and reloaded elsewhere."""
    import opennki.legacy.isa as nisa
    import opennki.legacy.language as nl
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    square = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
    others = []
    for _ in range(2):
        x = nl.load(a[0:128, 0:128])
        y = nl.load(b[0:128, 0:512])
        acc[...] = nl.copy(y)
        acc += nisa.nc_matmul(x, y)
        acc += nisa.nc_matmul(x, y)
        square += nisa.nc_matmul(x, x)
        for _ in range(8):
            others.append(nl.zeros((128, 384), nl.float32, buffer=nl.psum))
        acc += nisa.nc_matmul(x, y)
    total = nl.add(nl.copy(acc[:, 0:384]), others[0])
    nl.store(out[:, 0:384], value=total)
    nl.store(out[:, 384:512], value=nl.copy(square))
    return out


def test_operand_records_kept_on_their_layout_are_the_plain_records(rng, monkeypatch):
    """`Program._event` gives an operand the record it made last of the same layout, storage id and placement
    (`_Layout.last`), for the same role and access (else a new record, sharing the region): every event, field by
    field, is the one the plain path (`operand_record`) makes, though spills and reloads move the tiles between
    their uses, and records are shared."""
    import opennki.legacy as nki
    from opennki.kernels.base import run_kernel
    from opennki.listeners import Recorder
    from opennki.machine.tensor import forget_layouts
    from opennki.sim import program
    from tests.sim.outcomes import assert_same_outcome, by_first_appearance, event_fields

    kernel = nki.jit(_records_again)
    args = (rand(rng, 128, 128), rand(rng, 128, 512))
    outcomes, events, records = [], [], []
    for templates in (True, False):
        monkeypatch.setattr(program, "RECORD_TEMPLATES", templates)
        forget_layouts()
        rec = Recorder()
        outcomes.append(run_kernel(kernel.func, args, listeners=[rec]))
        sid = by_first_appearance()
        events.append([event_fields(e, sid, field_order=True) for e in rec.events])
        records.append([o for e in rec.events if type(e).__name__ == "InstructionExecuted" for o in e.operands])
    assert_same_outcome(*outcomes)
    assert any(e[4] == "psum_spill" for e in events[1] if e[0] == "InstructionExecuted")
    assert events[0] == events[1]
    shared = len(records[0]) - len({id(o) for o in records[0]})
    assert shared >= 10 and len({id(o) for o in records[1]}) == len(records[1])


def _engines(a, b):
    """Instructions on other engines than their class's default: a transpose on the Vector Engine, copies on
    GpSimd, and matmuls, loads and stores on theirs."""
    import opennki.legacy.isa as nisa
    import opennki.legacy.language as nl
    out = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    t = nisa.nc_transpose(x, engine=nisa.vector_engine)
    c = nisa.tensor_copy(t, engine=nisa.gpsimd_engine)
    acc = nl.zeros((32, 32), nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(c, y)
    nl.store(out, value=nl.copy(acc))
    return out


def test_event_engines_and_params_are_the_instructions_own(rng, monkeypatch):
    """`Program._event` reads an event's engine from the instruction's class where `executor` is the base rule
    without `chooses_engine` (`Instruction._engine`), and copies a template's params inline; the plain path
    (`RECORD_TEMPLATES = False`) asks `executor` and `event_params`: the same events, field by field, with
    instructions whose engine is not their class's default among them."""
    from opennki.events import Engine
    from opennki.sim import program
    from tests.sim.outcomes import assert_same_outcome, fast_and_plain

    outcomes, events = fast_and_plain(_engines, (rand(rng, 32, 32), rand(rng, 32, 32)), program,
                                      "RECORD_TEMPLATES")
    assert_same_outcome(*outcomes)
    engines = {(e[4], e[5]) for e in events[1] if e[0] == "InstructionExecuted"}
    assert engines == {("dma_copy", Engine.DMA), ("nc_transpose", Engine.VECTOR), ("tensor_copy", Engine.GPSIMD),
                       ("memset", Engine.VECTOR), ("nc_matmul", Engine.TENSOR), ("tensor_copy", Engine.VECTOR)}
    assert events[0] == events[1]


def test_events_filled_in_from_templates_are_the_records_the_dataclasses_make(rng):
    """Instruction events, their operand records and regions, and allocation events, which the issue path
    fills in from templates (`Program._event`, `_record_template`, `Program.allocated`), hold what the
    dataclasses' own constructors make of their fields, in the same order."""
    import opennki.legacy as nki
    from opennki.events import InstructionExecuted, TensorAllocated
    from opennki.kernels.base import run_kernel
    from opennki.listeners import Recorder

    rec = Recorder()
    run_kernel(nki.jit(_views_everywhere).func, (rand(rng, 256, 96), rand(rng, 128, 256)), listeners=[rec])
    events = [e for e in rec.events if type(e) is InstructionExecuted]
    allocated = [e for e in rec.events if type(e) is TensorAllocated]
    assert len(events) > 10 and len(allocated) > 5
    for made in allocated:
        assert list(vars(made).items()) == list(vars(dataclasses.replace(made)).items()), made
    for event in events:
        for made in [event, *event.operands, *(o.region for o in event.operands)]:
            again = dataclasses.replace(made)
            assert list(vars(made).items()) == list(vars(again).items()), made



def test_instructions_built_by_their_init_are_the_dataclass_records():
    from opennki.instructions.base import REGISTRY
    a, b = _root(MemoryRegion.sbuf, (4, 8)), _root(MemoryRegion.sbuf, (4, 8))
    given = dict(dst=a, data=b, op0="add", operand0=1.5)
    fast = TensorScalar(**given)
    for f in dataclasses.fields(TensorScalar):     # every field: as given, else its declared default
        assert getattr(fast, f.name) is given.get(f.name, f.default), f.name
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(TensorScalar)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.op0 = "multiply"
    with pytest.raises(TypeError, match=r"missing required field\(s\) \['data'\]"):
        TensorScalar(dst=a, op0="add")
    with pytest.raises(TypeError, match=r"unexpected field\(s\) \['dest'\]"):
        TensorScalar(dst=a, data=b, dest=a)
    assert all(cls.__init__.__qualname__.endswith(".__init__") for cls in REGISTRY.values())


def test_without_a_listener_no_event_is_built_and_none_is_kept(rng, monkeypatch):
    import gc

    from opennki.events import InstructionExecuted
    from opennki.kernel import run_kernel
    from opennki.listeners import Recorder
    from opennki.sim.program import Program

    def kernel(a):
        out = nl2.ndarray(a.shape, dtype=a.dtype, buffer=nl2.shared_hbm)
        t = nl2.ndarray(a.shape, dtype=a.dtype, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=t, src=a)
        for _ in range(5):
            nisa2.tensor_scalar(dst=t, data=t, op0=nl2.multiply, operand0=1.5)
        nisa2.dma_copy(dst=out, src=t)
        return out

    built = []
    plain_event = Program._event
    monkeypatch.setattr(Program, "_event", lambda self, *a: built.append(1) or plain_event(self, *a))
    a = rand(rng, 16, 8)
    expected = a.copy()
    for _ in range(5):
        expected = expected * np.float32(1.5)
    def events_alive():
        gc.collect()
        return {id(o): o for o in gc.get_objects() if isinstance(o, InstructionExecuted)}

    before = events_alive()                       # other tests' recorders may keep theirs (held here, so
    np.testing.assert_array_equal(run_kernel(kernel, (a,)), expected)     # their ids are not reused)
    # no event of this run is alive (earlier tests' events may be freed meanwhile: only new ones count)
    assert not built and not set(events_alive()) - set(before)
    del before
    recorder = Recorder()
    run_kernel(kernel, (a,), listeners=(recorder,))
    assert len(built) == 7 == len(recorder.of_type(InstructionExecuted))     # a listener gets every one


def _lean_path_kernel(a, w, b):
    """Legacy kernel over the lean issue path: immediates of tensor_scalar and activation, a constant
    `mask=True` (as causal kernels compute it), retargeted results, and accumulating matmuls."""
    import opennki.legacy.isa as nisa
    import opennki.legacy.language as nl

    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    full = 3 * 128 >= 2 * 128                   # a Python bool, True
    x = nl.load(a)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    t[...] = nl.add(x, 0.1)
    t[...] = nl.subtract(1.7, t, mask=full)
    t[...] = nl.multiply(t, 3)
    t[...] = nl.maximum(t, -0.5, mask=full)
    t[...] = nl.divide(t, 1.3)
    g = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    g[...] = nl.greater(t, 0.25, dtype=nl.float32)
    u = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    u[...] = nisa.activation(op=nl.exp, data=x, scale=0.5, bias=0.25, mask=full, dtype=nl.bfloat16)
    u[...] = nisa.tensor_scalar(u, np.multiply, 1.5, op1=np.add, operand1=-0.75, mask=full)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        lhs = nl.load(w[k * 128:(k + 1) * 128, :])
        rhs = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(lhs, rhs, mask=full)
        acc += nisa.nc_matmul(lhs, rhs, mask=k * 128 >= 128)    # k = 0: False, masked off (causal style)
    s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    s[...] = nl.copy(acc, mask=full)
    s[...] = nl.add(s, g, mask=full)
    nl.store(out, value=s, mask=full)
    nl.store(out2, value=u)
    out3 = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out3, value=t)
    return out, out2, out3


def test_the_lean_issue_path_gives_the_plain_path_values(rng, monkeypatch):
    import opennki.legacy as nki
    from opennki.instructions import base, scalar, vector
    from opennki.instructions.base import Instruction

    a = rand(rng, 128, 64)
    w, b = rand(rng, 256, 128), rand(rng, 256, 64)
    lean = nki.jit(_lean_path_kernel)(a, w, b)
    # the plain path: immediates as [P, 1] columns, the constant mask kept as an element mask
    for module in (vector, scalar):
        monkeypatch.setattr(module, "operand_f32", base.column)
    monkeypatch.setattr(Instruction, "runnable", lambda self: self)
    monkeypatch.setattr(NcMatmul, "_masked_off", lambda self: False)
    plain = nki.jit(_lean_path_kernel)(a, w, b)
    for got, want in zip(lean, plain):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    t = np.maximum((np.float32(1.7) - (a + np.float32(0.1))) * np.float32(3), np.float32(-0.5)) / np.float32(1.3)
    np.testing.assert_array_equal(lean[2], t)
    product = w.T.astype(np.float64) @ b + w[128:].T.astype(np.float64) @ b[128:]     # the k = 1 one twice
    np.testing.assert_allclose(lean[0], product + (t > 0.25), rtol=1e-4, atol=1e-3)
    u = (np.exp(a.astype(np.float64) * 0.5 + 0.25) * 1.5 - 0.75)
    np.testing.assert_allclose(lean[1].astype(np.float64), u, rtol=2e-2, atol=2e-2)


def test_a_constant_true_mask_runs_unmasked_and_others_keep_their_mask():
    view = _root(MemoryRegion.sbuf, (4, 8))
    for mask in (True, np.bool_(True)):
        instr = TensorScalar(dst=view, data=view, op0="add", operand0=1.0, mask=mask)
        instr.operands()
        instr.signature()
        run_as = instr.runnable()
        assert run_as is not instr and run_as.mask is None and run_as.operands() == instr.operands()
        assert instr.mask is mask                 # the event and the checks still see the kernel's mask
        replaced = instr.replace(mask=None)       # what runnable() makes without replace's general steps
        fields = {k for k in vars(replaced) if k != "_signature"}
        assert fields == set(vars(run_as)) and all(getattr(run_as, k) is getattr(replaced, k) for k in fields)
    for mask in (None, False, np.bool_(False), np.ones((4, 8), bool)):
        instr = TensorScalar(dst=view, data=view, op0="add", operand0=1.0, mask=mask)
        assert instr.runnable() is instr


def test_bfloat16_widening_is_the_cast_for_every_bit_pattern():
    import ml_dtypes

    from opennki.machine.dtypes import to_float32

    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    for stored in (every, every.reshape(256, 256)[3::5, 1::2], every[7:8].reshape(())):
        wide = to_float32(stored, bfloat16)
        assert wide.dtype == np.float32 and wide.shape == stored.shape
        np.testing.assert_array_equal(wide.view(np.uint32), stored.astype(np.float32).view(np.uint32))


def test_the_allocator_finds_the_first_fit_the_scan_finds(rng):
    from opennki.errors import AllocationError
    from opennki.machine.memory import Allocator

    for bank in (0, 2048):
        alloc = Allocator(MemoryKind.PSUM if bank else MemoryKind.SBUF, 16384, 64, "trn2", bank_bytes=bank)
        starts = []
        for _ in range(400):
            if starts and rng.random() < 0.45:
                alloc.free(starts.pop(int(rng.integers(len(starts)))))
            else:
                size = int(rng.integers(1, 3000))
                at = int(rng.integers(0, 16384))
                sized = -(-size // 64) * 64
                spans = [(a, b) for a, (b, _) in alloc.live.items()]
                assert alloc._find(at, sized) == alloc._find(at, sized, spans)   # bisection == the scan
                try:
                    starts.append(alloc.allocate(size, "t"))
                except AllocationError:
                    assert alloc._find(0, sized, spans) is None
            assert alloc._starts == sorted(alloc.live)


def _psum_group_kernel(s, m, steps):
    """A random walk over one PSUM tile's accumulation-group states: matmuls (accumulate=None) into all or part
    of it, copies out of all or part of it (which close the group there) and memsets, each step's tile copied
    out (so every intermediate value is compared)."""
    out = nl2.ndarray((len(steps), 32, 48), dtype=nl2.float32, buffer=nl2.shared_hbm)
    st = nl2.ndarray(s.shape, dtype=nl2.float32, buffer=nl2.sbuf)
    mv = nl2.ndarray(m.shape, dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=st, src=s)
    nisa2.dma_copy(dst=mv, src=m)
    p = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.psum)
    nisa2.memset(dst=p, value=0.0)
    r = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.sbuf)
    for i, (kind, lo, hi) in enumerate(steps):
        if kind == "matmul":
            nisa2.nc_matmul(dst=p, stationary=st, moving=mv)
        elif kind == "matmul_part":
            nisa2.nc_matmul(dst=p[:, lo:hi], stationary=st, moving=mv[:, lo:hi])
        elif kind == "copy_part":
            nisa2.tensor_copy(dst=r[:, lo:hi], src=p[:, lo:hi])
        elif kind == "memset_part":
            nisa2.memset(dst=p[:, lo:hi], value=1.5)
        elif kind == "memset":
            nisa2.memset(dst=p, value=0.5)
        else:
            nisa2.tensor_copy(dst=r, src=p)
        nisa2.dma_copy(dst=out[i], src=r)
    return out


def test_psum_group_flags_kept_as_one_value_give_the_per_element_flags(rng, monkeypatch):
    """A PSUM tile's "unwritten" and "last written by a matmul" flags are one value while whole-tile accesses
    keep them alike; forcing per-element arrays everywhere (no view counts as covering its tile) gives the
    same values at every step."""
    s, m = rand(rng, 64, 32), rand(rng, 64, 48)
    kinds = ["matmul", "matmul", "matmul_part", "copy", "copy_part", "memset", "memset_part"]
    for _ in range(4):
        steps = []
        for _ in range(14):
            lo = int(rng.integers(0, 40))
            steps.append((kinds[int(rng.integers(len(kinds)))], lo, int(rng.integers(lo + 1, 49))))
        fast = run(_psum_group_kernel, s, m, steps)
        with monkeypatch.context() as patch:
            patch.setattr(TensorView, "covers_all", lambda self: False)
            plain = run(_psum_group_kernel, s, m, steps)
        np.testing.assert_array_equal(fast.view(np.uint32), plain.view(np.uint32))


def test_group_ends_skipped_until_a_matmul_ran_give_the_plain_path_values_and_events(rng):
    """`program.SKIP_IDLE_GROUP_ENDS`: until a Tensor Engine instruction has run, no non-matmul instruction looks
    for accumulation groups to end. Random walks over a PSUM tile's group states, some starting with copies and
    memsets before the first matmul, give the plain path's values and events (with a listener, field by field);
    a fixed walk gives NumPy's products: a copy ends the group, so the next matmul overwrites and the one after
    accumulates."""
    from opennki.sim import program
    from tests.sim.outcomes import assert_same_outcome, fast_and_plain

    s, m = rand(rng, 64, 32), rand(rng, 64, 48)
    kinds = ["matmul", "matmul_part", "copy", "copy_part", "memset", "memset_part"]
    walks = [[("copy", 0, 48), ("matmul", 0, 48), ("copy", 0, 48), ("matmul", 0, 48), ("matmul", 0, 48),
              ("copy", 0, 48)]]
    for _ in range(4):
        walk = [(kinds[int(rng.integers(2, len(kinds)))], 0, 48) for _ in range(int(rng.integers(1, 4)))]
        for _ in range(10):
            lo = int(rng.integers(0, 40))
            walk.append((kinds[int(rng.integers(len(kinds)))], lo, int(rng.integers(lo + 1, 49))))
        walks.append(walk)
    first = None
    for walk in walks:
        outcomes, events = fast_and_plain(_psum_group_kernel, (s, m, walk), program, "SKIP_IDLE_GROUP_ENDS",
                                          target="trn3")
        assert_same_outcome(*outcomes)
        assert len(events[0]) > 10 and events[0] == events[1]
        first = outcomes[0] if first is None else first
    product = s.T @ m
    np.testing.assert_allclose(first, np.stack([0 * product, 0 * product, product, product, product, 2 * product]),
                               rtol=1e-5, atol=1e-5)


def test_a_legacy_psum_group_starts_where_nothing_was_written_with_flags_as_one_value(rng, monkeypatch):
    import opennki.legacy as nki
    import opennki.legacy.isa as nisa
    import opennki.legacy.language as nl

    def kernel(w, b):
        out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)     # never written: the first += overwrites
        for k in nl.affine_range(2):
            acc += nisa.nc_matmul(nl.load(w[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
        nl.store(out[0], value=nl.copy(acc))
        part = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        part[:, 0:16] = nl.copy(nl.load(b[0:128, 0:16]))                  # partly written: += accumulates
        part += nisa.nc_matmul(nl.load(w[0:128, :]), nl.load(b[0:128, :]))
        nl.store(out[1], value=nl.copy(part, mask=None))
        acc += nisa.nc_matmul(nl.load(w[0:128, :]), nl.load(b[0:128, :]))
        nl.store(out[2], value=nl.copy(acc))
        return out

    w, b = rand(rng, 256, 128), rand(rng, 256, 64)
    fast = nki.jit(kernel)(w, b)
    monkeypatch.setattr(TensorView, "covers_all", lambda self: False)
    plain = nki.jit(kernel)(w, b)
    np.testing.assert_array_equal(fast.view(np.uint32), plain.view(np.uint32))
    ref = w.T.astype(np.float64) @ b
    np.testing.assert_allclose(fast[0], ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("region", [MemoryRegion.sbuf, MemoryRegion.psum])
@pytest.mark.parametrize("dtype", [float32, bfloat16])
def test_direct_writes_of_the_usual_case_store_what_the_plain_write_stores(rng, dtype, region):
    """Machine.write's branch for an in-bounds direct view without masks or element tracking (raw bit copies,
    as a DMA makes them, and rounded engine results; into a tile not made yet, written whole or in part; in
    PSUM when the view is all of the tile) gives the arrays, and PSUM's "unwritten" flags, the plain write
    gives. A view made afresh takes the plain write (its bounds are not known yet)."""
    import ml_dtypes

    hw = get_target("trn2")
    mem = Memory(hw, Allocator(MemoryKind.HBM, 1 << 30, 64, hw.name), precise=True, shape_only=False, program=())
    m = Machine(hw, mem, precise=True)
    for _ in range(30):
        key = tuple(slice(int(a), int(a) + int(rng.integers(1, n - a + 1)))
                    for a, n in zip(rng.integers(0, (16, 24)), (16, 24)))
        if rng.random() < 0.3:
            key = (slice(None), slice(None))
        raw = bool(rng.random() < 0.5)
        source = rng.standard_normal((16, 24)).astype(np.float32)
        if raw and rng.random() < 0.5:
            source = source.astype(ml_dtypes.bfloat16 if dtype is float32 else np.float32)
        made = rng.random() < 0.5            # the tile's array exists (written before) or not yet
        part_written = region is MemoryRegion.psum and not made and rng.random() < 0.5    # per-element flags
        results = []
        for fast in (True, False):
            st = mem.new_storage(region, dtype, (16, 24), "t", None, lazy=True)
            if made:
                m.write(TensorView.root(st), np.ones((16, 24), np.float32))
            elif part_written:
                m.write(TensorView.root(st).subscript((slice(0, 4), slice(None))), np.float32(2.0))
            root = TensorView.root(st)
            view = root.subscript(key)
            if fast:
                view.in_bounds()
            else:
                view = TensorView(st, view.shape, view.amap, view.consts)     # bounds not known: plain path
            values = source[:view.shape[0], :view.shape[1]]
            m.write(view, values, raw=raw)
            assert st.written
            flags = Machine._unwritten_flags(TensorView.root(st)).copy() if region is MemoryRegion.psum else None
            results.append((st.array.copy(), flags))
        (fast_values, fast_flags), (plain_values, plain_flags) = results
        np.testing.assert_array_equal(fast_values.view(np.uint8), plain_values.view(np.uint8))
        np.testing.assert_array_equal(fast_flags, plain_flags)

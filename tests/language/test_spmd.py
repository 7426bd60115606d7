"""Legacy SPMD: program_id / num_programs / program_ndim, nl.nc / nl.spmd_dim grids, and all_reduce across
programs (spec/language.md §5.8)."""

import numpy as np
import pytest

import opennki.legacy.language as nl
from opennki.errors import KernelError, MemoryKindError
from opennki.events import InstructionExecuted, ProgramStarted
from opennki.listeners import Recorder
from opennki.sim.simulator import Simulator
from opennki._src.tensor import NkiTensor
from tests.language.coverage import covers
from tests.language.helpers import run
from tests.raises import raises_at


@covers("program_id", "num_programs", "program_ndim")
def test_program_queries_over_a_2d_grid(rng):
    def kernel(x):
        out = nl.ndarray((2, 3, 4, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(axis=1)
        values = (i, j, nl.num_programs(), nl.num_programs(axes=1) * 10 + nl.num_programs((0, 1)) + 0 * i
                  + nl.program_ndim() * 100)
        for k, v in enumerate(values):
            nl.store(out[i, j, k:k + 1, :], value=float(v))
        return out
    out = run(kernel, np.zeros(1, np.float32), grid=(2, 3))[..., 0]
    ii, jj = np.meshgrid(range(2), range(3), indexing="ij")
    np.testing.assert_array_equal(out[..., 0], ii)
    np.testing.assert_array_equal(out[..., 1], jj)
    np.testing.assert_array_equal(out[..., 2], 6)
    np.testing.assert_array_equal(out[..., 3], 3 * 10 + 6 + 200)


def _placement(key):
    """(program ids, core) of a launch with grid subscript `key`, run on trn2, in grid order (the two cores
    run at once, so their programs start interleaved)."""
    rec = Recorder()

    def kernel(x):
        out = nl.ndarray((nl.num_programs(0), 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[nl.program_id(0):nl.program_id(0) + 1, :], value=float(nl.program_id(0)))
        return out
    import opennki.legacy as nki
    k = nki.jit(kernel, platform_target="trn2")
    k[key].launch((np.zeros(1, np.float32),), listeners=[rec])
    return sorted((e.program, e.core) for e in rec.of_type(ProgramStarted))


@covers("nc", "spmd_dim")
def test_nc_and_spmd_dim_place_programs_on_physical_cores():
    assert _placement(nl.spmd_dim(nl.nc(2), 2)) == [((0,), 0), ((1,), 0), ((2,), 1), ((3,), 1)]
    assert _placement(nl.spmd_dim(2, nl.nc(2))) == [((0,), 0), ((1,), 1), ((2,), 0), ((3,), 1)]
    assert _placement(nl.nc(2) * 2) == _placement(nl.spmd_dim(nl.nc(2), 2))
    assert _placement((nl.nc(2), 1)) == [((0, 0), 0), ((1, 0), 1)]


@covers("all_reduce")
@pytest.mark.parametrize("op,ref", [(np.add, np.sum), (np.maximum, np.max)])
def test_all_reduce_across_one_grid_axis(op, ref, rng):
    x = rng.standard_normal((2, 3, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        reduced = nl.all_reduce(nl.load(x[i, j]), op=op, program_axes=[1])
        nl.store(out[i, j], value=nl.multiply(reduced, 2.0))
        return out
    out = run(kernel, x, grid=(2, 3))
    np.testing.assert_allclose(out, 2 * np.broadcast_to(ref(x, axis=1, keepdims=True), x.shape), rtol=1e-6)


@covers("all_reduce")
def test_repeated_all_reduce_over_the_whole_grid(rng):
    x = rng.standard_normal((4, 8, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(x[i])
        for _ in range(2):                         # two rounds: every program sees the previous total
            t = nl.all_reduce(t, op=np.add, program_axes=0)
        nl.store(out[i], value=t)
        return out
    out = run(kernel, x, grid=4)
    np.testing.assert_allclose(out, np.broadcast_to(4 * x.sum(0), x.shape), rtol=1e-5)


@covers("all_reduce")
def test_all_reduce_in_a_single_program_is_a_copy(rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.all_reduce(nl.load(x), op=np.add, program_axes=[0]))
        return out
    np.testing.assert_array_equal(run(kernel, x), x)


def test_a_program_skipping_the_collective_is_reported(rng):
    x = rng.standard_normal((3, 8, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(x[i])
        if i != 1:
            t = nl.all_reduce(t, op=np.add, program_axes=[0])
        nl.store(out[i], value=t)
        return out
    with raises_at(KernelError, match="finished|forever"):
        run(kernel, x, grid=3)


def test_an_error_in_an_adopted_program_reaches_the_caller(rng):
    x = rng.standard_normal((3, 8, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.all_reduce(nl.load(x[i]), op=np.add, program_axes=[0])
        if i == 2:
            nl.exp(x)                               # an HBM operand: err_unsupported_memory
        nl.store(out[i], value=t)
        return out
    with raises_at(MemoryKindError, match="err_unsupported_memory", line="nl.exp(x)"):
        run(kernel, x, grid=3)


def test_cooperating_programs_keep_event_order_per_program(rng):
    x = rng.standard_normal((3, 8, 8)).astype(np.float32)
    rec = Recorder()

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out[i], value=nl.all_reduce(nl.load(x[i]), op=np.add, program_axes=[0]))
        return out
    Simulator(listeners=[rec]).launch(kernel, (x,), grid=(3,), tensor_type=NkiTensor)
    events = rec.of_type(InstructionExecuted)
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    for p in range(3):
        ops = [e.opcode for e in events if e.program == (p,)]
        assert ops[0] == "dma_copy" and ops[-1] == "dma_copy" and "tensor_tensor" in ops

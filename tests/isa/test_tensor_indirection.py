"""Tensor indirection (`NkiTensor.indirect`, NeuronCore-v4): gathers and scatters of free-dim columns through
the instructions that take it, checked against NumPy with the documented offset layout (partition groups of
16 partitions, 32 on the Tensor Engine, each reading its own rows of the index in snake order), the rules
each instruction's page gives, and how the cost model prices the access."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa
import opennki.language as nl
from opennki.cost import cost_of
from opennki.errors import AllocationError, DtypeError, IndirectIndexError, KernelError, MemoryKindError, ShapeError
from opennki.events import InstructionExecuted
from opennki.hw import TRN3
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder
from opennki.sim import SimOptions
from tests.cost.helpers import events, spec
from tests.isa.helpers import rand, rejects, run, to_hbm, to_sbuf


def layout(index, rows, num_elem, group):
    """The free offset of each (partition, column) of an indirection view: the documented layout."""
    p = np.arange(rows)[:, None]
    i = np.arange(num_elem)[None, :]
    return index[(p // group) * group + i % group, i // group].astype(np.int64)


def unique_index(rng, rows, cols, free, group=16):
    """A (rows, cols) uint16 index whose partition groups each name `group * cols` distinct columns."""
    index = np.empty((rows, cols), np.uint16)
    for g in range(0, rows, group):
        picks = rng.permutation(free)[:group * cols]
        index[g:g + group] = picks.reshape(cols, group).T      # snake order: offset i at [i % G, i // G]
    return index


def _bf16(a):
    return a.astype(ml_dtypes.bfloat16).astype(np.float32)


def gathered(x, offsets):
    return np.take_along_axis(x.reshape(x.shape[0], -1), offsets, axis=1)


def test_tensor_copy_gathers_columns_per_partition_group(rng):
    x = rand(rng, 128, 64)
    index = rng.integers(0, 64, (128, 3)).astype(np.uint16)

    def kernel(x, index):
        t, i = to_sbuf(x, nl.float32), to_sbuf(index, nl.uint16)
        out = nl.ndarray((128, 48), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=t.indirect(i, num_elem=48))
        return to_hbm(out)

    np.testing.assert_array_equal(run(kernel, x, index), gathered(x, layout(index, 128, 48, 16)))


def test_offsets_count_the_free_elements_of_the_view_indirected(rng):
    x = rand(rng, 32, 4, 16)
    index = rng.integers(0, 24, (32, 1)).astype(np.uint16)

    def kernel(x, index):
        t, i = to_sbuf(x, nl.float32), to_sbuf(index, nl.uint16)
        whole, part = nl.ndarray((32, 16), nl.float32, buffer=nl.sbuf), nl.ndarray((32, 16), nl.float32,
                                                                                   buffer=nl.sbuf)
        nisa.tensor_copy(dst=whole, src=t.indirect(i, num_elem=16))             # over (4, 16) row-major
        nisa.tensor_copy(dst=part, src=t[:, 1:3, :].indirect(i, num_elem=16))   # over the slice's 2 x 16
        return to_hbm(whole), to_hbm(part)

    whole, part = run(kernel, x, index)
    offsets = layout(index, 32, 16, 16)
    np.testing.assert_array_equal(whole, gathered(x, offsets))
    np.testing.assert_array_equal(part, gathered(x[:, 1:3, :], offsets))


def test_a_scatter_writes_only_the_indexed_columns(rng):
    x, y = rand(rng, 64, 40), rand(rng, 64, 32)
    index = unique_index(rng, 64, 2, 40)

    def kernel(x, y, index):
        t, v, i = to_sbuf(x, nl.float32), to_sbuf(y, nl.float32), to_sbuf(index, nl.uint16)
        nisa.tensor_scalar(dst=t.indirect(i, num_elem=32), data=v, op0=nl.multiply, operand0=3.0)
        return to_hbm(t)

    expected = x.copy()
    np.put_along_axis(expected, layout(index, 64, 32, 16), 3 * y, axis=1)
    np.testing.assert_array_equal(run(kernel, x, y, index), expected)


def test_gather_into_vector_and_scalar_engine_math(rng):
    x, y = rand(rng, 128, 50), rand(rng, 128, 16)
    index = rng.integers(0, 50, (128, 1)).astype(np.uint16)

    def kernel(x, y, index):
        t, v, i = to_sbuf(x, nl.float32), to_sbuf(y, nl.float32), to_sbuf(index, nl.uint16)
        view = t.indirect(i, num_elem=16)
        added = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=added, data1=view, data2=v, op=nl.subtract)
        exp = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=exp, op=nl.exp, data=view)
        total = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=total, op=nl.add, data=view, axis=1)
        return to_hbm(added), to_hbm(exp), to_hbm(total)

    cols = gathered(x, layout(index, 128, 16, 16))
    added, exp, total = run(kernel, x, y, index)
    np.testing.assert_array_equal(added, cols - y)
    np.testing.assert_allclose(exp, np.exp(cols.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(total[:, 0], cols.sum(axis=1), rtol=1e-5)


def test_predicated_copy_scatters_and_reads_an_indirect_predicate(rng):
    x, y = rand(rng, 32, 24), rand(rng, 32, 16)
    pred = rng.integers(0, 2, (32, 24)).astype(np.uint8)
    index = unique_index(rng, 32, 1, 24)

    def kernel(x, y, pred, index):
        t, v, i = to_sbuf(x, nl.float32), to_sbuf(y, nl.float32), to_sbuf(index, nl.uint16)
        m = to_sbuf(pred, nl.uint8)
        nisa.tensor_copy_predicated(dst=t.indirect(i, num_elem=16), src=v, predicate=m.indirect(i, num_elem=16))
        return to_hbm(t)

    offsets = layout(index, 32, 16, 16)
    expected = x.copy()
    keep = np.take_along_axis(pred, offsets, axis=1) != 0
    np.put_along_axis(expected, offsets, np.where(keep, y, gathered(x, offsets)), axis=1)
    np.testing.assert_array_equal(run(kernel, x, y, pred, index), expected)


def test_the_tensor_engine_reads_offsets_in_groups_of_32(rng):
    s = rand(rng, 128, 96)
    mv = rand(rng, 128, 64)
    index = rng.integers(0, 96, (128, 2)).astype(np.uint16)

    def kernel(s, mv, index):
        st, m, i = to_sbuf(s, nl.bfloat16), to_sbuf(mv, nl.bfloat16), to_sbuf(index, nl.uint16)
        acc = nl.ndarray((64, 64), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=st.indirect(i, num_elem=64), moving=m)
        out = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=acc)
        return to_hbm(out)

    stationary = gathered(_bf16(s), layout(index, 128, 64, 32))
    expected = stationary.astype(np.float64).T @ _bf16(mv).astype(np.float64)
    np.testing.assert_allclose(run(kernel, s, mv, index), expected, rtol=1e-5, atol=1e-4)


# -- rules --------------------------------------------------------------------------------------------

def _gather(engine=None, target="trn3", index_dtype=nl.uint16, num_elem=16, rows=32):
    def kernel(x, index):
        t, i = to_sbuf(x[0:rows, :], nl.float32), to_sbuf(index[0:rows, :], index_dtype)
        out = nl.ndarray((rows, num_elem), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=t.indirect(i, num_elem=num_elem), engine=engine)
        return to_hbm(out)
    return kernel


def _args(rng, high=24):
    return rand(rng, 128, 24), rng.integers(0, high, (128, 2)).astype(np.uint16)


def test_older_targets_lack_tensor_indirection(rng):
    error = rejects(_gather(), *_args(rng), error=KernelError, match="needs NeuronCore-v4", target="trn2",
                    api="nisa.tensor_copy")
    assert "tensor-indirection" in str(error)


def test_the_index_is_uint16_in_sbuf(rng):
    rejects(_gather(index_dtype=nl.int32), *_args(rng), error=DtypeError, match="uint16", api="indirect")


def test_operands_without_indirection_reject_it(rng):
    def tensor_tensor_data2(x, index):
        t, i = to_sbuf(x, nl.float32), to_sbuf(index, nl.uint16)
        out = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out, data1=out, data2=t.indirect(i, num_elem=16), op=nl.add)

    def dma(x, index):
        t, i = to_sbuf(x, nl.float32), to_sbuf(index, nl.uint16)
        out = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t.indirect(i, num_elem=16))

    rejects(tensor_tensor_data2, *_args(rng), error=KernelError, match="'data2' of nisa.tensor_tensor does not",
            api="nisa.tensor_tensor")
    rejects(dma, *_args(rng), error=KernelError, match="'src' of nisa.dma_copy does not", api="nisa.dma_copy")


def test_engines_without_indirection_reject_it(rng):
    rejects(_gather(engine=nisa.engine.gpsimd), *_args(rng), error=KernelError, match="only on the vector or "
            "scalar engine", api="nisa.tensor_copy")

    def scalar_scatter_to_psum(x, index):
        t, i = to_sbuf(x, nl.float32), to_sbuf(index, nl.uint16)
        acc = nl.ndarray((128, 24), nl.float32, buffer=nl.psum)
        nisa.activation(dst=acc.indirect(i, num_elem=16), op=nl.exp, data=t[:, 0:16])

    rejects(scalar_scatter_to_psum, *_args(rng), error=MemoryKindError, match="scattered 'dst' cannot be in PSUM",
            api="nisa.activation")


def test_offsets_past_the_free_size_fail_when_the_instruction_runs(rng):
    x, index = _args(rng, high=24)
    index[5, 0] = 30
    # NKI's simulator raises a plain IndexError for an out-of-range run-time index; ours carries the rule
    error = rejects(_gather(), x, index, error=IndexError, match="offset 30", api="nisa.tensor_copy")
    inner = error.opennki_error
    assert isinstance(inner, IndirectIndexError) and inner.code == "err_tensor_access_out_of_bound"


def test_a_group_holds_group_size_times_k_offsets(rng):
    # the documented default num_elem = index.size is more than one group of 16 partitions holds
    rejects(_gather(num_elem=64), *_args(rng), error=ShapeError, match="outside the", api="nisa.tensor_copy")
    rejects(_gather(num_elem=16, rows=24), *_args(rng), error=ShapeError, match=r"index element \[24, 0\]",
            api="nisa.tensor_copy")


def test_matmul_indirection_rules(rng):
    def kernel_with(tile_position=(), dtype=nl.bfloat16):
        def kernel(x, index):
            s, i = to_sbuf(x, dtype), to_sbuf(index, nl.uint16)
            acc = nl.ndarray((16, 16), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=acc, stationary=s.indirect(i, num_elem=16), moving=s[:, 0:16],
                           tile_position=tile_position, tile_size=(128, 128) if tile_position else ())
        return kernel

    rejects(kernel_with(tile_position=(0, 64)), *_args(rng), error=KernelError, match="cannot be tiled",
            api="nisa.nc_matmul")
    rejects(kernel_with(dtype=nl.float32), *_args(rng), error=DtypeError, match="Tensor Engine float dtype",
            api="nisa.nc_matmul")


# -- cost ---------------------------------------------------------------------------------------------

def _copy(indirect):
    def kernel(x, index):
        t, i = to_sbuf(x, nl.bfloat16), to_sbuf(index, nl.uint16)
        out = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=t.indirect(i, num_elem=512) if indirect else t[:, 0:512])
        return to_hbm(out)
    return kernel


def _copy_cost(events_of_run):
    ev = [e for e in events_of_run if e.opcode == "tensor_copy"][0]
    return cost_of(ev, TRN3), ev


def test_a_gather_with_unknown_offsets_is_priced_as_a_non_contiguous_access():
    # shape-only: the offsets are unknown, so the 16-bit SBUF copy gets the 2x mode of non-contiguous data
    args = (spec((128, 1024), "bfloat16"), spec((128, 32), "uint16"))
    dense, _ = _copy_cost(events(_copy(False), *args, target="trn3"))
    gather, ev = _copy_cost(events(_copy(True), *args, target="trn3"))
    assert any(o.gathered for o in ev.operands) and dense.perf_mode == "4x" and gather.perf_mode == "2x"
    assert gather.busy_ns == pytest.approx(2 * dense.busy_ns)


def test_an_fp32_gather_with_unknown_offsets_gets_the_strided_penalty():
    def kernel(x, index):
        t, i = to_sbuf(x, nl.float32), to_sbuf(index, nl.uint16)
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=out, data1=t.indirect(i, num_elem=512) if x.shape[1] > 512 else t, data2=out,
                           op=nl.add)
        return to_hbm(out)

    dense, _ = [cost_of(e, TRN3) for e in events(kernel, spec((128, 512)), spec((128, 32), "uint16"),
                                                  target="trn3") if e.opcode == "tensor_tensor"][0], None
    gather = [cost_of(e, TRN3) for e in events(kernel, spec((128, 1024)), spec((128, 32), "uint16"),
                                               target="trn3") if e.opcode == "tensor_tensor"][0]
    assert gather.busy_ns == pytest.approx(2 * dense.busy_ns)       # half the rate (an innermost step > 16 B)


def test_a_gather_of_consecutive_columns_is_priced_as_a_dense_access(rng):
    x = rand(rng, 128, 1024)
    ramp = np.arange(512).reshape(32, 16).T.astype(np.uint16)     # offset i = i: columns 0..511 in order
    index = np.tile(ramp, (8, 1))

    def recorded(kernel):
        rec = Recorder()
        run_kernel(kernel, (x, index), target="trn3", options=SimOptions(target="trn3"), listeners=[rec])
        return [e for e in rec.events if isinstance(e, InstructionExecuted)]

    dense, _ = _copy_cost(recorded(_copy(False)))
    gather, ev = _copy_cost(recorded(_copy(True)))
    assert gather.perf_mode == "4x" and gather.busy_ns == pytest.approx(dense.busy_ns)


def test_directly_placed_operands_follow_the_base_partition_rules(rng):
    def kernel_with(index_partition, data_partition):
        def kernel(x, index):
            t = nl.ndarray((32, 24), nl.float32, buffer=nl.sbuf, address=(data_partition, 0))
            nisa.dma_copy(dst=t, src=x[0:32, :])
            i = nl.ndarray((32, 2), nl.uint16, buffer=nl.sbuf, address=(index_partition, 4096))
            nisa.dma_copy(dst=i, src=index[0:32, :])
            out = nl.ndarray((32, 16), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=t.indirect(i, num_elem=16))
            return to_hbm(out)
        return kernel

    x, index = _args(rng)
    rejects(kernel_with(16, 16), x, index, error=AllocationError, match="quadrant boundary", api="nisa.tensor_copy")
    rejects(kernel_with(32, 0), x, index, error=AllocationError, match="starts on the partition its index",
            api="nisa.tensor_copy")
    got = run(kernel_with(32, 32), x, index)
    np.testing.assert_array_equal(got, gathered(x[0:32], layout(index[0:32], 32, 16, 16)))

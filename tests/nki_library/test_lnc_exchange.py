"""nisa.sendrecv and nisa.core_barrier (spec/isa.md §7.4) between the two cores of an LNC=2 launch: each core
sends an SBUF tile to the other one's SBUF, and barriers order the cores' accesses to a shared HBM tensor.
LNC=2 kernels of the NKI Library (token-generation attention and MLP) exchange partial results this way."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import DtypeError, KernelError, ShapeError
from tests.isa.helpers import rand
from tests.raises import raises_at


@nki.jit
def _sum_halves(x):
    """Each core loads its half of the rows, swaps it with the other core and stores own + other * 2."""
    half = x.shape[0] // 2
    rank = nl.program_id(0)
    out = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    mine = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    theirs = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[rank * half:(rank + 1) * half, :])
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - rank, recv_from_rank=1 - rank, pipe_id=0)
    nisa.tensor_scalar(dst=mine, data=mine, op0=nl.multiply, operand0=0.0)  # the sent copy is not affected
    nisa.sendrecv(src=theirs, dst=mine, send_to_rank=1 - rank, recv_from_rank=1 - rank, pipe_id=0)
    total = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=total, data=theirs, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=mine)
    if rank == 0:
        nisa.dma_copy(dst=out, src=total)
    return out


def test_sendrecv_swaps_tiles_between_the_cores(rng):
    x = rand(rng, 64, 48)
    # core 0: mine = its own rows back after the round trip, theirs = core 1's rows
    np.testing.assert_allclose(_sum_halves[2](x), x[:32] + 2 * x[32:], rtol=1e-6)


@nki.jit
def _mirror_through_hbm(x):
    """Each core writes its half of x into a shared scratch tensor, then (after the barrier) reads the other
    core's half: core 0 reads what core 1 wrote, which needs core 1 to have run up to the barrier."""
    half = x.shape[0] // 2
    rank = nl.program_id(0)
    scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[rank * half:(rank + 1) * half, :])
    nisa.dma_copy(dst=scratch[rank * half:(rank + 1) * half, :], src=t)
    nisa.core_barrier(scratch, (0, 1))
    other = 1 - rank
    nisa.dma_copy(dst=t, src=scratch[other * half:(other + 1) * half, :])
    nisa.dma_copy(dst=out[rank * half:(rank + 1) * half, :], src=t)
    return out


def test_core_barrier_lets_a_core_read_what_the_other_wrote_before_it(rng):
    x = rand(rng, 64, 16)
    np.testing.assert_array_equal(_mirror_through_hbm[2](x), np.concatenate([x[32:], x[:32]]))


def _exchange(shape_dst=(32, 8), dtype_dst=nl.float32, rank_to=None):
    def kernel(x):
        rank = nl.program_id(0) if nl.num_programs() > 1 else 0
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        src = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        dst = nl.ndarray(shape_dst, dtype=dtype_dst, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        nisa.sendrecv(src=src, dst=dst, send_to_rank=1 - rank if rank_to is None else rank_to,
                      recv_from_rank=1 - rank, pipe_id=0)
        return out
    return kernel


@pytest.mark.parametrize("kernel,lnc,error,match", [
    (_exchange(), 1, KernelError, "does not exist in an LNC=1 launch"),
    (_exchange(shape_dst=(32, 4)), 2, ShapeError, "same shape"),
    (_exchange(dtype_dst=nl.bfloat16), 2, DtypeError, "same dtype"),
    (_exchange(rank_to=2), 2, KernelError, "core rank"),
], ids=["outside_lnc2", "shapes", "dtypes", "rank"])
def test_sendrecv_rejects(rng, kernel, lnc, error, match):
    with raises_at(error, match=match) as exc:
        nki.jit(kernel)[lnc](rand(rng, 32, 8))
    assert exc.value.location.filename == __file__ and "nisa.sendrecv(" in exc.value.location.source


def test_a_core_waiting_for_a_partner_that_never_sends_is_an_error(rng):
    @nki.jit
    def lonely(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if nl.program_id(0) == 0:
            nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0)
        nisa.dma_copy(dst=out, src=t)
        return out

    # the waiting core's line, and the line where the other core ended without making the call
    with raises_at(KernelError, match=r"programs \[\[1\]\] finished without making this call", line="nisa.sendrecv(") \
            as exc:
        lonely[2](rand(rng, 32, 8))
    assert "[1] ended after" in str(exc.value) and "nisa.dma_copy(dst=out, src=t)" in str(exc.value)


@nki.jit
def _accumulate_exchanges(x):
    """Four exchanges of a fresh 64 KiB-per-partition tile; with the accumulator, three such tiles fill most
    of SBUF, so a sent tile kept alive after its exchange would overflow it."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rank = nl.program_id(0)
    acc = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for _ in range(4):
        mine = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=x)
        theirs = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - rank, recv_from_rank=1 - rank, pipe_id=0)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=theirs, op=nl.add)
    if rank == 0:
        nisa.dma_copy(dst=out, src=acc)
    return out


def test_a_sent_tile_is_not_kept_alive_by_its_exchange(rng):
    x = rand(rng, 2, 16384)
    np.testing.assert_allclose(_accumulate_exchanges[2](x), 4 * x, rtol=1e-6)

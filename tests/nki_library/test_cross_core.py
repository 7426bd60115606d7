"""Cross-core instructions of an LNC=2 launch (spec/isa.md §7.4): `nisa.sendrecv` swaps SBUF tiles between the
two cores, `nisa.core_barrier` orders their accesses to a shared HBM tensor."""

import numpy as np

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import KernelError, ShapeError
from tests.raises import raises_at


@nki.jit
def swap_halves(x):
    """Core r loads row block r of x, negates it, sends it to the other core and stores what it received at
    block r: out = -x with its two row blocks swapped."""
    n, m = x.shape
    h = n // 2
    r = nl.program_id(0)
    out = nl.ndarray((n, m), dtype=x.dtype, buffer=nl.shared_hbm)
    mine = nl.ndarray((h, m), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[r * h:(r + 1) * h, :])
    nisa.tensor_scalar(dst=mine, data=mine, op0=nl.multiply, operand0=-1.0)
    theirs = nl.ndarray((h, m), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - r, recv_from_rank=1 - r, pipe_id=0)
    nisa.memset(dst=mine, value=0.0)     # the sent tile may be reused once sendrecv returned
    nisa.dma_copy(dst=out[r * h:(r + 1) * h, :], src=theirs)
    return out


def test_sendrecv_swaps_tiles_between_the_two_cores(rng):
    x = rng.standard_normal((64, 16)).astype(np.float32)
    want = np.concatenate([-x[32:], -x[:32]])
    np.testing.assert_array_equal(swap_halves[2](x), want)


@nki.jit
def partial_sums(x):
    """Core r writes the column sums of its row block to row r of a shared scratch tensor; after a core
    barrier each core reads both rows and stores their total at row r of out."""
    n, m = x.shape
    h = n // 2
    r = nl.program_id(0)
    scratch = nl.ndarray((2, m), dtype=nl.float32, buffer=nl.shared_hbm)
    out = nl.ndarray((2, m), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((m, h), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[r * h:(r + 1) * h, :].ap(pattern=[[1, m], [m, h]], offset=r * h * m))
    s = nl.ndarray((m, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=t, axis=(1,))
    nisa.dma_copy(dst=scratch[r:r + 1, :].ap(pattern=[[1, m], [1, 1]], offset=r * m), src=s)
    nisa.core_barrier(scratch, (0, 1))
    both = nl.ndarray((2, m), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=both, src=scratch)
    total = nl.ndarray((1, m), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=both[0:1, :], data2=both[1:2, :], op=nl.add)
    nisa.dma_copy(dst=out[r:r + 1, :], src=total)
    return out


def test_core_barrier_makes_the_other_cores_writes_visible(rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    out = partial_sums[2](x)
    np.testing.assert_allclose(out, np.stack([x.sum(0), x.sum(0)]), rtol=1e-5, atol=1e-5)


def test_sendrecv_needs_an_lnc2_launch(rng):
    x = rng.standard_normal((64, 16)).astype(np.float32)
    with raises_at(KernelError, match="core rank 1 does not exist in an LNC=1 launch") as exc:
        swap_halves(x)
    assert "nisa.sendrecv(" in exc.value.location.source


@nki.jit
def send_mismatched(x):
    r = nl.program_id(0)
    a = nl.ndarray((8, 4 + 4 * r), dtype=nl.float32, buffer=nl.sbuf)   # core 1's tile is wider
    nisa.memset(dst=a, value=1.0)
    b = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=a, dst=b, send_to_rank=1 - r, recv_from_rank=1 - r, pipe_id=3)
    return x


def test_sendrecv_rejects_tiles_of_different_shapes(rng):
    x = rng.standard_normal((4, 4)).astype(np.float32)
    with raises_at(ShapeError, match="same shape") as exc:
        send_mismatched[2](x)
    assert "nisa.sendrecv(" in exc.value.location.source


def test_sendrecv_needs_neuroncore_v3(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")

    def kernel(x):
        a = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=a, value=1.0)
        nisa.sendrecv(src=a, dst=a, send_to_rank=0, recv_from_rank=0, pipe_id=0)
        return x

    with raises_at(KernelError, match="NeuronCore-v3"):
        nki.simulate(kernel)(rng.standard_normal((4, 4)).astype(np.float32))


@nki.jit
def barrier_on_core_zero_only(x):
    """Only core 0 waits, at a barrier of core 0 alone (the `cores=0` int form): nothing to wait for."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if nl.program_id(0) == 0:          # one core writes the output (both would race on it)
        nisa.dma_copy(dst=out, src=t)
        nisa.core_barrier(out, 0)
    return out


def test_core_barrier_of_one_core_does_not_wait(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(barrier_on_core_zero_only[2](x), x)


@nki.jit
def only_core_one_sends(x):
    r = nl.program_id(0)
    a = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    if r == 1:
        nisa.sendrecv(src=a, dst=a, send_to_rank=0, recv_from_rank=0, pipe_id=1)
    return x


def test_sendrecv_whose_peer_never_comes_names_the_call(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    with raises_at(KernelError, match=r"programs \[\[0\]\] finished without making this call") as exc:
        only_core_one_sends[2](x)
    assert "nisa.sendrecv(" in exc.value.location.source

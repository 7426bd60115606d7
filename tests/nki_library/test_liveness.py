"""Memory of tensors the kernel never reads again is reused, as the compiler's liveness analysis does: NKI
library kernels declare large scratch tensors, use them once and keep the Python variable to the end."""

import numpy as np

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.events import InstructionExecuted
from opennki.hw import get_target
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder

COLS = int(get_target("trn3").memory.sbuf_usable_bytes_per_partition * 0.6) // 4   # fp32: 60% of SBUF each


def _stage(dst, x, scratch, op, value):
    nisa.dma_copy(dst=scratch[:, 0:8], src=x)
    nisa.tensor_scalar(dst=scratch[:, 0:8], data=scratch[:, 0:8], op0=op, operand0=value)
    nisa.dma_copy(dst=dst, src=scratch[:, 0:8])


@nki.jit
def two_stages(x):
    """out[:, :8] = x + 1 through scratch `first`, out[:, 8:] = 2 x through scratch `second`; each scratch
    tensor takes 60% of SBUF, so both fit only because `first` is dead once `second` is used."""
    out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    first = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
    _stage(out[:, 0:8], x, first, nl.add, 1.0)
    second = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
    _stage(out[:, 8:16], x, second, nl.multiply, 2.0)
    return out


@nki.jit
def two_stages_reading_first_again(x):
    """As two_stages, but `first` is read once more at the end, so it is live while `second` is."""
    out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    first = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
    _stage(out[:, 0:8], x, first, nl.add, 1.0)
    second = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
    _stage(out[:, 8:16], x, second, nl.multiply, 2.0)
    nisa.dma_copy(dst=out[:, 0:8], src=first[:, 0:8])
    return out


def test_a_tensor_never_read_again_gives_its_memory_back(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    x = rng.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_allclose(two_stages(x), np.concatenate([x + 1, 2 * x], axis=1), rtol=1e-6)


def test_a_tensor_read_later_keeps_its_data_through_a_spill(rng):
    """`first` is live while `second` needs SBUF: it is not freed but spilled to HBM and reloaded when read
    again (machine/memory.py); the dead variant frees it with no spill."""
    x = rng.standard_normal((128, 8)).astype(np.float32)
    spills = {}
    for kernel in (two_stages, two_stages_reading_first_again):
        rec = Recorder()
        out = run_kernel(kernel.func, (x,), target="trn3", listeners=[rec])
        np.testing.assert_allclose(out, np.concatenate([x + 1, 2 * x], axis=1), rtol=1e-6)
        spills[kernel.func.__name__] = [(e.opcode, e.params["tensor"]) for e in rec.of_type(InstructionExecuted)
                                        if e.opcode in ("sbuf_spill", "sbuf_reload")]
    assert spills["two_stages"] == []
    first = spills["two_stages_reading_first_again"][0][1]
    assert spills["two_stages_reading_first_again"] == [("sbuf_spill", first), ("sbuf_reload", first)]


def test_no_dead_candidates_means_no_heap_scan(monkeypatch):
    """Reclaiming asks which dead-variable tensors something else refers to (`program._shared`, a scan of the
    whole heap); with no candidates the answer is none without the scan, and with one it is still asked."""
    import gc

    from opennki.machine.dtypes import float32
    from opennki.machine.memory import MemoryRegion, Placement, Storage
    from opennki.machine.tensor import TensorView
    from opennki.sim import program

    storage = Storage(MemoryRegion.sbuf, float32, (128, 4), None, Placement(0, 0), "t", None)
    view = TensorView.root(storage)
    holder = [view]                     # a referrer other than this frame's locals

    def no_scan(*objects):
        raise AssertionError("heap scanned")

    with monkeypatch.context() as m:
        m.setattr(gc, "get_referrers", no_scan)
        assert program._shared([]) == set()
    assert program._shared([view]) == {storage.id} and holder

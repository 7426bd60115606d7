"""Automatic allocation spills SBUF to HBM as the compiler does (machine/memory.py, DESIGN decision 9): a
kernel that keeps twice SBUF's worth of tiles live runs and matches NumPy; each spill and reload is a DMA
event of the whole tile (the least recently used one the instruction does not touch), which the cost model
charges and the profile hints name; directly placed tensors beyond SBUF still raise the capacity error."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import AllocationError
from opennki.events import AccessKind, Engine, InstructionExecuted, MemoryKind
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder
from opennki.perf import hints
from opennki.perf.estimate import estimate
from tests.cost.helpers import spec

P, F = 128, 8192          # one fp32 tile: 32 KiB per partition
TILE_BYTES = P * F * 4
N = 14                    # 14 live tiles = 448 KiB per partition: twice the 208 KiB usable on trn2


def keep_all_then_sum(x):
    """Loads and scales every tile first (all live at once), then sums them: needs N tiles of SBUF."""
    out = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
    scaled = []
    for i in range(x.shape[0]):
        scaled.append(nl.multiply(nl.load(x[i]), float(i + 1)))
    acc = nl.zeros((P, F), nl.float32)
    for t in scaled:
        acc = nl.add(acc, t)
    nl.store(out, acc)
    return out


def stream_and_sum(x):
    """The same instructions, each tile consumed right after it is made: two tiles of SBUF suffice."""
    out = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((P, F), nl.float32)
    for i in range(x.shape[0]):
        acc = nl.add(acc, nl.multiply(nl.load(x[i]), float(i + 1)))
    nl.store(out, acc)
    return out


def _data(rng):
    return rng.standard_normal((N, P, F)).astype(np.float32)


def test_a_kernel_needing_twice_sbuf_runs_and_matches_numpy(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    x = _data(rng)
    out = nki.simulate(keep_all_then_sum)(x)
    np.testing.assert_allclose(out, sum((i + 1) * x[i] for i in range(N)), rtol=1e-5, atol=1e-4)


def test_each_spill_and_reload_is_a_dma_of_the_least_recently_used_tile(rng):
    rec = Recorder()
    run_kernel(keep_all_then_sum, (_data(rng),), target="trn2", listeners=[rec])
    events = rec.of_type(InstructionExecuted)
    spills = [e for e in events if e.opcode == "sbuf_spill"]
    reloads = [e for e in events if e.opcode == "sbuf_reload"]
    fits = 208 * 1024 // (F * 4)                                      # tiles the usable SBUF holds
    assert len(spills) >= N - fits and len(reloads) >= N - fits
    for ev, (first, second) in [(spills[0], (MemoryKind.SBUF, MemoryKind.HBM)),
                                (reloads[0], (MemoryKind.HBM, MemoryKind.SBUF))]:
        src, dst = ev.operands
        assert ev.engine is Engine.DMA and (src.kind, dst.kind) == (first, second)
        assert src.access is AccessKind.READ and dst.access is AccessKind.WRITE
        assert src.size_bytes == dst.size_bytes == TILE_BYTES
        assert ev.location.filename == __file__
    # the first victim is the first scaled tile: written by the first multiply, untouched since
    multiplies = [e for e in events if e.opcode == "tensor_scalar"]
    first_scaled = multiplies[0].writes[0].region
    assert spills[0].operands[0].region == first_scaled
    assert spills[0].seq > multiplies[1].seq


def test_the_estimate_grows_by_the_spill_traffic_and_the_hints_name_it():
    args = (spec((N, P, F)),)
    spilling = estimate(keep_all_then_sum, args, target="trn2")
    streaming = estimate(stream_and_sum, args, target="trn2")
    assert "sbuf_spill" not in spilling.uncosted and "sbuf_reload" not in spilling.uncosted
    copies = [r for r in spilling.records if r.opcode in ("sbuf_spill", "sbuf_reload")]
    assert copies and all(r.duration_ns > 0 for r in copies)
    assert streaming.opcode_counts.get("sbuf_spill", 0) == 0
    assert spilling.total_ns > streaming.total_ns
    found = {h.kind: h for h in hints(spilling)}
    assert f"{spilling.opcode_counts['sbuf_spill']} SBUF tiles were spilled" in found["sbuf_spill"].message
    assert "sbuf_spill" not in {h.kind for h in hints(streaming)}


def test_direct_allocation_beyond_sbuf_still_raises_at_the_kernel_line(rng):
    def placed_past_the_end(x):
        out = nl.ndarray((P, 1024), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((P, 1024), nl.float32, buffer=nl.sbuf, address=(0, 206 * 1024))   # <- too far
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out
    with pytest.raises(AllocationError) as info:
        run_kernel(placed_past_the_end, (rng.standard_normal((P, 1024)).astype(np.float32),), target="trn2")
    err = info.value
    assert "# <- too far" in err.location.source
    assert "4096" in str(err)                                          # the numbers: bytes per partition

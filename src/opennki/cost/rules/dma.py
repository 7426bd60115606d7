"""Cost layer: DMA rules (spec/hardware.md §6, spec/isa.md §7). Imports events, hw, common and descriptors.

A DMA rule describes the transfer (`DmaWork`); the scheduler places it. How the access patterns split into
descriptors and what a DMA engine spends on them is `descriptors.py`: the efficiency curve at the transfer's
bytes per partition, never less than its descriptors (contiguous pieces on both sides: partition rows, or
single elements for element-strided accesses) at `descriptor_ns` each plus the bytes at the engine bandwidth.
The DMA engines used are those owning the on-chip partitions touched (8 partitions per engine); HBM-to-HBM
copies spread over all engines. The issuing engine (Sync by default, Scalar or GpSimd when asked; GpSimd for
software-DGE and indirect transfers) spends `trigger_cycles` on it; GpSimd also generates the descriptors of
software-DGE transfers (GPSIMD_START plus a cycle per partition, [GAP] chosen).
"""

from __future__ import annotations

from opennki.cost.rules.registry import cost_rule
from opennki.cost.rules.common import inputs, named, param_name
from opennki.cost.rules.descriptors import TRANSPOSE, Split, engine_ns, split
from opennki.cost.value import Cost, DmaWork
from opennki.events import Engine, MemoryKind

_TRIGGERS = {"sync": Engine.SYNC, "scalar": Engine.SCALAR, "activation": Engine.SCALAR,
             "gpsimd": Engine.GPSIMD, "pool": Engine.GPSIMD}
QUEUE_PREFIX = {Engine.SYNC: "qSyncIO", Engine.SCALAR: "qActIO", Engine.VECTOR: "qVectorIO",
                Engine.TENSOR: "qPeIO"}


def queue_name(trigger: Engine, dst_kind: MemoryKind, src_kind: MemoryKind | None) -> str:
    """The DMA queue of a transfer: GpSimd-generated (software DGE) transfers share `qGpSimdDynamic`; the
    others get one queue per direction on their trigger engine (loads 0, stores 1, other copies 2), as the
    compiler spreads loads and stores over queues so that one does not wait behind the other."""
    if trigger is Engine.GPSIMD:
        return "qGpSimdDynamic"
    if dst_kind is not MemoryKind.HBM and src_kind is MemoryKind.HBM:
        lane = 0
    elif dst_kind is MemoryKind.HBM and src_kind is not MemoryKind.HBM:
        lane = 1
    else:
        lane = 2
    return f"{QUEUE_PREFIX.get(trigger, 'qSyncIO')}{lane}"


def _trigger(ev, indirect: bool) -> tuple[Engine, str]:
    dge = param_name(ev, "dge_mode") or "unknown"
    if dge == "unknown":
        dge = "swdge" if indirect else "none"
    if dge == "swdge":
        return Engine.GPSIMD, dge
    chosen = _TRIGGERS.get(param_name(ev, "engine") or "")
    return chosen or Engine.SYNC, dge


def transfer(ev, hw, dst, srcs, *, factor: float = 1.0, pieces: Split | None = None,
             size_bytes: int | None = None) -> Cost:
    """The `DmaWork` of a transfer from `srcs` into `dst` (descriptors from `split` unless given), its
    engine time divided by `factor` (transpose / read-modify-write throughput relative to a copy)."""
    dma = hw.cost.dma
    srcs = [s for s in srcs if s is not None]
    size = dst.size_bytes if size_bytes is None else size_bytes
    if pieces is None:
        pieces = split(dst, srcs, transpose_path=hw.capabilities.dma_transpose_path)
        if pieces.path == TRANSPOSE:            # a 2-byte transposing copy lowered to the transpose path
            factor *= transpose_efficiency(dma, srcs[0] if srcs else dst)
    on_chip = dst if dst.kind is not MemoryKind.HBM else next((s for s in srcs if s.kind is not MemoryKind.HBM),
                                                                None)
    partition_start = on_chip.region.partition_start if on_chip is not None else None
    partition_count = on_chip.partitions if on_chip is not None else None
    first, last = dma.engine_span(partition_start, partition_count)
    engines = last - first + 1
    busy_ns = engine_ns(dma, pieces, size, engines, factor)
    efficiency = min(1.0, size / engines / dma.engine_bandwidth_bytes_per_ns / busy_ns) if busy_ns > 0 else 1.0
    indirect = any(o.role.startswith("index:") or o.strides is None for o in ev.operands)
    trigger, dge = _trigger(ev, indirect)
    if dge == "hwdge" and dma.hwdge_issue_ns is None:
        dge = "none"
    queue = queue_name(trigger, dst.kind, srcs[0].kind if srcs else None)
    work = DmaWork(
        size_bytes=int(size),
        descriptor_bytes=pieces.piece_bytes,
        partition_start=partition_start,
        partition_count=partition_count,
        efficiency=efficiency,
        trigger=trigger, dge=dge, queue=queue,
        hbm_read_bytes=sum(s.size_bytes for s in srcs if s.kind is MemoryKind.HBM),
        hbm_write_bytes=dst.size_bytes if dst.kind is MemoryKind.HBM else 0,
        descriptors=pieces.count, path=pieces.path, partition_bytes=pieces.partition_bytes,
    )
    sequencer = hw.cost.sync if trigger is Engine.SYNC else {
        Engine.SCALAR: hw.cost.scalar, Engine.GPSIMD: hw.cost.gpsimd}.get(trigger, hw.cost.sync)
    cycles = dma.trigger_cycles
    if dge == "swdge":
        cycles += hw.cost.gpsimd.start_cycles + (work.partition_count or 1)
    return Cost(Engine.DMA, busy_ns=sequencer.ns(cycles), dma=work)


def _dst_src(ev, dst_roles=("dst",), src_roles=("src",)):
    return named(ev, *dst_roles), named(ev, *src_roles)


@cost_rule("dma_copy")
def dma_copy(ev, hw) -> Cost:
    """A copy at the curve's efficiency; `dst_rmw_op` (accumulate) at `rmw_efficiency` of it."""
    dst, src = _dst_src(ev)
    factor = hw.cost.dma.rmw_efficiency if ev.params.get("dst_rmw_op") else 1.0
    return transfer(ev, hw, dst, [src], factor=factor)


@cost_rule("sbuf_spill", "sbuf_reload")
def sbuf_staging_copy(ev, hw) -> Cost:
    """The DMA a compiler issues to spill an oversubscribed SBUF tile to HBM or to bring it back
    (machine/memory.py): a copy of the whole tile between its SBUF range and its HBM staging range."""
    dst, src = _dst_src(ev)
    return transfer(ev, hw, dst, [src])


@cost_rule("dma_transpose")
def dma_transpose(ev, hw) -> Cost:
    """NeuronCore-v2 transposes with one descriptor per element; v3+ on the DMA transpose path, the
    destination's partition rows at 90% (HBM->SBUF) or 50% (SBUF->SBUF) of a copy's throughput (§6.5)."""
    dst, src = _dst_src(ev)
    dma = hw.cost.dma
    if not hw.capabilities.dma_transpose_path:
        return transfer(ev, hw, dst, [src], pieces=split(dst, [src], transpose=True, element_transpose=True))
    return transfer(ev, hw, dst, [src], factor=transpose_efficiency(dma, src),
                    pieces=split(dst, [src], transpose=True))


def transpose_efficiency(dma, src) -> float:
    """DMA-transpose throughput relative to a copy: HBM->SBUF or SBUF->SBUF (§6.5)."""
    return dma.transpose_hbm_efficiency if src.kind is MemoryKind.HBM else dma.transpose_sbuf_efficiency


@cost_rule("dma_compute")
def dma_compute(ev, hw) -> Cost:
    """[GAP] chosen: every source streams through the DMA (`len(srcs)` x dst bytes) at `rmw_efficiency`."""
    dst = named(ev, "dst")
    srcs = [o for o in inputs(ev) if o is not dst]
    return transfer(ev, hw, dst, srcs, factor=hw.cost.dma.rmw_efficiency,
                    size_bytes=dst.size_bytes * max(1, len(srcs)))


@cost_rule("all_to_all_v", "all_gather_v", "all_to_all_v_trigger", "all_gather_v_trigger")
def variable_collective(ev, hw) -> Cost:
    """[GAP] chosen (one rank): a copy of the whole source (the moved chunk is known only at run time)."""
    dst, src = _dst_src(ev)
    return transfer(ev, hw, dst, [src])


@cost_rule("all_to_all_v_prepare", "all_gather_v_prepare")
def variable_collective_prepare(ev, hw) -> Cost:
    """[GAP] chosen: the metadata setup is a read of the metadata tensor."""
    src = inputs(ev)[0]
    return transfer(ev, hw, src, [src])


@cost_rule("sendrecv")
def sendrecv(ev, hw) -> Cost:
    """[GAP] chosen: an SBUF-to-SBUF copy of `src` to the peer core."""
    dst, src = _dst_src(ev)
    return transfer(ev, hw, dst or src, [src])

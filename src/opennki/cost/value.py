"""Cost layer: the small frozen values cost rules return. Imports events only.

A `Cost` says what one instruction asks of the machine: how long it occupies its engine, the work it does
(flops, element operations, bytes) and, for DMAs, a `DmaWork` describing the transfer so the scheduler can
place it on the DMA engines that own its partitions. Costs add up (`__add__`), which is how totals per engine
or per kernel line are formed.
"""

from __future__ import annotations

from dataclasses import dataclass

from opennki.events import Engine


@dataclass(frozen=True)
class DmaWork:
    """One DMA transfer.

    Fields:
        size_bytes: bytes moved (destination side).
        descriptor_bytes: bytes of each descriptor (contiguous piece) the transfer is made of.
        partition_start / partition_count: on-chip partitions it touches, which pick the DMA engines (None: an
            HBM-to-HBM transfer, spread over all engines).
        efficiency: relative throughput (curve value times mode factors), in (0, 1].
        trigger: engine whose instruction stream issues the DMA.
        dge: descriptor generation: "none" (pre-computed), "hwdge" or "swdge".
        queue: the DMA queue's name, as the profiler labels it.
        hbm_read_bytes / hbm_write_bytes: HBM traffic.
        descriptors: how many descriptors the transfer splits into.
        path: "copy", "strided" (element descriptors), "transpose" (the DMA transpose path) or "indirect".
        partition_bytes: bytes per partition of its on-chip side (the efficiency curve's x).
    """

    size_bytes: int
    descriptor_bytes: float
    partition_start: int | None
    partition_count: int | None
    efficiency: float
    trigger: Engine
    dge: str
    queue: str
    hbm_read_bytes: int
    hbm_write_bytes: int
    descriptors: int = 1
    path: str = "copy"
    partition_bytes: float = 0.0


@dataclass(frozen=True)
class Cost:
    """What one instruction costs (or, added up, a group of instructions).

    Fields:
        engine: the engine it occupies (None for a sum over several engines).
        busy_ns: engine occupancy; for the Tensor Engine the MultiplyMoving part, for a DMA the time the
            triggering engine spends issuing it.
        load_stationary_ns: Tensor Engine LoadStationary time (overlaps the previous MultiplyMoving; skipped
            when the stationary operand is already loaded).
        flops: matmul flops (2 per multiply-accumulate), transposes excluded.
        transpose_flops: flops of matmuls that only transpose.
        elem_ops: element operations of the other engines (one per element per ALU stage).
        dma: the transfer, for DMA instructions.
        table: the Scalar Engine function table the instruction needs (None: no table).
        perf_mode: "2x" / "4x" when a fast mode applies, as the profiler labels it.
        is_transpose: a Tensor Engine transpose (counted apart in the profile).
    """

    engine: Engine | None
    busy_ns: float = 0.0
    load_stationary_ns: float = 0.0
    flops: float = 0.0
    transpose_flops: float = 0.0
    elem_ops: float = 0.0
    dma: DmaWork | None = None
    table: str | None = None
    perf_mode: str | None = None
    is_transpose: bool = False

    def __add__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.engine if self.engine is other.engine else None,
                    self.busy_ns + other.busy_ns,
                    self.load_stationary_ns + other.load_stationary_ns,
                    self.flops + other.flops,
                    self.transpose_flops + other.transpose_flops,
                    self.elem_ops + other.elem_ops)

    def __radd__(self, other):
        if other == 0:          # sum(costs)
            return self
        return NotImplemented

"""Hardware layer: the cost-model parameters of a NeuronCore, as typed and validated records.

Imports nothing from opennki. Every number lives in the per-target modules (trn1.py, trn2.py, trn3.py) next
to a comment naming its source in spec/hardware.md or spec/isa.md §11; this module only defines the record
types, checks that values are sane, and derives the few quantities every client needs (peak rates, the DMA
efficiency at a given transfer size). Units are in the field names: `_ghz`, `_cycles`, `_ns`,
`_bytes_per_ns` (= GB/s), `_bytes`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field


def _positive(owner: str, **values) -> None:
    for name, value in values.items():
        if value is None or not value > 0:
            raise ValueError(f"{owner}.{name} must be positive, got {value!r}")


def _non_negative(owner: str, **values) -> None:
    for name, value in values.items():
        if value is None or value < 0:
            raise ValueError(f"{owner}.{name} must be >= 0, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class EngineCost:
    """An instruction-stream engine (Vector, Scalar, GpSimd or the Sync sequencer).

    Fields:
        clock_ghz: engine clock; one "engine cycle" of the cost formulas lasts 1/clock_ghz ns.
        min_ii_cycles: MIN_II, the minimum initiation interval of one instruction.
        dependency_overhead_cycles: extra latency an instruction pays when it waits for a producer (a
            semaphore wait plus the pipeline refill): the "+100 cycles when each instruction depends on the
            previous one" rule.
        elems_per_cycle: elements per partition per cycle on the plain (non fast-mode) path.
    """

    clock_ghz: float
    min_ii_cycles: int = 64                  # hardware.md §5.1 MIN_II "roughly 64 engine cycles"
    dependency_overhead_cycles: int = 100    # hardware.md §5.1 "+100 engine cycles"
    elems_per_cycle: float = 1.0             # hardware.md §5.1 "~N cycles" for N elements per partition

    def __post_init__(self):
        _positive(type(self).__name__, clock_ghz=self.clock_ghz, elems_per_cycle=self.elems_per_cycle)
        _non_negative(type(self).__name__, min_ii_cycles=self.min_ii_cycles,
                      dependency_overhead_cycles=self.dependency_overhead_cycles)

    def ns(self, cycles: float) -> float:
        return cycles / self.clock_ghz


@dataclass(frozen=True, kw_only=True)
class VectorCost(EngineCost):
    """The Vector Engine (DVE) and its performance modes.

    Fields:
        fast_dtypes: dtypes that qualify for the perf modes (16-bit floats; fp8 too on NeuronCore-v4).
        copy_fast_factor: speed-up of tensor_copy / tensor_scalar with SBUF in and out, fast dtypes and a
            contiguous innermost dim (1 = no perf mode on this generation).
        copy_half_fast_factor: the same when only partly eligible (strided, or one operand in PSUM).
        tensor_tensor_fast_factor: speed-up of tensor_tensor with both inputs in SBUF and all fast dtypes.
        exponential_speedup: `exponential` throughput relative to a Scalar Engine `activation(exp)`.
        quantize_elems_per_cycle: `quantize_mx` elements per partition per cycle.
        rand_elems_per_cycle: `rand2` 32-bit values per lane per cycle.
    """

    fast_dtypes: tuple[str, ...] = ("bfloat16", "float16")
    copy_fast_factor: float = 1.0
    copy_half_fast_factor: float = 1.0
    tensor_tensor_fast_factor: float = 1.0
    exponential_speedup: float = 1.0
    quantize_elems_per_cycle: float = 1.0
    rand_elems_per_cycle: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        _positive(type(self).__name__, copy_fast_factor=self.copy_fast_factor,
                  copy_half_fast_factor=self.copy_half_fast_factor,
                  tensor_tensor_fast_factor=self.tensor_tensor_fast_factor,
                  exponential_speedup=self.exponential_speedup,
                  quantize_elems_per_cycle=self.quantize_elems_per_cycle,
                  rand_elems_per_cycle=self.rand_elems_per_cycle)
        if self.copy_half_fast_factor > self.copy_fast_factor:
            raise ValueError("VectorCost: the partial perf mode cannot beat the full one")


@dataclass(frozen=True, kw_only=True)
class ScalarCost(EngineCost):
    """The Scalar Engine (ACT).

    Fields:
        read_accumulator_cycles: `ActReadAccumulator`, the extra instruction that copies the reduce registers
            out (`activation_reduce`, `reduce_res=`).
        table_load_ns: an activation-function table load, paid when the engine switches to a function whose
            table is not loaded (0 disables it).
        tableless_functions: functions that need no table (pure data movement / affine).
        copy_fast_factor: speed-up of 16-bit tensor_copy / tensor_scalar on ACT (NeuronCore-v4).
        fast_dtypes: dtypes that qualify for copy_fast_factor.
    """

    read_accumulator_cycles: int = 64        # hardware.md §5.4 ActReadAccumulator ~64 cycles
    table_load_ns: float = 0.0
    tableless_functions: tuple[str, ...] = ("copy", "identity", "bypass")
    copy_fast_factor: float = 1.0
    fast_dtypes: tuple[str, ...] = ("bfloat16", "float16")

    def __post_init__(self):
        super().__post_init__()
        _non_negative(type(self).__name__, read_accumulator_cycles=self.read_accumulator_cycles,
                      table_load_ns=self.table_load_ns)
        _positive(type(self).__name__, copy_fast_factor=self.copy_fast_factor)


@dataclass(frozen=True, kw_only=True)
class GpSimdCost(EngineCost):
    """The GpSimd Engine (POOL): 8 SIMD cores, each wired to 16 partitions, 32 bits per partition per cycle.

    Fields:
        start_cycles: GPSIMD_START, the fixed start-up of a GpSimd instruction.
        min_ii_dynamic_cycles: MIN_II_DYNAMIC, the floor of copies with run-time addresses.
        lane_bits: bits per partition per cycle (so 16-bit data moves 2 and 8-bit data 4 elements).
    """

    start_cycles: int = 150                  # hardware.md §5.1 GPSIMD_START
    min_ii_dynamic_cycles: int = 600         # hardware.md §5.1 MIN_II_DYNAMIC
    lane_bits: int = 32                      # hardware.md §5.4: 32 bits per partition per cycle

    def __post_init__(self):
        super().__post_init__()
        _non_negative(type(self).__name__, start_cycles=self.start_cycles,
                      min_ii_dynamic_cycles=self.min_ii_dynamic_cycles)
        _positive(type(self).__name__, lane_bits=self.lane_bits)

    def elems_per_cycle_for(self, itemsize: int) -> float:
        return max(1.0, self.lane_bits / (8 * max(itemsize, 1)))


@dataclass(frozen=True, kw_only=True)
class TensorEngineCost:
    """The Tensor Engine (PE): a rows x columns systolic array.

    Fields:
        clock_ghz: PE clock.
        rows / columns: array size (contraction partitions x stationary columns).
        mm_init_cycles: MM_INIT_LATENCY, the floor of a MultiplyMoving pass (`max(min(64, M), N)`).
        fp32_factor: fp32 operands take this many passes of the bf16 cost.
        load_stationary_speedup: LoadStationary runs this much faster than a MultiplyMoving of the same
            free size (its cycles are M / speedup); it overlaps the previous MultiplyMoving.
        double_row_factor: FP8 `perf_mode=double_row` contraction multiplier (None: not on this generation).
        mx_factor: `nc_matmul_mx` throughput relative to bf16 (None: not on this generation).
        transpose_fp32_factor: passes of an fp32 transpose (`nc_transpose` / `is_transpose`).
        transpose_speedup: extra throughput of long transpose chains (background transpose).
        dependency_overhead_cycles: latency an MM pays when it waits for a producer on another engine.
        throttle_ramp_ns: dI/dt throttling: after an idle stretch the PE starts at `throttle_start_fraction`
            of its rate and ramps linearly to full over this time (0 disables it).
        throttle_start_fraction: the rate the ramp starts from.
        throttle_idle_ns: an idle gap at least this long re-engages the throttle.
    """

    clock_ghz: float
    rows: int = 128                          # hardware.md §4: 128 x 128 systolic array
    columns: int = 128
    mm_init_cycles: int = 64                 # hardware.md §4 MM_INIT_LATENCY
    fp32_factor: float = 4.0                 # hardware.md §4 fp32 ~4x bf16
    load_stationary_speedup: float = 4.0     # hardware.md §4 LoadStationary up to 4x faster
    double_row_factor: float | None = None
    mx_factor: float | None = None
    transpose_fp32_factor: float = 4.0
    transpose_speedup: float = 1.0
    dependency_overhead_cycles: int = 64
    throttle_ramp_ns: float = 0.0
    throttle_start_fraction: float = 0.5
    throttle_idle_ns: float = 1500.0

    def __post_init__(self):
        name = type(self).__name__
        _positive(name, clock_ghz=self.clock_ghz, rows=self.rows, columns=self.columns,
                  fp32_factor=self.fp32_factor, load_stationary_speedup=self.load_stationary_speedup,
                  transpose_fp32_factor=self.transpose_fp32_factor, transpose_speedup=self.transpose_speedup,
                  throttle_idle_ns=self.throttle_idle_ns)
        _non_negative(name, mm_init_cycles=self.mm_init_cycles, throttle_ramp_ns=self.throttle_ramp_ns,
                      dependency_overhead_cycles=self.dependency_overhead_cycles)
        if not 0 < self.throttle_start_fraction <= 1:
            raise ValueError(f"{name}.throttle_start_fraction must be in (0, 1]")

    def ns(self, cycles: float) -> float:
        return cycles / self.clock_ghz

    @property
    def peak_bf16_flops_per_ns(self) -> float:
        """2 flops per MAC, one MAC per PE cell per cycle (bf16/fp16/tf32)."""
        return 2.0 * self.rows * self.columns * self.clock_ghz


@dataclass(frozen=True, kw_only=True)
class DmaCost:
    """The DMA engines of one NeuronCore.

    Fields:
        engines: DMA engines per NeuronCore; a transfer is split over the engines that own its partitions.
        queues_per_engine: hardware queues per engine.
        partitions_per_engine: partitions each engine moves for a 128-partition tile (128 / engines).
        engine_bandwidth_bytes_per_ns: sustained bandwidth of one engine at full efficiency.
        fixed_latency_ns: trigger-to-data setup of one transfer (descriptors, semaphores). A queue sets up one
            transfer at a time, overlapping the previous transfer's data, so a stream of same-size transfers
            on one queue takes max(setup, data) each: the shape of the efficiency curve (`setup_ns_from_curve`).
        efficiency_curve: (bytes per partition of a transfer, relative throughput) points, increasing;
            interpolated log-linearly, 1.0 above the last point. Below the first point a transfer is taken to
            last as long as one at the first point (time-flat, as the curve itself is from 32 B to 1 KiB):
            `efficiency(x)` is then proportional to x. This is the stream throughput of whole transfers,
            their per-transfer overhead included; it is not a per-descriptor figure.
        descriptor_ns: engine time of one descriptor (one contiguous piece on both sides) beyond its bytes at
            `engine_bandwidth_bytes_per_ns`: what element-strided, transposing and gathering transfers pay
            per piece.
        trigger_cycles: cycles the triggering engine spends issuing a DMA with pre-computed descriptors.
        hwdge_issue_ns: descriptor generation time of a hardware-DGE DMA (None: no hardware DGE).
        dge_instances: hardware DGE blocks per NeuronCore.
        transpose_hbm_efficiency / transpose_sbuf_efficiency: DMA-transpose throughput relative to a copy,
            HBM->SBUF and SBUF->SBUF.
        rmw_efficiency: throughput of a read-modify-write (accumulating) DMA relative to a copy.
    """

    engines: int = 16                        # hardware.md §6.1: 16 DMA engines per NeuronCore
    queues_per_engine: int = 16              # hardware.md §6.1
    partitions_per_engine: int = 8           # hardware.md §6.1: 128 / 16
    engine_bandwidth_bytes_per_ns: float
    fixed_latency_ns: float
    efficiency_curve: tuple[tuple[int, float], ...]
    descriptor_ns: float = 0.0
    trigger_cycles: int = 64                 # [GAP] choice: one MIN_II of the triggering sequencer
    hwdge_issue_ns: float | None = None
    dge_instances: int = 2                   # hardware.md §6.1: 2 hardware DGE instances per NC
    transpose_hbm_efficiency: float = 1.0
    transpose_sbuf_efficiency: float = 1.0
    rmw_efficiency: float = 0.5
    _sizes: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        name = type(self).__name__
        _positive(name, engines=self.engines, queues_per_engine=self.queues_per_engine,
                  partitions_per_engine=self.partitions_per_engine,
                  engine_bandwidth_bytes_per_ns=self.engine_bandwidth_bytes_per_ns,
                  dge_instances=self.dge_instances)
        _non_negative(name, fixed_latency_ns=self.fixed_latency_ns, trigger_cycles=self.trigger_cycles,
                      descriptor_ns=self.descriptor_ns)
        if self.engines * self.partitions_per_engine != 128:
            raise ValueError(f"{name}: engines x partitions_per_engine must cover 128 partitions")
        curve = self.efficiency_curve
        if len(curve) < 2:
            raise ValueError(f"{name}.efficiency_curve needs at least two points")
        for (b0, e0), (b1, e1) in zip(curve, curve[1:]):
            if not (0 < b0 < b1 and 0 < e0 <= e1 <= 1.0):
                raise ValueError(f"{name}.efficiency_curve must increase in size and efficiency (<= 1)")
        for eff in (self.transpose_hbm_efficiency, self.transpose_sbuf_efficiency, self.rmw_efficiency):
            if not 0 < eff <= 1:
                raise ValueError(f"{name}: efficiencies must be in (0, 1]")
        if self.hwdge_issue_ns is not None and self.hwdge_issue_ns < 0:
            raise ValueError(f"{name}.hwdge_issue_ns must be >= 0")
        object.__setattr__(self, "_sizes", tuple(math.log(b) for b, _ in curve))

    @property
    def aggregate_bandwidth_bytes_per_ns(self) -> float:
        return self.engines * self.engine_bandwidth_bytes_per_ns

    def engine_span(self, partition_start: int | None, partition_count: int | None) -> tuple[int, int]:
        """(first, last) DMA engine of a transfer touching on-chip partitions [start, start + count), each
        engine owning `partitions_per_engine` consecutive partitions; all engines when there is no on-chip
        side (None)."""
        if partition_start is None:
            return 0, self.engines - 1
        first = partition_start // self.partitions_per_engine
        last = (partition_start + max(partition_count or 1, 1) - 1) // self.partitions_per_engine
        return first, min(last, self.engines - 1)

    def efficiency(self, partition_bytes: float) -> float:
        """Relative stream throughput of transfers moving `partition_bytes` per partition (class docstring:
        time-flat below the curve's first point)."""
        curve = self.efficiency_curve
        if partition_bytes <= curve[0][0]:
            return curve[0][1] * max(partition_bytes, 1.0) / curve[0][0]
        if partition_bytes >= curve[-1][0]:
            return curve[-1][1]
        x = math.log(partition_bytes)
        i = bisect.bisect_right(self._sizes, x)
        x0, x1 = self._sizes[i - 1], self._sizes[i]
        e0, e1 = curve[i - 1][1], curve[i][1]
        return e0 + (e1 - e0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True, kw_only=True)
class CostParams:
    """Everything the cost model needs to know about one NeuronCore target.

    Fields:
        tensor / vector / scalar / gpsimd / sync: the engines.
        dma: the DMA engines.
        hbm_bandwidth_bytes_per_ns: HBM bandwidth available to one NeuronCore (its share of the device).
        launch_floor_ns: the shortest device-side execution of any kernel (launch and tear-down).
    """

    tensor: TensorEngineCost
    vector: VectorCost
    scalar: ScalarCost
    gpsimd: GpSimdCost
    sync: EngineCost
    dma: DmaCost
    hbm_bandwidth_bytes_per_ns: float
    launch_floor_ns: float

    def __post_init__(self):
        _positive(type(self).__name__, hbm_bandwidth_bytes_per_ns=self.hbm_bandwidth_bytes_per_ns)
        _non_negative(type(self).__name__, launch_floor_ns=self.launch_floor_ns)

    def peak_flops_per_ns(self, dtype: str, *, mode: str | None = None) -> float:
        """Tensor Engine peak for operands of `dtype` (and `mode`: "double_row" / "mx")."""
        pe = self.tensor
        base = pe.peak_bf16_flops_per_ns
        if mode == "mx" and pe.mx_factor:
            return base * pe.mx_factor
        if dtype in ("float32",):
            return base / pe.fp32_factor
        if dtype.startswith("float8") and pe.double_row_factor:
            return base * pe.double_row_factor
        return base


def setup_ns_from_curve(curve, bandwidth_bytes_per_ns: float, partitions_per_engine: int = 8) -> float:
    """The per-transfer setup time the efficiency curve implies: a stream of [128, x] transfers takes
    `partitions_per_engine * x / (bandwidth * efficiency(x))` per transfer on each engine, which is flat
    (setup-bound) wherever the data alone takes less; the mean over those points."""
    times = [partitions_per_engine * x / (bandwidth_bytes_per_ns * eff) for x, eff in curve]
    flat = [t for (x, _), t in zip(curve, times) if partitions_per_engine * x / bandwidth_bytes_per_ns < 0.9 * t]
    return sum(flat) / len(flat)


# Relative DMA throughput by bytes per partition for 128-partition transfers, digitised from the DMA intro's
# throughput plot (spec/hardware.md §6.3 [OBS], H:nki/img/overviews/nki-dma-intro-1.jpg; generation not
# stated, the page's examples are Trn2). Used for every generation: no per-generation curve is published.
DMA_EFFICIENCY_CURVE: tuple[tuple[int, float], ...] = (
    (32, 0.014), (64, 0.026), (128, 0.050), (256, 0.103), (512, 0.209), (1024, 0.424), (2048, 0.813),
    (4096, 0.966), (8192, 0.983), (16384, 0.990), (32768, 1.000),
)

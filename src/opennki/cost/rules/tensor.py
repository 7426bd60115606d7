"""Cost layer: Tensor Engine rules (spec/isa.md §11.1, spec/hardware.md §4). Imports events, hw and common.

A matmul is two PE instructions: LoadStationary (moves the stationary [K, M] into the array, M / 4 cycles
with fast LoadStationary) and MultiplyMoving (streams the moving [K, N] through it). The ISA's average cost
of a back-to-back matmul, `max(min(64, M), N)` cycles, is the MultiplyMoving part; LoadStationary overlaps
the previous MultiplyMoving (background LoadStationary) and is skipped by the scheduler when the stationary
operand is already loaded. fp32 operands take `fp32_factor` passes (halved by an `is_*_onezero` hint, "could
lead to 2x better performance").
"""

from __future__ import annotations

from opennki.cost.rules.registry import cost_rule
from opennki.cost.rules.common import active_ratio, named, param_name
from opennki.cost.value import Cost
from opennki.events import Engine

_FP32 = ("float32",)


def _mm_cycles(pe, M: float, N: float) -> float:
    return max(min(pe.mm_init_cycles, M), N)


@cost_rule("nc_matmul")
def nc_matmul(ev, hw) -> Cost:
    """MultiplyMoving `max(min(64, M), N)` PE cycles (x fp32_factor for fp32, /2 with a onezero hint);
    double_row fp8 contracts 2K in the same time; `is_transpose` costs like `nc_transpose`."""
    pe = hw.cost.tensor
    st = named(ev, "stationary")
    mv = named(ev, "moving")
    K = st.partitions
    double_row = param_name(ev, "perf_mode") in ("double_row", "double_row_gen3")
    pairs = 2 if double_row else 1
    M = st.free_elems / pairs
    N = mv.free_elems / pairs * active_ratio(ev)
    if ev.params.get("is_transpose"):
        return _transpose_cost(pe, st.itemsize, K, M, hw)
    factor = 1.0
    if st.dtype in _FP32 or mv.dtype in _FP32:
        factor = pe.fp32_factor
        if ev.params.get("is_stationary_onezero") or ev.params.get("is_moving_onezero"):
            factor /= 2.0
    return Cost(Engine.TENSOR, busy_ns=pe.ns(_mm_cycles(pe, M, N) * factor),
                load_stationary_ns=pe.ns(max(M / pe.load_stationary_speedup, 1.0) * factor),
                flops=2.0 * K * pairs * M * N)


@cost_rule("nc_matmul_mx")
def nc_matmul_mx(ev, hw) -> Cost:
    """MX matmul (v4): each packed element holds 4 values along K, so one pass contracts 4K at the bf16
    pass time: `max(min(64, M), N)` cycles for 2 * 4K * M * N flops."""
    pe = hw.cost.tensor
    st = named(ev, "stationary")
    mv = named(ev, "moving")
    K = st.partitions * (pe.mx_factor or 4.0)
    M, N = st.free_elems, mv.free_elems * active_ratio(ev)
    return Cost(Engine.TENSOR, busy_ns=pe.ns(_mm_cycles(pe, M, N)),
                load_stationary_ns=pe.ns(max(M / pe.load_stationary_speedup, 1.0)),
                flops=2.0 * K * M * N)


def _transpose_cost(pe, itemsize: int, P: float, F: float, hw) -> Cost:
    """PE transpose of [P, F]: `max(P, min(64, F))` cycles, x transpose_fp32_factor for 4-byte data,
    / transpose_speedup (v4 background transpose)."""
    factor = pe.transpose_fp32_factor if itemsize >= 4 else 1.0
    cycles = max(P, min(pe.mm_init_cycles, F)) * factor / pe.transpose_speedup
    return Cost(Engine.TENSOR, busy_ns=pe.ns(cycles), transpose_flops=2.0 * P * F * P, is_transpose=True)


@cost_rule("nc_transpose")
def nc_transpose(ev, hw) -> Cost:
    """On the Tensor Engine `max(P, min(64, F))` PE cycles; on the Vector Engine `max(MIN_II, N)` DVE
    cycles (32x32 blocks)."""
    data = named(ev, "data")
    if ev.engine is Engine.TENSOR:
        return _transpose_cost(hw.cost.tensor, data.itemsize, data.partitions, data.free_elems, hw)
    dve = hw.cost.vector
    n = data.free_elems * active_ratio(ev)
    return Cost(Engine.VECTOR, busy_ns=dve.ns(max(dve.min_ii_cycles, n / dve.elems_per_cycle)),
                elem_ops=n * data.partitions)

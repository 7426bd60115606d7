"""Cost layer: rules of the element-wise instructions (Vector Engine by default; several may run on the
Scalar or GpSimd engine too). Imports events, hw and common.

Cycles follow spec/isa.md §11.1 with `N` = elements per partition of the main input and MIN_II as the floor.
On the Vector Engine the NeuronCore-v3+ perf modes apply (spec/hardware.md §5.3): 4x (or 2x) for 16-bit
copies and tensor_scalar in SBUF, 2x for 16-bit tensor_tensor in SBUF; without a perf mode an innermost
stride above 16 bytes halves the rate. On the Scalar Engine 16-bit copies run 2x on v4. On GpSimd each
partition moves 32 bits per cycle (2 elements of 16-bit data).
"""

from __future__ import annotations

from opennki.cost.rules.registry import cost_rule
from opennki.cost.rules.common import (SIXTEEN_BIT_FLOATS, elems, find, in_memory, inputs, is_contiguous, named,
                                       is_strided, main_input, main_output, outputs, param_name)
from opennki.cost.value import Cost
from opennki.events import Engine, MemoryKind

SBUF, PSUM = MemoryKind.SBUF, MemoryKind.PSUM


def _tensors(ev):
    return inputs(ev) + outputs(ev)


def copy_speedup(ev, hw) -> tuple[float, str | None]:
    """Perf-mode factor of a tensor_copy / tensor_scalar-like instruction on its engine."""
    data, dst = main_input(ev), main_output(ev)
    if data is None or dst is None:
        return 1.0, None
    if ev.engine is Engine.VECTOR:
        dve = hw.cost.vector
        if not (data.dtype in dve.fast_dtypes and dst.dtype in dve.fast_dtypes) or dve.copy_fast_factor == 1:
            return 1.0, None
        contiguous = is_contiguous(data) and is_contiguous(dst)
        both_sbuf = in_memory(data, SBUF) and in_memory(dst, SBUF)
        if both_sbuf and contiguous:
            return dve.copy_fast_factor, f"{dve.copy_fast_factor:g}x"
        if both_sbuf or contiguous:
            return dve.copy_half_fast_factor, f"{dve.copy_half_fast_factor:g}x"
        return 1.0, None
    if ev.engine is Engine.SCALAR:
        act = hw.cost.scalar
        if act.copy_fast_factor > 1 and data.dtype in act.fast_dtypes and dst.dtype in act.fast_dtypes:
            return act.copy_fast_factor, f"{act.copy_fast_factor:g}x"
    return 1.0, None


def elementwise(ev, hw, work: float, *, speedup: float = 1.0, perf_mode: str | None = None,
                extra_cycles: float = 0.0, floor_cycles: float | None = None, stages: int = 1) -> Cost:
    """`max(floor, work / rate) + extra` cycles on the instruction's engine, where `work` counts element
    passes per partition (N for one input, 2N for two) and the rate is the engine's elements per cycle times
    `speedup` (halved when a strided operand prevents a perf mode)."""
    engine = ev.engine if ev.engine in (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD) else Engine.VECTOR
    c = hw.cost
    spec = {Engine.VECTOR: c.vector, Engine.SCALAR: c.scalar, Engine.GPSIMD: c.gpsimd}[engine]
    if engine is Engine.GPSIMD:
        rate = spec.elems_per_cycle_for(max((o.itemsize for o in _tensors(ev)), default=4))
    else:
        rate = spec.elems_per_cycle
    rate *= speedup
    if speedup == 1.0 and any(is_strided(o) for o in _tensors(ev)):
        rate /= 2.0
    floor = spec.min_ii_cycles if floor_cycles is None else floor_cycles
    cycles = max(floor, work / rate) + extra_cycles
    main = main_input(ev)
    partitions = main.partitions if main is not None else 1
    n = work if stages == 1 else work / stages
    return Cost(engine, busy_ns=spec.ns(cycles), elem_ops=n * partitions * stages, perf_mode=perf_mode)


def _readout(ev, hw) -> float:
    """MIN_II extra cycles to copy the accumulator registers out when `reduce_res` is written."""
    return hw.cost.vector.min_ii_cycles if find(ev, "reduce_res") is not None else 0.0


@cost_rule("tensor_tensor")
def tensor_tensor(ev, hw) -> Cost:
    """`max(MIN_II, N)` if one input is in PSUM and the other in SBUF, or both in SBUF with all-bf16
    add/multiply/subtract at unit stride; else `max(MIN_II, 2N)`. v3+: 2x with both inputs in SBUF and all
    16-bit. GpSimd: two passes at its element rate."""
    a, b = named(ev, "data1"), named(ev, "data2")
    n = max(elems(ev, a), elems(ev, b))
    if ev.engine is not Engine.VECTOR:
        return elementwise(ev, hw, 2 * n, stages=2)
    dst = main_output(ev)
    dve = hw.cost.vector
    tensors = [a, b] + ([dst] if dst is not None else [])
    if (dve.tensor_tensor_fast_factor > 1 and in_memory(a, SBUF) and in_memory(b, SBUF)
            and all(o.dtype in dve.fast_dtypes for o in tensors)):
        f = dve.tensor_tensor_fast_factor
        return elementwise(ev, hw, 2 * n, speedup=f, perf_mode=f"{f:g}x", stages=2)
    split = {a.kind, b.kind} == {SBUF, PSUM}
    bf16_fast = (in_memory(a, SBUF) and in_memory(b, SBUF) and all(o.dtype == "bfloat16" for o in tensors)
                 and param_name(ev, "op") in ("add", "multiply", "subtract")
                 and all(is_contiguous(o) for o in tensors))
    return elementwise(ev, hw, n if (split or bf16_fast) else 2 * n, stages=1 if (split or bf16_fast) else 2)


@cost_rule("tensor_scalar", "tensor_copy")
def tensor_scalar(ev, hw) -> Cost:
    """`max(MIN_II, N)` on any engine (one or two ALU stages cost the same); v3+ DVE 4x/2x perf modes,
    v4 ACT 2x for 16-bit data."""
    f, mode = copy_speedup(ev, hw)
    return elementwise(ev, hw, elems(ev, main_input(ev, "data", "src")), speedup=f, perf_mode=mode)


@cost_rule("scalar_tensor_tensor")
def scalar_tensor_tensor(ev, hw) -> Cost:
    """`N` if data and operand1 are bf16, op0=subtract, op1=multiply and N even; else `2N` (MIN_II floor
    added: every instruction has one)."""
    data, op1 = named(ev, "data"), named(ev, "operand1")
    n = elems(ev, data)
    fast = (data.dtype == op1.dtype == "bfloat16"
            and param_name(ev, "op0") == "subtract" and param_name(ev, "op1") == "multiply" and n % 2 == 0)
    return elementwise(ev, hw, n if fast else 2 * n, stages=2)


@cost_rule("tensor_reduce")
def tensor_reduce(ev, hw) -> Cost:
    """`N/2` if input and output are bf16 and op is add or max; else `N`."""
    data, dst = main_input(ev, "data"), main_output(ev)
    n = elems(ev, data)
    fast = (data.dtype == "bfloat16" and dst is not None and dst.dtype == "bfloat16"
            and param_name(ev, "op") in ("add", "max", "maximum"))
    return elementwise(ev, hw, n / 2 if fast else n)


@cost_rule("tensor_tensor_scan")
def tensor_tensor_scan(ev, hw) -> Cost:
    """`max(MIN_II, 2N)`."""
    return elementwise(ev, hw, 2 * elems(ev, main_input(ev, "data0")), stages=2)


@cost_rule("tensor_scalar_reduce")
def tensor_scalar_reduce(ev, hw) -> Cost:
    """`max(MIN_II, N) + MIN_II`."""
    return elementwise(ev, hw, elems(ev, main_input(ev, "data")), extra_cycles=hw.cost.vector.min_ii_cycles)


@cost_rule("tensor_scalar_cumulative")
def tensor_scalar_cumulative(ev, hw) -> Cost:
    """[GAP] chosen: a one-input scan with the accumulator, `max(MIN_II, N)` (+ MIN_II read-out with
    `reduce_res`)."""
    return elementwise(ev, hw, elems(ev, main_input(ev, "src")), extra_cycles=_readout(ev, hw))


@cost_rule("reciprocal")
def reciprocal(ev, hw) -> Cost:
    """DVE `max(MIN_II, 8N)`; on ACT `max(MIN_II, N)`."""
    n = elems(ev, main_input(ev, "data"))
    return elementwise(ev, hw, n if ev.engine is Engine.SCALAR else 8 * n)


@cost_rule("bn_stats")
def bn_stats(ev, hw) -> Cost:
    """`max(MIN_II, N)` (N <= 512)."""
    return elementwise(ev, hw, elems(ev, main_input(ev, "data")))


@cost_rule("bn_aggr")
def bn_aggr(ev, hw) -> Cost:
    """`max(MIN_II, 13 * (N / 3))`."""
    return elementwise(ev, hw, 13 * elems(ev, main_input(ev, "data")) / 3)


@cost_rule("dropout", "range_select", "nc_stream_shuffle", "nc_match_replace8", "max8", "nc_find_index8", "rng")
def one_pass(ev, hw) -> Cost:
    """`max(MIN_II, N)`: dropout, range_select, nc_stream_shuffle (spec); nc_match_replace8 (printed
    `min(MIN_II, N)` read as max, isa.md C13); max8 / nc_find_index8 (`N`, MIN_II floor added); rng ([GAP]
    chosen: one pass over dst). range_select adds the MIN_II read-out when it writes `reduce_res`."""
    extra = _readout(ev, hw) if ev.opcode == "range_select" else 0.0
    # rng reads nothing: its work is the tile it writes
    return elementwise(ev, hw, elems(ev, main_input(ev, "on_true_tile", "data", "src", "dst")), extra_cycles=extra)


@cost_rule("memset")
def memset(ev, hw) -> Cost:
    """`max(MIN_II, N/2)` for a zero fill of bf16/fp16, else `max(MIN_II, N)`."""
    dst = main_output(ev, "dst")
    n = elems(ev, dst)
    value = ev.params.get("value", 0)
    fast = ev.engine is Engine.VECTOR and value in (0, 0.0) and dst.dtype in SIXTEEN_BIT_FLOATS
    return elementwise(ev, hw, n / 2 if fast else n)


@cost_rule("tensor_copy_predicated", "select_reduce")
def predicated(ev, hw) -> Cost:
    """`max(MIN_II, N)` when the data and the predicate sit in different memories (SBUF vs PSUM), else
    `max(MIN_II, 2N)` (isa.md C14). select_reduce: [GAP], the same rule plus the MIN_II read-out of
    `reduce_res`."""
    data = named(ev, "src", "on_true", "predicate")     # select_reduce may take an immediate on_true
    pred = named(ev, "predicate")
    n = elems(ev, data)
    split = {data.kind, pred.kind} == {SBUF, PSUM}
    extra = _readout(ev, hw) if ev.opcode == "select_reduce" else 0.0
    return elementwise(ev, hw, n if split else 2 * n, extra_cycles=extra, stages=1 if split else 2)


@cost_rule("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst")
def dynamic_copy(ev, hw) -> Cost:
    """`max(MIN_II_DYNAMIC, N)` on the executing engine."""
    return elementwise(ev, hw, elems(ev, main_input(ev, "src")),
                       floor_cycles=hw.cost.gpsimd.min_ii_dynamic_cycles)


@cost_rule("exponential")
def exponential(ev, hw) -> Cost:
    """v4 DVE exp at `exponential_speedup` x the ACT `activation(exp)` throughput: `max(MIN_II, N / 4)`
    (+ MIN_II read-out with `reduce_res`)."""
    n = elems(ev, main_input(ev, "src"))
    return elementwise(ev, hw, n / hw.cost.vector.exponential_speedup, extra_cycles=_readout(ev, hw))


@cost_rule("quantize_mx")
def quantize_mx(ev, hw) -> Cost:
    """v4: `quantize_elems_per_cycle` elements per partition per cycle."""
    n = elems(ev, main_input(ev, "src"))
    return elementwise(ev, hw, n / hw.cost.vector.quantize_elems_per_cycle)


@cost_rule("rand2")
def rand2(ev, hw) -> Cost:
    """v4 XORWOW: `rand_elems_per_cycle` 32-bit values per lane per cycle."""
    n = elems(ev, main_output(ev, "dst"))
    return elementwise(ev, hw, n / hw.cost.vector.rand_elems_per_cycle)


@cost_rule("psum_spill", "psum_reload")
def psum_staging_copy(ev, hw) -> Cost:
    """The copy a compiler issues to spill an oversubscribed PSUM tile to SBUF or to bring it back
    (machine/memory.py): a Vector Engine copy of the whole tile, `max(MIN_II, N)`, with no perf mode (one
    side is PSUM)."""
    return elementwise(ev, hw, elems(ev, main_input(ev)))

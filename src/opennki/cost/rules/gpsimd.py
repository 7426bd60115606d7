"""Cost layer: GpSimd Engine (POOL) rules (spec/isa.md §6.17-6.30, §11.1). Imports events, hw and common.

GpSimd has no general cost rule; the documented ones are `GPSIMD_START + N` (iota, affine_select), the
local_gather formula and topk. The undocumented ones are given the same shape, `GPSIMD_START + work`, with
the work each docstring names. Work counts elements per partition at 32 bits per partition per cycle.
"""

from __future__ import annotations

import math

from opennki.cost.rules.registry import cost_rule
from opennki.cost.rules.common import elems, main_input, main_output, named
from opennki.cost.value import Cost
from opennki.events import Engine


def pool(ev, hw, work: float, *, starts: int = 1) -> Cost:
    """`starts * GPSIMD_START + work / rate` GpSimd cycles."""
    g = hw.cost.gpsimd
    main = main_input(ev) or main_output(ev)
    rate = g.elems_per_cycle_for(main.itemsize if main is not None else 4)
    cycles = starts * g.start_cycles + work / rate
    partitions = main.partitions if main is not None else 1
    return Cost(Engine.GPSIMD, busy_ns=g.ns(cycles), elem_ops=work * partitions)


@cost_rule("iota")
def iota(ev, hw) -> Cost:
    """`150 + N` (N = elements per partition of dst)."""
    return pool(ev, hw, elems(ev, main_output(ev, "dst")))


@cost_rule("affine_select")
def affine_select(ev, hw) -> Cost:
    """`GPSIMD_START + N`."""
    return pool(ev, hw, elems(ev, main_output(ev, "dst")))


@cost_rule("local_gather")
def local_gather(ev, hw) -> Cost:
    """`150 + V * k / C` with `C = ((28 + t*k) / (t*k)) / min(4 / dtype_bytes, k)`, `t = 4`; V = valid
    indices per core (`num_valid_indices`, else the index tile's elements per partition), k =
    `num_elem_per_idx`."""
    src = named(ev, "src_buffer")
    index = named(ev, "index")
    k = float(ev.params.get("num_elem_per_idx") or 1)
    valid = ev.params.get("num_valid_indices")
    V = float(valid) if isinstance(valid, (int, float)) else float(index.free_elems)
    t = 4.0
    C = ((28 + t * k) / (t * k)) / min(4.0 / max(src.itemsize, 1), k)
    g = hw.cost.gpsimd
    return Cost(Engine.GPSIMD, busy_ns=g.ns(g.start_cycles + V * k / C), elem_ops=V * k * 16)


@cost_rule("tensor_partition_reduce")
def tensor_partition_reduce(ev, hw) -> Cost:
    """[GAP] chosen: a reduction tree across partitions, `GPSIMD_START + N * ceil(log2 P)`."""
    data = main_input(ev, "data")
    levels = max(1, math.ceil(math.log2(max(data.partitions, 2))))
    return pool(ev, hw, elems(ev, data) * levels)


@cost_rule("nc_n_gather")
def nc_n_gather(ev, hw) -> Cost:
    """[GAP] chosen: it lowers to `ceil(F_dst / 512)` hardware instructions (isa.md §6.27), each paying
    GPSIMD_START, plus one cycle per gathered element per partition."""
    dst = main_output(ev, "dst")
    n = elems(ev, dst)
    return pool(ev, hw, n, starts=max(1, math.ceil(n / 512)))


@cost_rule("sequence_bounds", "nonzero_with_count")
def scan_pool(ev, hw) -> Cost:
    """[GAP] chosen: `GPSIMD_START + N` (one pass over the input)."""
    return pool(ev, hw, elems(ev, main_input(ev, "segment_ids", "src")))


@cost_rule("topk")
def topk(ev, hw) -> Cost:
    """`4 * n + K` cycles per partition, plus GPSIMD_START: n is the instruction's problem size (its `n`
    parameter: the elements of one 16-partition group's snake), K the values kept (val_dst's free size)."""
    src = main_input(ev, "src")
    n = float(ev.params["n"])
    kept = elems(ev, named(ev, "val_dst"))
    g = hw.cost.gpsimd
    return Cost(Engine.GPSIMD, busy_ns=g.ns(g.start_cycles + 4 * n + kept), elem_ops=n * src.partitions)

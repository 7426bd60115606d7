"""Cost layer: the roofline bound of a kernel. Imports hw only.

The bound is the largest of three times no schedule can beat: the matmul flops at the Tensor Engine's peak
for their dtype (fp32 at its best documented rate, with a onezero hint; fp8 at the double-row rate; MX at
4x), the HBM bytes at the HBM bandwidth, and the DMA bytes at the aggregate DMA bandwidth, each for the
launch's cores together. The detailed estimate is never below it (tested).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Roofline:
    """Lower bounds in ns, the binding one, and the kernel's arithmetic intensity.

    Fields:
        compute_ns / hbm_ns / dma_ns: the three bounds.
        bound_ns: their maximum.
        bound: "compute", "hbm" or "dma".
        arithmetic_intensity: matmul flops per HBM byte (inf without HBM traffic).
        ridge_flops_per_byte: peak bf16 flops per HBM byte of the target (compute- vs memory-bound knee).
    """

    compute_ns: float
    hbm_ns: float
    dma_ns: float
    bound_ns: float
    bound: str
    arithmetic_intensity: float
    ridge_flops_per_byte: float


def peak_for(hw, dtype: str, mode: str | None) -> float:
    """The fastest documented PE rate (flops/ns) for matmuls of `dtype` in `mode`."""
    pe = hw.cost.tensor
    base = pe.peak_bf16_flops_per_ns
    if mode == "mx":
        return base * (pe.mx_factor or 1.0)
    if dtype == "float32":
        return base * 2.0 / pe.fp32_factor          # the onezero hint halves the 4 fp32 passes
    if dtype.startswith("float8"):
        return base * (pe.double_row_factor or 1.0)
    return base


def roofline(hw, flops_by_peak: dict[float, float], hbm_bytes: float, dma_bytes: float,
             cores: int) -> Roofline:
    cores = max(1, cores)
    c = hw.cost
    compute_ns = sum(f / peak for peak, f in flops_by_peak.items()) / cores
    hbm_ns = hbm_bytes / (c.hbm_bandwidth_bytes_per_ns * cores)
    dma_ns = dma_bytes / (c.dma.aggregate_bandwidth_bytes_per_ns * cores)
    bound_ns, bound = max((compute_ns, "compute"), (hbm_ns, "hbm"), (dma_ns, "dma"))
    flops = sum(flops_by_peak.values())
    intensity = flops / hbm_bytes if hbm_bytes else float("inf")
    ridge = c.tensor.peak_bf16_flops_per_ns / c.hbm_bandwidth_bytes_per_ns
    return Roofline(compute_ns, hbm_ns, dma_ns, bound_ns, bound, intensity, ridge)

"""Front door (new generation): `nki.isa.constants`, the module NKI defines its instruction enums in (kernels
import from it: `from nki.isa.constants import oob_mode`). `nki.isa` re-exports every name.

Imports the enum definitions of the instruction layer only.
"""

from opennki.instructions.enums import (dge_mode, engine, matmul_perf_mode, nc_version, oob_mode,  # noqa: F401
                                        reduce_cmd)


class dma_engine:
    """`nisa.dma_engine`: which DMA hardware moves data (`dma`: the shared DMA rings; `gpsimd_dma`: the
    GpSimd-integrated DMA)."""

    dma = "dma"
    gpsimd_dma = "gpsimd_dma"

"""Front door (new generation): `nki.isa.constants`, the nisa enums under the module name NKI Library kernels
import them from (`from nki.isa import constants as nisa_constants`; `nisa_constants.dge_mode.hwdge`).

Imports the enums only: these are the very objects `nki.isa` exports.
"""

from opennki.instructions.enums import dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd

__all__ = ["dge_mode", "dma_engine", "engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd"]

"""Language layer: `nl.tile_size` and the other constants both generations share.

`tile_size` reads the target of the running kernel (or, outside a kernel, the one
`NEURON_PLATFORM_TARGET_OVERRIDE` selects), so kernels see the numbers of the machine they run on.
"""

from __future__ import annotations

from opennki.environment import setting
from opennki.instructions.vector_accumulate import FP32_MIN
from opennki.hw import get_target
from opennki.releases import Change, Generation
from opennki.sim.program import active


def current_target():
    """The HwConfig of the running kernel, or outside a kernel the one `NEURON_PLATFORM_TARGET_OVERRIDE`
    selects."""
    prog = active()
    return prog.hw if prog is not None else get_target()


def target_nc_version(versions):
    """The current target's NeuronCore generation as a member of `versions` (a facade's `nc_version` enum);
    a generation newer than the enum knows reads as its newest member (legacy kernels on trn3 see gen3 and
    take their newest code path, while instructions check the real target)."""
    return versions(min(current_target().nc_version, max(versions)))


# NKI 0.4 renames two misnamed tile_size attributes (the 2.30+ stubs' ".. deprecated:: 0.4.0"; spec/language.md §4);
# the legacy generation's tile_size keeps them
_TILE_SIZE_RENAMES = {
    "psum_fmax": Change("nl.tile_size.psum_fmax", "nl.tile_size.psum_bank_fmax", deprecated_in="0.4",
                        source="nki.language stub of SDK 2.30: _TileSize.psum_fmax"),
    "total_available_sbuf_size": Change("nl.tile_size.total_available_sbuf_size", "nl.tile_size.sbuf_fmax_bytes "
                                        "(per partition) or nl.tile_size.sbuf_size_bytes (total)", deprecated_in="0.4",
                                        source="nki.language stub of SDK 2.30: _TileSize.total_available_sbuf_size"),
}


def _renamed(name: str) -> None:
    prog = active()
    if prog is not None and prog.launch.generation is Generation.NEW:
        _TILE_SIZE_RENAMES[name].apply(prog.options)


class _TileSize:
    """`nl.tile_size`: instruction tile limits of the current target (spec/language.md §4)."""

    @property
    def pmax(self) -> int:
        return current_target().tiles.pmax

    @property
    def psum_fmax(self) -> int:
        """Deprecated in NKI 0.4 for the new generation (`_TILE_SIZE_RENAMES`): psum_bank_fmax."""
        _renamed("psum_fmax")
        return current_target().tiles.psum_fmax

    @property
    def psum_bank_fmax(self) -> int:
        return current_target().tiles.psum_fmax

    @property
    def psum_bank_fmax_bytes(self) -> int:
        return current_target().memory.psum_bank_bytes

    psum_fmax_bytes = psum_bank_fmax_bytes

    @property
    def psum_num_banks(self) -> int:
        """8 PSUM banks; 7 when NKI_DMA_TRANSPOSE_AS_PE_TRANSPOSE=true reserves bank 7 (trn2+)."""
        hw = current_target()
        reserved = setting("dma_transpose_as_pe_transpose")
        return hw.memory.psum_banks - (1 if reserved and hw.capabilities.dma_transpose_on_pe else 0)

    @property
    def gemm_stationary_fmax(self) -> int:
        return current_target().tiles.gemm_stationary_fmax

    @property
    def gemm_moving_fmax(self) -> int:
        return current_target().tiles.gemm_moving_fmax

    @property
    def bn_stats_fmax(self) -> int:
        return current_target().tiles.bn_stats_fmax

    @property
    def psum_min_align(self) -> int:
        return current_target().tiles.psum_min_align

    @property
    def sbuf_min_align(self) -> int:
        return current_target().tiles.sbuf_min_align

    @property
    def total_available_sbuf_size(self) -> int:
        """Usable SBUF bytes per partition (not the total, despite the name); deprecated in NKI 0.4 for the new
        generation (`_TILE_SIZE_RENAMES`)."""
        _renamed("total_available_sbuf_size")
        return current_target().memory.sbuf_usable_bytes_per_partition

    @property
    def sbuf_fmax_bytes(self) -> int:
        return current_target().memory.sbuf_usable_bytes_per_partition

    @property
    def sbuf_fmax(self) -> int:
        return current_target().memory.sbuf_usable_bytes_per_partition // 4

    @property
    def sbuf_size_bytes(self) -> int:
        mem = current_target().memory
        return mem.sbuf_bytes_per_partition * mem.partitions

    def __repr__(self) -> str:
        return f"nl.tile_size(target={current_target().name})"


tile_size = _TileSize()


class fp32:
    """`nl.fp32.min` / `nisa.fp32.min`: the most negative finite fp32 (bit pattern 0xff7fffff)."""

    min = FP32_MIN

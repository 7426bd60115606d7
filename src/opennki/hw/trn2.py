"""Hardware layer: Trainium2, NeuronCore-v3 (spec/hardware.md)."""

from opennki.hw.config import KIB, HwConfig, MemorySpec, TileLimits

TRN2 = HwConfig(
    name="trn2",
    nc_version=3,
    memory=MemorySpec(
        partitions=128,
        sbuf_bytes_per_partition=224 * KIB,            # 28 MiB / 128 (trainium2_arch.rst)
        sbuf_reserved_bytes_per_partition=16 * KIB,    # not documented for v3; the v2 figure is kept
        psum_banks=8,                                  # "remains the same at 2MiB" (trainium2_arch.rst)
        psum_bank_bytes=2 * KIB,
        hbm_bytes=12 * 1024 * 1024 * KIB,              # 96 GiB per chip, 8 NCs (derived share)
    ),
    tiles=TileLimits(),
)

"""Hardware layer: Trainium3, NeuronCore-v4 (spec/hardware.md)."""

from opennki.hw.config import KIB, HwConfig, MemorySpec, TileLimits

TRN3 = HwConfig(
    name="trn3",
    nc_version=4,
    memory=MemorySpec(
        partitions=128,
        sbuf_bytes_per_partition=256 * KIB,            # 32 MiB / 128 (trainium3_arch.rst; glossary: 256 KiB)
        sbuf_reserved_bytes_per_partition=16 * KIB,    # not documented for v4; the v2 figure is kept
        psum_banks=8,
        psum_bank_bytes=2 * KIB,
        hbm_bytes=18 * 1024 * 1024 * KIB,              # 144 GiB per chip, 8 NCs (derived share)
    ),
    # nc_matmul on v4: moving free up to 4096 for an fp32 PSUM result, 8192 for bf16 (all 8 banks), isa.md §5.1
    tiles=TileLimits(matmul_moving_max_fp32=4096, matmul_moving_max_bf16=8192),
)

"""Hardware layer: Trainium1 / Inferentia2, NeuronCore-v2 (spec/hardware.md)."""

from opennki.hw.config import KIB, HwConfig, MemorySpec, TileLimits

TRN1 = HwConfig(
    name="trn1",
    nc_version=2,
    memory=MemorySpec(
        partitions=128,
        sbuf_bytes_per_partition=192 * KIB,            # 24 MiB / 128 (trainium_inferentia2_arch.rst)
        sbuf_reserved_bytes_per_partition=16 * KIB,    # direct-allocation byte_addr < 176 KiB (nki/compiler/sbuf.py)
        psum_banks=8,                                  # 2 MiB PSUM = 128 x 8 x 2 KiB (arch guide)
        psum_bank_bytes=2 * KIB,
        hbm_bytes=16 * 1024 * 1024 * KIB,              # 32 GiB per chip, 2 NCs (arch guide; per-NC share derived)
    ),
    tiles=TileLimits(),                                # nl.tile_size values are the same on every target
)

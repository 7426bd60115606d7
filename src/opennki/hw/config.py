"""Hardware layer: the typed, validated parameter records a target is made of."""

from __future__ import annotations

from dataclasses import dataclass

from opennki.hw.cost import CostParams

KIB = 1024


@dataclass(frozen=True, kw_only=True)
class MemorySpec:
    """On-chip memory geometry of one NeuronCore.

    Fields:
        partitions: SBUF/PSUM partitions (lanes); every on-chip tile has at most this many.
        sbuf_bytes_per_partition: physical SBUF bytes in each partition.
        sbuf_reserved_bytes_per_partition: bytes the compiler keeps for itself; the rest is usable by kernels.
        psum_banks: PSUM banks per partition.
        psum_bank_bytes: bytes per PSUM bank per partition (2 KiB = 512 fp32).
        hbm_bytes: HBM capacity visible to one NeuronCore.
    """

    partitions: int
    sbuf_bytes_per_partition: int
    sbuf_reserved_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int
    hbm_bytes: int

    def __post_init__(self):
        if self.partitions != 128:
            raise ValueError("every NeuronCore generation has 128 partitions")
        if not 0 <= self.sbuf_reserved_bytes_per_partition < self.sbuf_bytes_per_partition:
            raise ValueError("reserved SBUF must be smaller than SBUF")
        if self.psum_banks <= 0 or self.psum_bank_bytes <= 0:
            raise ValueError("PSUM geometry must be positive")

    @property
    def sbuf_usable_bytes_per_partition(self) -> int:
        return self.sbuf_bytes_per_partition - self.sbuf_reserved_bytes_per_partition

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_banks * self.psum_bank_bytes


@dataclass(frozen=True, kw_only=True)
class TileLimits:
    """Instruction tile-size limits (`nl.tile_size`), per target.

    Fields:
        pmax: partition-dim limit of any on-chip tile.
        psum_fmax: fp32 elements per partition in one PSUM bank.
        gemm_stationary_fmax: free size limit of the stationary matmul operand (M).
        gemm_moving_fmax: free size of the moving matmul operand (N) that `nl.tile_size` advertises.
        matmul_moving_max_fp32 / matmul_moving_max_bf16: what `nc_matmul` actually accepts for an fp32 / bf16
            PSUM result (512 before NC-v4; 4096 / 8192 on NC-v4, where a matmul may span all 8 banks).
        bn_stats_fmax: free size limit of the `bn_stats` input.
        psum_min_align / sbuf_min_align: address alignment in bytes (not documented by AWS; 4 and 4 chosen
            so every dtype is naturally aligned).
    """

    pmax: int = 128
    psum_fmax: int = 512
    gemm_stationary_fmax: int = 128
    gemm_moving_fmax: int = 512
    matmul_moving_max_fp32: int = 512
    matmul_moving_max_bf16: int = 512
    bn_stats_fmax: int = 512
    psum_min_align: int = 4
    sbuf_min_align: int = 4


@dataclass(frozen=True, kw_only=True)
class HwConfig:
    """One NeuronCore target.

    Fields:
        name: canonical target name (`trn1`, `trn2`, `trn3`).
        nc_version: NeuronCore generation number (2, 3, 4) as `nisa.nc_version` has it.
        memory: on-chip memory geometry.
        tiles: instruction tile-size limits.
        cost: the cost-model parameters (engine clocks and rates, DMA, HBM, launch); None for a target
            that the cost model cannot estimate.
    """

    name: str
    nc_version: int
    memory: MemorySpec
    tiles: TileLimits
    cost: CostParams | None = None

    def __post_init__(self):
        if self.nc_version not in (2, 3, 4):
            raise ValueError(f"unknown NeuronCore version {self.nc_version}")

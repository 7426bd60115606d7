"""Hardware layer: Trainium3, NeuronCore-v4 (spec/hardware.md §1-§10).

The comment beside each figure names its source: `§N` or `hardware.md §N` is spec/hardware.md §N,
`isa.md §N` spec/isa.md §N."""

from opennki.hw.config import KIB, Capabilities, HwConfig, MemorySpec, TileLimits
from opennki.hw.cost import (DMA_EFFICIENCY_CURVE, CostParams, DmaCost, EngineCost, GpSimdCost, ScalarCost,
                             TensorEngineCost, VectorCost, setup_ns_from_curve)

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
    capabilities=Capabilities(hwdge=True, lnc2=True, scalar_engine_bias_immediate=True,
                              activation_reciprocal_bias=True, scalar_engine_any_tensor_scalar=True,
                              scalar_engine_raw_copy=True, vector_abs_max=True, psum_bf16_matmul=True,
                              fp8_e4m3fn_matmul=True, double_row_matmul=True, pe_tile_32=True,
                              pe_transpose_moves_bits=True, dma_transpose_path=True, dma_transpose_on_pe=True,
                              range_select=True, nonzero_with_count=True, topk=True, gpsimd_rng=True, activate2=True,
                              gpsimd_activation=True,
                              exponential=True, rand2=True, mx=True, tensor_indirection=True),
    cost=CostParams(
        tensor=TensorEngineCost(
            clock_ghz=2.4,                  # hardware.md §3 (v4 PE 2.4 GHz)
            mm_init_cycles=64,              # §4 MM_INIT_LATENCY (§10 "same")
            fp32_factor=4.0,                # §4 / §10 MM fp32 factor 4
            load_stationary_speedup=4.0,    # §4 fast LoadStationary
            double_row_factor=2.0,          # §10 "same; fp8 double-row doubles K per instr"
            mx_factor=4.0,                  # §4 nc_matmul_mx: 4x BF16 throughput (315 vs 79 TFLOPS)
            transpose_fp32_factor=2.0,      # §4 transpose mode 2x faster fp32 (v3 text, kept)
            transpose_speedup=2.0,          # §4 v4 background transpose "close to double" on long chains
            dependency_overhead_cycles=64,  # [GAP] choice (see trn1)
            throttle_ramp_ns=3000.0,        # §4 dI/dt throttling (Trn2/Trn3)
            throttle_start_fraction=0.5,
            throttle_idle_ns=1500.0,
        ),
        vector=VectorCost(
            clock_ghz=1.2,                  # §3 (v4 Vector 1.2 GHz)
            min_ii_cycles=64,
            dependency_overhead_cycles=100,
            elems_per_cycle=1.0,            # §5.3 [CONTRA]: 1 chosen for non-fast dtypes
            # §3 "512 BF16/FP16/FP8" elements per cycle
            fast_dtypes=("bfloat16", "float16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn"),
            copy_fast_factor=4.0,           # §3 512 elem/cycle = 4 per partition (v3 modes carried over)
            copy_half_fast_factor=2.0,      # §5.3 (v3 text, kept)
            tensor_tensor_fast_factor=2.0,  # §5.3 (v3 text, kept)
            exponential_speedup=4.0,        # §5.3 v4 `exponential` at 4x ACT activation(exp)
            quantize_elems_per_cycle=4.0,   # §5.3 quantize_mx 4 elements/partition/cycle
            rand_elems_per_cycle=4.0,       # §5.3 XORWOW 4 x 32-bit values per lane per cycle
        ),
        scalar=ScalarCost(
            clock_ghz=1.2,                  # §3 (v4 Scalar 1.2 GHz)
            min_ii_cycles=64,
            dependency_overhead_cycles=100,
            read_accumulator_cycles=64,
            table_load_ns=1330.0,           # §5.4 [OBS] (v3 screenshot, reused)
            copy_fast_factor=2.0,           # §5.3 v4 ACT tensor_scalar/tensor_copy up to 2x for BF16/FP16
        ),
        gpsimd=GpSimdCost(
            clock_ghz=1.2,                  # §3 (v4 GpSimd 1.2 GHz, 128 elem/cycle all dtypes)
            min_ii_cycles=64,
            dependency_overhead_cycles=100,
            start_cycles=150,
            min_ii_dynamic_cycles=600,
            lane_bits=8,                    # §3 v4 "128 all dtypes": one element per partition whatever its width
        ),
        sync=EngineCost(
            clock_ghz=1.2,                  # [GAP] no v4 base clock published; the v3 1.2 GHz is kept
            min_ii_cycles=64,
            dependency_overhead_cycles=100,
        ),
        dma=DmaCost(
            engines=16,                     # §6.1
            queues_per_engine=16,
            partitions_per_engine=8,
            engine_bandwidth_bytes_per_ns=33.0,  # §6.2 table 33 B/ns (528 GB/s per NC); [CONTRA] 38.4 GB/s text
            fixed_latency_ns=setup_ns_from_curve(DMA_EFFICIENCY_CURVE, 33.0),  # ~595 ns (§6.3)
                                            # [CONTRA] §6.4 ~1300 ns (docs/cost-model.md)
            efficiency_curve=DMA_EFFICIENCY_CURVE,  # §6.3 [OBS]
            descriptor_ns=2.2,              # the v3 bound kept ([GAP])
            trigger_cycles=64,
            hwdge_issue_ns=600.0,           # §6.4 (v3 figure, kept)
            dge_instances=2,                # §6.1 (v3 figure, kept)
            transpose_hbm_efficiency=0.9,   # §6.5 (v3 figures, kept)
            transpose_sbuf_efficiency=0.5,
            rmw_efficiency=1.0,             # §6.5 v4 SBUF read-add-write at copy throughput
        ),
        hbm_bandwidth_bytes_per_ns=587.5,   # §1 [DERIVED] 4.7 TB/s (NKI guide) / 8 NCs; [CONTRA] 4.9 TB/s -> 612.5
        launch_floor_ns=3000.0,             # §9 [OBS] ~3.0 us
    ),
)

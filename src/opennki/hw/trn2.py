"""Hardware layer: Trainium2, NeuronCore-v3 (spec/hardware.md §1-§10).

The comment beside each figure names its source: `§N` or `hardware.md §N` is spec/hardware.md §N,
`isa.md §N` spec/isa.md §N."""

from opennki.hw.config import KIB, Capabilities, HwConfig, MemorySpec, TileLimits
from opennki.hw.cost import (DMA_EFFICIENCY_CURVE, CostParams, DmaCost, EngineCost, GpSimdCost, ScalarCost,
                             TensorEngineCost, VectorCost, setup_ns_from_curve)

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
    capabilities=Capabilities(hwdge=True, lnc2=True, scalar_engine_bias_immediate=True,
                              activation_reciprocal_bias=True, scalar_engine_raw_copy=True,
                              double_row_matmul=True, pe_tile_32=True, pe_transpose_moves_bits=True,
                              dma_transpose_path=True, dma_transpose_on_pe=True, range_select=True,
                              nonzero_with_count=True, topk=True, gpsimd_rng=True),
    cost=CostParams(
        tensor=TensorEngineCost(
            clock_ghz=2.4,                  # hardware.md §3 (v3 PE 2.4 GHz); 2*128^2*2.4 = 78.6 TFLOPS bf16
            mm_init_cycles=64,              # §4 MM_INIT_LATENCY (v2 figure; §10 "same" on v3)
            fp32_factor=4.0,                # §4 fp32 ~4x bf16; [OBS] fp32 nc_matmul ~4 x 213 ns on v3
            load_stationary_speedup=4.0,    # §4 fast LoadStationary
            double_row_factor=2.0,          # §4 FP8 double_row: K=256 in the time of K=128 (158 vs 79 TFLOPS)
            transpose_fp32_factor=2.0,      # §4 transpose mode: "2x faster FP32 transpose" than a 4-pass matmul
            dependency_overhead_cycles=64,  # [GAP] choice: MM_INIT_LATENCY reused as the exposed pipeline fill
            throttle_ramp_ns=3000.0,        # §4 dI/dt: ~50% utilisation ramping to full over ~3 us
            throttle_start_fraction=0.5,    # §4 "runs at ~50% utilization"
            throttle_idle_ns=1500.0,        # §4 re-engages below 50% utilisation in a ~3 us window: a 1.5 us gap
        ),
        vector=VectorCost(
            clock_ghz=0.96,                 # §3 (v3 Vector 0.96 GHz)
            min_ii_cycles=64,               # §5.1 (v2 text; no newer replacement published)
            dependency_overhead_cycles=100,  # §5.1
            elems_per_cycle=1.0,            # §5.3 [CONTRA] 256-wide for non-16-bit dtypes vs prose: 1 chosen (§5.3)
            fast_dtypes=("bfloat16", "float16"),  # §5.3 BF16/FP16
            copy_fast_factor=4.0,           # §5.3 4x tensor_copy/tensor_scalar, SBUF, 16-bit, contiguous
            copy_half_fast_factor=2.0,      # §5.3 2x when strided or one operand in PSUM
            tensor_tensor_fast_factor=2.0,  # §5.3 2x tensor_tensor, both inputs SBUF, all 16-bit
        ),
        scalar=ScalarCost(
            clock_ghz=1.2,                  # §3 (v3 Scalar 1.2 GHz)
            min_ii_cycles=64,               # §5.1
            dependency_overhead_cycles=100,  # §5.1
            read_accumulator_cycles=64,     # §5.4 (v2 figure kept)
            table_load_ns=1330.0,           # §5.4 [OBS] ~1.33 us ACT segment before each activation run (v3)
        ),
        gpsimd=GpSimdCost(
            clock_ghz=1.2,                  # §3 (v3 GpSimd 1.2 GHz)
            min_ii_cycles=64,
            dependency_overhead_cycles=100,
            start_cycles=150,               # §5.1 GPSIMD_START
            min_ii_dynamic_cycles=600,      # §5.1 MIN_II_DYNAMIC
            lane_bits=32,                   # §5.4
        ),
        sync=EngineCost(
            clock_ghz=1.2,                  # §3 profiler base clock Trainium2 1.2 GHz
            min_ii_cycles=64,               # [GAP] choice (see trn1)
            dependency_overhead_cycles=100,  # [GAP] choice (see trn1)
        ),
        dma=DmaCost(
            engines=16,                     # §6.1
            queues_per_engine=16,           # §6.1
            partitions_per_engine=8,        # §6.1
            engine_bandwidth_bytes_per_ns=23.0,  # §6.2 table 23 B/ns (= measured 32 KiB / 1416 ns, §6.4);
                                                 # [CONTRA] 27.2 GB/s "theoretical" text (isa.md C6)
            fixed_latency_ns=setup_ns_from_curve(DMA_EFFICIENCY_CURVE, 23.0),  # ~853 ns (§6.3)
                                            # [CONTRA] §6.4 ~1300 ns (docs/cost-model.md)
            efficiency_curve=DMA_EFFICIENCY_CURVE,  # §6.3 [OBS]
            descriptor_ns=2.2,              # §6.4 [OBS] bound: [128, 128] bf16 took 97 ns per engine for 8
                                            # 256 B pieces; +10% screenshot error, less 2 KiB at 23 B/ns,
                                            # leaves <= 2.2 ns a piece (docs/cost-model.md)
            trigger_cycles=64,              # [GAP] choice (see trn1)
            hwdge_issue_ns=600.0,           # §6.4 hardware-DGE DMA instruction ~600 ns
            dge_instances=2,                # §6.1 "2 instances per NC"
            transpose_hbm_efficiency=0.9,   # §6.5 HBM->SBUF DMA transpose up to 90% of copy throughput
            transpose_sbuf_efficiency=0.5,  # §6.5 SBUF->SBUF up to 50%
            rmw_efficiency=0.5,             # §6.5 DMA read-add-write "previously 50%"
        ),
        hbm_bandwidth_bytes_per_ns=375.0,   # §1 [DERIVED] 3 TB/s (NKI guide) / 8 NCs; [CONTRA] 2.9 TB/s gives
                                            # 362.5 (isa.md C7 "either"): the newer NKI guide is followed
        launch_floor_ns=3000.0,             # §9 [OBS] smallest device-side execution ~3.0 us
    ),
)

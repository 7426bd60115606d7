"""Hardware layer: Trainium1 / Inferentia2, NeuronCore-v2 (spec/hardware.md §1-§10).

The comment beside each figure names its source: `§N` or `hardware.md §N` is spec/hardware.md §N,
`isa.md §N` spec/isa.md §N."""

from opennki.hw.config import KIB, Capabilities, HwConfig, MemorySpec, TileLimits
from opennki.hw.cost import (DMA_EFFICIENCY_CURVE, CostParams, DmaCost, EngineCost, GpSimdCost, ScalarCost,
                             TensorEngineCost, VectorCost, setup_ns_from_curve)

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
    capabilities=Capabilities(),                       # NeuronCore-v2: none beyond the base ISA
    cost=CostParams(
        tensor=TensorEngineCost(
            clock_ghz=2.8,                  # hardware.md §3 engine table (v2 PE 2.8 GHz); 2*128*128*2.8 = 91.75 TFLOPS
            mm_init_cycles=64,              # §4 MM_INIT_LATENCY = 64 cycles (v2); isa.md §11.1 max(min(64, M), N)
            fp32_factor=4.0,                # §4 "FP32 inputs ~4x the BF16 cost"; isa.md §11.1
            load_stationary_speedup=4.0,    # §4 LoadStationary "up to 4x faster"; perf guide Opt #7 (LS_II = 128/4)
            transpose_fp32_factor=4.0,      # v2 transposes are matmuls by an identity: fp32 costs 4 passes (§4)
            dependency_overhead_cycles=64,  # [GAP] choice: MM_INIT_LATENCY reused as the exposed pipeline fill
            throttle_ramp_ns=0.0,           # §4: dI/dt throttling is documented for Trn2/Trn3 only
        ),
        vector=VectorCost(
            clock_ghz=1.12,                 # §3 engine table (v2 Vector 1.12 GHz, 128 elem/cycle)
            min_ii_cycles=64,               # §5.1 MIN_II "roughly 64 engine cycles"
            dependency_overhead_cycles=100,  # §5.1 "+100 engine cycles when each instruction depends on the previous"
            elems_per_cycle=1.0,            # §5.1 "one input tile, N > 128: ~N cycles"
        ),                                  # no perf modes on v2 (§5.3): factors stay 1
        scalar=ScalarCost(
            clock_ghz=1.4,                  # §3 engine table (v2 Scalar 1.4 GHz)
            min_ii_cycles=64,               # §5.2 activation max(MIN_II, N)
            dependency_overhead_cycles=100,  # §5.1 static overhead (ACT: "same advice", isa.md §11.2)
            read_accumulator_cycles=64,     # §5.4 ActReadAccumulator ~64 cycles
            table_load_ns=1330.0,           # §5.4 [OBS] ~1.33 us ACT segment before each activation run (v3
                                            # screenshot; no v2 figure, reused)
        ),
        gpsimd=GpSimdCost(
            clock_ghz=1.4,                  # §3 engine table (v2 GpSimd 1.4 GHz)
            min_ii_cycles=64,               # MIN_II applied to GpSimd formulas without a start term (isa.md §11.2)
            dependency_overhead_cycles=100,  # §5.1 static overhead, reused ([GAP] for GpSimd)
            start_cycles=150,               # §5.1 GPSIMD_START ~150 cycles
            min_ii_dynamic_cycles=600,      # §5.1 MIN_II_DYNAMIC ~600 cycles
            lane_bits=32,                   # §5.4 32 bits per partition per cycle
        ),
        sync=EngineCost(
            clock_ghz=1.4,                  # §3 profiler "NeuronCore base clock" Trainium1 1.4 GHz
            min_ii_cycles=64,               # [GAP] choice: MIN_II for a sequencer instruction
            dependency_overhead_cycles=100,  # [GAP] choice: the static overhead of §5.1
        ),
        dma=DmaCost(
            engines=16,                     # §6.1 16 DMA engines per NC (v2-v4)
            queues_per_engine=16,           # §6.1
            partitions_per_engine=8,        # §6.1 "with P=128 each engine moves 8 partitions"
            engine_bandwidth_bytes_per_ns=17.0,  # §6.2 table 17 B/ns [CONTRA 27 GiB/s text]: the table is the
                                                 # achievable figure (isa.md C6)
            fixed_latency_ns=setup_ns_from_curve(DMA_EFFICIENCY_CURVE, 17.0),  # ~1155 ns (§6.3)
                                            # [CONTRA] §6.4 ~1300 ns (docs/cost-model.md)
            efficiency_curve=DMA_EFFICIENCY_CURVE,  # §6.3 [OBS]
            descriptor_ns=2.2,              # the v3 bound kept ([GAP] no v2 figure)
            trigger_cycles=64,              # [GAP] choice: one MIN_II of the triggering sequencer
            hwdge_issue_ns=None,            # §6.1 hardware DGE is v3+
            transpose_hbm_efficiency=1.0,   # v2 DMA transposes move one element per descriptor (rule in cost/)
            transpose_sbuf_efficiency=1.0,
            rmw_efficiency=0.5,             # §6.5 "previously 50%" before v4
        ),
        hbm_bandwidth_bytes_per_ns=410.0,   # §1 [DERIVED] 820 GB/s per chip / 2 NCs
        launch_floor_ns=3000.0,             # §9 [OBS] smallest device-side execution ~3.0 us (min of a (4,3) add)
    ),
)

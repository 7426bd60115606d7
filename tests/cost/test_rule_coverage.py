"""Hand-computed costs for the cost rules the other tests do not reach (every rule has at least one exact
case: test_every_rule_has_a_hand_computed_case). Cycles are the engine's (trn2: DVE 0.96 GHz, ACT / POOL /
Sync 1.2, PE 2.4; trn3: DVE 1.2); DMA figures are per-engine times (23 B/ns, 2.2 ns per descriptor)."""

import pytest

from opennki.cost import RULES, cost_of
from opennki.events import Engine
from opennki.hw import TRN2, TRN3
from tests.cost import test_rule_formulas
from tests.cost.test_descriptors import engine_ns
from tests.cost.test_rule_formulas import HBM, PS, SB, A, R, W, ev, operand

N = 1000
VECTOR, SCALAR, GPSIMD, SYNC, TENSOR = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.SYNC, Engine.TENSOR
CLOCK = {(TRN2, VECTOR): 0.96, (TRN2, SCALAR): 1.2, (TRN2, GPSIMD): 1.2, (TRN2, SYNC): 1.2, (TRN2, TENSOR): 2.4,
         (TRN3, VECTOR): 1.2, (TRN3, TENSOR): 2.4}


def sb(role, access, shape=(128, N), dtype="float32", kind=SB):
    return operand(role, access, kind, shape, dtype)


ENGINE_CASES = [
    # (opcode, hw, event, expected engine cycles)
    ("activate2", TRN2, ev("activate2", SCALAR, sb("dst", W), sb("data", R), op="exp"), N),
    ("activate2", TRN2, ev("activate2", SCALAR, sb("dst", W), sb("data", R), sb("reduce_res", W, (128, 1)),
                           op="exp"), N + 64),                              # + ActReadAccumulator
    ("bn_stats", TRN2, ev("bn_stats", VECTOR, sb("dst", W, (128, 6)), sb("data", R, (128, 512))), 512),
    ("dropout", TRN2, ev("dropout", VECTOR, sb("dst", W), sb("data", R)), N),
    ("exponential", TRN3, ev("exponential", VECTOR, sb("dst", W), sb("src", R)), N / 4),
    ("exponential", TRN3, ev("exponential", VECTOR, sb("dst", W), sb("src", R), sb("reduce_res", W, (128, 1))),
     N / 4 + 64),
    ("quantize_mx", TRN3, ev("quantize_mx", VECTOR, sb("dst", W, (128, 256), "uint8"),
                             sb("src", R, (128, 1024), "bfloat16"), sb("dst_scale", W, (128, 8), "uint8")), 256),
    ("rand2", TRN3, ev("rand2", VECTOR, sb("dst", W)), N / 4),
    ("max8", TRN2, ev("max8", VECTOR, sb("dst", W, (128, 8)), sb("src", R)), N),
    ("max8", TRN2, ev("max8", VECTOR, sb("dst", W, (128, 8)), sb("src", R, (128, 16))), 64),    # MIN_II
    ("nc_find_index8", TRN2, ev("nc_find_index8", VECTOR, sb("dst", W, (128, 8), "uint32"), sb("data", R),
                                sb("vals", R, (128, 8))), N),
    ("nc_stream_shuffle", TRN2, ev("nc_stream_shuffle", VECTOR, sb("dst", W, (32, N)), sb("src", R, (32, N))), N),
    ("range_select", TRN2, ev("range_select", VECTOR, sb("dst", W), sb("on_true_tile", R),
                              sb("reduce_res", W, (128, 1))), N + 64),
    ("rng", TRN2, ev("rng", VECTOR, sb("dst", W, dtype="uint32")), N),
    ("select_reduce", TRN2, ev("select_reduce", VECTOR, sb("dst", W), sb("predicate", R, dtype="uint8"),
                               sb("on_true", R), sb("reduce_res", W, (128, 1))), 2 * N + 64),
    ("select_reduce", TRN2, ev("select_reduce", VECTOR, sb("dst", W), sb("predicate", R, dtype="uint8"),
                               sb("on_true", R, kind=PS)), N),            # data and predicate in different memories
    ("tensor_copy", TRN2, ev("tensor_copy", VECTOR, sb("dst", W), sb("src", R)), N),
    ("tensor_copy", TRN2, ev("tensor_copy", VECTOR, sb("dst", W, dtype="bfloat16"),
                             sb("src", R, dtype="bfloat16")), N / 4),       # v3 4x perf mode
    ("tensor_copy", TRN2, ev("tensor_copy", SCALAR, sb("dst", W), sb("src", R)), N),
    ("tensor_copy_dynamic_dst", TRN2, ev("tensor_copy_dynamic_dst", VECTOR, sb("dst", W, (128, 64)),
                                         sb("src", R, (128, 64))), 600),
    ("tensor_scalar_cumulative", TRN2, ev("tensor_scalar_cumulative", VECTOR, sb("dst", W), sb("src", R)), N),
    ("tensor_scalar_cumulative", TRN2, ev("tensor_scalar_cumulative", VECTOR, sb("dst", W), sb("src", R),
                                          sb("reduce_res", W, (128, 1))), N + 64),
    ("psum_spill", TRN2, ev("psum_spill", VECTOR, sb("data", R, (128, 512), kind=PS)), 512),
    ("psum_reload", TRN2, ev("psum_reload", VECTOR, sb("dst", W, (128, 512), kind=PS)), 512),
    ("nc_n_gather", TRN2, ev("nc_n_gather", GPSIMD, sb("dst", W, (128, 1024)), sb("data", R, (128, 2048)),
                             sb("indices", R, (128, 1024), "uint32")), 2 * 150 + 1024),   # two 512-wide starts
    ("nonzero_with_count", TRN2, ev("nonzero_with_count", GPSIMD, sb("dst", W, dtype="int32"), sb("src", R)),
     150 + N),
    ("sequence_bounds", TRN2, ev("sequence_bounds", GPSIMD, sb("dst", W, (128, 2 * N), "int32"),
                                 sb("segment_ids", R, dtype="int32")), 150 + N),
    ("tensor_partition_reduce", TRN2, ev("tensor_partition_reduce", GPSIMD, sb("dst", W, (1, N)), sb("data", R),
                                         op="add"), 150 + N * 7),          # ceil(log2 128) levels
    ("builtin_custom_op", TRN2, ev("builtin_custom_op", GPSIMD, sb("dst", W), sb("src", R, (128, 10))), 150 + N),
    ("core_barrier", TRN2, ev("core_barrier", GPSIMD, sb("data", R, (1, 4), kind=HBM)), 64),
    ("set_rng_seed", TRN2, ev("set_rng_seed", GPSIMD, sb("src_seeds", R, (128, 6), "uint32")), 64),
    ("rand_set_state", TRN2, ev("rand_set_state", GPSIMD, sb("src_seeds", R, (128, 96), "uint32")), 96),
    ("rand_get_state", TRN2, ev("rand_get_state", VECTOR, sb("dst", W, (128, 24), "uint32")), 64),
] + [(op, TRN2, ev(op, Engine.UNKNOWN, sb("dst", W, (1, 1), "int32")), 64)       # on the Sync sequencer
     for op in ("register_alloc", "register_move", "register_load", "register_store", "scalar_load",
                "scalar_store", "scalar_alu")]


@pytest.mark.parametrize("opcode, hw, event, expected", ENGINE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ENGINE_CASES)])
def test_engine_rule(opcode, hw, event, expected):
    cost = cost_of(event, hw)
    engine = Engine.SYNC if event.engine is Engine.UNKNOWN else event.engine
    assert cost.engine is engine
    assert cost.busy_ns * CLOCK[(hw, engine)] == pytest.approx(expected)


def test_nc_matmul_mx_contracts_four_values_per_packed_element():
    st = operand("stationary", R, SB, (128, 128), "uint32")
    mv = operand("moving", R, SB, (128, 512), "uint32")
    e = ev("nc_matmul_mx", TENSOR, operand("dst", A, PS, (128, 512)), st, mv)
    cost = cost_of(e, TRN3)
    assert cost.busy_ns * 2.4 == pytest.approx(512)                    # max(min(64, M), N)
    assert cost.load_stationary_ns * 2.4 == pytest.approx(128 / 4)     # fast LoadStationary
    assert cost.flops == 2 * (128 * 4) * 128 * 512


DMA_CASES = [
    # dma_compute: both sources stream through the DMA at the read-modify-write rate (0.5 on v3)
    ("dma_compute", ev("dma_compute", Engine.DMA, sb("dst", W, (128, 512)), sb("src0", R, (128, 512)),
                       sb("src1", R, (128, 512))), (8 * 2.2 + 2 * 8 * 2048 / 23.0) / 0.5),
    ("sendrecv", ev("sendrecv", Engine.DMA, sb("dst", W, (128, 512)), sb("src", R, (128, 512))),
     8 * 2.2 + 8 * 2048 / 23.0),
    # SBUF spill / reload: the whole tile to or from its HBM staging range, one row descriptor per partition
    ("sbuf_spill", ev("sbuf_spill", Engine.DMA, sb("src", R, (128, 512)), sb("dst", W, (128, 512), kind=HBM)),
     8 * 2.2 + 8 * 2048 / 23.0),
    ("sbuf_reload", ev("sbuf_reload", Engine.DMA, sb("src", R, (128, 512), kind=HBM), sb("dst", W, (128, 512))),
     8 * 2.2 + 8 * 2048 / 23.0),
] + [(op, ev(op, Engine.DMA, sb("dst", W, (1, 4096), kind=HBM), sb("src", R, (1, 4096), kind=HBM)),
      2.2 + 16384 / 16 / 23.0)                      # one contiguous HBM descriptor, bytes over the 16 engines
     for op in ("all_to_all_v", "all_gather_v", "all_to_all_v_trigger", "all_gather_v_trigger")] + [
    (op, ev(op, Engine.DMA, sb("metadata", R, (1, 64), "int32", kind=HBM)), 2.2 + 256 / 16 / 23.0)
    for op in ("all_to_all_v_prepare", "all_gather_v_prepare")]


@pytest.mark.parametrize("opcode, event, expected", DMA_CASES, ids=[c[0] for c in DMA_CASES])
def test_dma_rule(opcode, event, expected):
    assert engine_ns(event) == pytest.approx(expected)


def test_every_rule_has_a_hand_computed_case():
    here = {c[0] for c in ENGINE_CASES} | {c[0] for c in DMA_CASES} | {"nc_matmul_mx"}
    formulas = set()
    for mark in test_rule_formulas.test_documented_formula.pytestmark:
        formulas |= {case[0].opcode for case in mark.args[1]}
    elsewhere = {"nc_matmul", "nc_transpose", "activation", "tensor_scalar", "tensor_tensor", "iota",
                 "local_gather", "dma_copy", "dma_transpose", "memset",      # test_rules / test_rule_formulas
                 "sbuf_spill", "sbuf_reload"}                                # with the SBUF spilling tests
    assert sorted(set(RULES) - here - formulas - elsewhere) == []

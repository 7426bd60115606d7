"""Cost rules: hand-computed costs of single instructions on each engine, and registry completeness."""

import pytest

from opennki.cost import RULES, cost_of
from opennki.hw import TRN1, TRN2, TRN3
from opennki.instructions import REGISTRY
from tests.cost import kernels as K
from tests.cost.helpers import event, spec

# Every instruction named in spec/isa.md §4 / §7 by its NKI opcode (both generations).
SPEC_OPCODES = """
nc_matmul nc_matmul_mx nc_transpose activation activation_reduce activate2 tensor_tensor tensor_scalar
scalar_tensor_tensor tensor_reduce tensor_partition_reduce tensor_tensor_scan tensor_scalar_reduce
tensor_scalar_cumulative tensor_copy tensor_copy_dynamic_src tensor_copy_dynamic_dst tensor_copy_predicated
exponential reciprocal quantize_mx iota dropout affine_select range_select select_reduce sequence_bounds memset
bn_stats bn_aggr local_gather nc_n_gather dma_copy dma_transpose dma_compute max8 nc_find_index8
nc_match_replace8 nc_stream_shuffle register_alloc register_move register_load register_store core_barrier
sendrecv rng rand2 set_rng_seed rand_set_state rand_get_state nonzero_with_count topk builtin_custom_op
""".split()


def test_every_registered_instruction_has_a_cost_rule():
    missing = sorted(set(REGISTRY) - set(RULES))
    assert not missing, f"instructions without a cost rule: {missing}"


def test_every_instruction_of_the_spec_has_a_cost_rule():
    assert not sorted(set(SPEC_OPCODES) - set(RULES))


def ns(cycles, ghz):
    return cycles / ghz


def test_vector_tensor_scalar_is_max_min_ii_n_cycles_on_trn1():
    ev = event(K.one_tensor_scalar, spec((128, 512)), opcode="tensor_scalar", target="trn1")
    assert cost_of(ev, TRN1).busy_ns == pytest.approx(ns(512, 1.12))
    small = event(K.one_tensor_scalar, spec((128, 8)), opcode="tensor_scalar", target="trn1")
    assert cost_of(small, TRN1).busy_ns == pytest.approx(ns(64, 1.12))        # MIN_II floor


def test_vector_perf_mode_4x_for_contiguous_bf16_in_sbuf_on_trn2():
    ev = event(K.one_tensor_scalar, spec((128, 2048), "bfloat16"), opcode="tensor_scalar", target="trn2")
    cost = cost_of(ev, TRN2)
    assert cost.busy_ns == pytest.approx(ns(2048 / 4, 0.96)) and cost.perf_mode == "4x"
    fp32 = event(K.one_tensor_scalar, spec((128, 2048)), opcode="tensor_scalar", target="trn2")
    assert cost_of(fp32, TRN2).busy_ns == pytest.approx(ns(2048, 0.96)) and cost_of(fp32, TRN2).perf_mode is None


def test_vector_tensor_tensor_two_sbuf_inputs_cost_2n():
    ev = event(K.one_tensor_tensor, spec((128, 512)), opcode="tensor_tensor", target="trn1")
    assert cost_of(ev, TRN1).busy_ns == pytest.approx(ns(2 * 512, 1.12))
    bf = event(K.one_tensor_tensor, spec((128, 512), "bfloat16"), opcode="tensor_tensor", target="trn2")
    assert cost_of(bf, TRN2).busy_ns == pytest.approx(ns(512, 0.96))          # 2x mode: 2N / 2


def test_scalar_activation_is_max_min_ii_n_with_a_table():
    ev = event(K.one_activation, spec((128, 1000)), opcode="activation", target="trn2")
    cost = cost_of(ev, TRN2)
    assert cost.busy_ns == pytest.approx(ns(1000, 1.2)) and cost.table == "exp"


def test_tensor_engine_matmul_multiply_moving_and_load_stationary():
    ev = event(K.one_matmul, spec((128, 128), "bfloat16"), spec((128, 512), "bfloat16"), opcode="nc_matmul",
               target="trn1")
    cost = cost_of(ev, TRN1)
    assert cost.busy_ns == pytest.approx(ns(512, 2.8))                        # max(min(64, M), N)
    assert cost.load_stationary_ns == pytest.approx(ns(128 / 4, 2.8))         # fast LoadStationary
    assert cost.flops == 2 * 128 * 128 * 512
    short = event(K.one_matmul, spec((128, 128), "bfloat16"), spec((128, 16), "bfloat16"), opcode="nc_matmul",
                  target="trn1")
    assert cost_of(short, TRN1).busy_ns == pytest.approx(ns(64, 2.8))         # MM_INIT_LATENCY floor
    fp32 = event(K.one_matmul, spec((128, 128)), spec((128, 512)), opcode="nc_matmul", target="trn1")
    assert cost_of(fp32, TRN1).busy_ns == pytest.approx(4 * ns(512, 2.8))    # fp32: 4 passes


def test_gpsimd_iota_is_start_plus_n():
    ev = event(K.one_iota, spec((128, 512)), opcode="iota", target="trn1")
    assert cost_of(ev, TRN1).busy_ns == pytest.approx(ns(150 + 512, 1.4))


def test_dma_transfer_uses_the_engines_of_its_partitions_and_one_descriptor_per_row():
    ev = event(K.one_load, spec((128, 2048)), opcode="dma_copy", target="trn2")
    work = cost_of(ev, TRN2).dma
    assert work.size_bytes == 128 * 2048 * 4 and work.descriptor_bytes == 8192 and work.descriptors == 128
    data_ns = 8 * 8192 / 23.0                             # 8 partitions of 8 KiB per engine at 23 B/ns
    assert work.efficiency == pytest.approx(data_ns / (data_ns + 8 * 2.2))      # + 2.2 ns per descriptor
    assert (work.partition_start, work.partition_count) == (0, 128)
    assert work.hbm_read_bytes == 128 * 2048 * 4 and work.hbm_write_bytes == 0 and work.queue == "qSyncIO0"
    few = event(K.one_load, spec((4, 4096), "bfloat16"), opcode="dma_copy", target="trn2")
    assert cost_of(few, TRN2).dma.partition_count == 4


def test_rules_read_only_the_event():
    ev = event(K.one_tensor_scalar, spec((128, 512)), opcode="tensor_scalar", target="trn3")
    assert cost_of(ev, TRN3) == cost_of(ev, TRN3)          # pure: same event, same cost
    assert cost_of(ev, TRN1).busy_ns > cost_of(ev, TRN3).busy_ns   # 1.12 vs 1.2 GHz

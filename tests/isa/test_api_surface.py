"""The public `nisa` surface of both generations: every legacy name from spec/isa.md, the enums with their
legacy numbering, get_nc_version per target, and the new generation's `dst=` signatures."""

import inspect
import struct

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import UnsupportedError
from tests.isa.helpers import run
from tests.raises import raises_at

# spec/isa.md §0.1 and §4: the 35 legacy instruction callables. The two 2.20-only fused attention kernels
# have undocumented layouts and are deliberately absent (see opennki/legacy/isa.py).
LEGACY_INSTRUCTIONS = [
    "nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_tensor", "tensor_scalar",
    "scalar_tensor_tensor", "tensor_reduce", "tensor_partition_reduce", "tensor_tensor_scan",
    "tensor_scalar_reduce", "tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst",
    "tensor_copy_predicated", "reciprocal", "iota", "dropout", "affine_select", "range_select", "select_reduce",
    "sequence_bounds", "memset", "bn_stats", "bn_aggr", "local_gather", "dma_copy", "dma_transpose", "max8",
    "nc_find_index8", "nc_match_replace8", "nc_stream_shuffle", "builtin_custom_op",
]
LEGACY_ABSENT = ["attention_kernel", "attention_kernel_cache"]
LEGACY_CONSTANTS = ["engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "fp32", "get_nc_version",
                    "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "dma_engine", "unknown_engine"]


@pytest.mark.parametrize("name", LEGACY_INSTRUCTIONS + LEGACY_CONSTANTS)
def test_legacy_name_exists(name):
    assert hasattr(nisa, name)


@pytest.mark.parametrize("name", LEGACY_ABSENT)
def test_undocumented_fused_attention_kernels_are_absent(name):
    assert not hasattr(nisa, name)


def test_legacy_enum_numbering():
    assert {m.name: m.value for m in nisa.engine} == {"unknown": 0, "tensor": 1, "scalar": 2, "gpsimd": 3,
                                                      "vector": 5, "sync": 6}
    assert [m.value for m in nisa.reduce_cmd] == [0, 1, 2, 3, 4]     # load_reduce: later legacy releases
    assert {m.name: m.value for m in nisa.dge_mode} == {"none": 0, "swdge": 1, "hwdge": 2, "unknown": 3}
    assert {m.name: m.value for m in nisa.dge_mode} != {m.name: m.value for m in nisa2.dge_mode}
    assert (nisa.oob_mode.error, nisa.oob_mode.skip) == (0, 1)
    assert struct.pack(">f", nisa.fp32.min) == bytes.fromhex("ff7fffff")
    assert nisa.tensor_engine is nisa.engine.tensor and nisa.unknown_engine is nisa.engine.unknown
    from opennki.legacy.isa.constants import engine, oob_mode
    assert oob_mode is nisa.oob_mode and engine is nisa.engine


@pytest.mark.parametrize("target,legacy,new", [("trn1", 2, 2), ("trn2", 3, 3), ("trn3", 3, 4)])
def test_get_nc_version_per_target(target, legacy, new):
    def kernel():
        out = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out[0:1, 0:1], int(nisa.get_nc_version()))
        nl.store(out[0:1, 1:2], int(nisa2.get_nc_version().value))
        return out

    assert run(kernel, target=target).tolist() == [[legacy, new]]
    assert nisa.get_nc_version.__doc__ and nisa.nc_version.gen3 == 3


def test_builtin_custom_op_is_documented_unsupported():
    def kernel():
        nisa.builtin_custom_op("topk", "libgpsimd.so", 1, 1, srcs=[], dsts=[])

    with raises_at(UnsupportedError, match="not documented"):
        run(kernel)


# new generation: spec/isa.md signatures (NKI 0.6), with NKI 0.7's changes (tests/compat/test_nki07_surface.py);
# unknown keyword arguments are errors
NEW_SIGNATURES = {
    "activation": "dst op data bias scale reduce_op reduce_res reduce_cmd engine name",
    "activation_reduce": "dst op data reduce_op reduce_res bias scale name",
    "tensor_tensor": "dst data1 data2 op engine name",
    "tensor_scalar": "dst data op0 operand0 reverse0 op1 operand1 reverse1 engine name",
    "scalar_tensor_tensor": "dst data op0 operand0 op1 operand1 reverse0 reverse1 reduce_cmd reduce_op reduce_res name",
    "tensor_reduce": "dst op data axis negate keepdims name",
    "tensor_partition_reduce": "dst op data name",
    "tensor_tensor_scan": "dst data0 data1 initial op0 op1 reverse0 reverse1 name",
    "tensor_scalar_reduce": "dst data op0 operand0 reduce_op reduce_res reverse0 reduce_cmd reduce_init "
                            "reduce_res_negate name",
    "tensor_scalar_cumulative": "dst src op0 op1 imm0 imm1 reduce_cmd name",
    "reciprocal": "dst data name",
    "tensor_copy_predicated": "dst src predicate reverse_pred name",
    "tensor_copy_dynamic_src": "dst src engine name",
    "tensor_copy_dynamic_dst": "dst src engine name",
    "range_select": "dst on_true_tile comp_op0 comp_op1 bound0 bound1 reduce_cmd reduce_res reduce_op range_start "
                    "on_false_value name",
    "select_reduce": "dst predicate on_true on_false reduce_res reduce_cmd reduce_op reverse_pred name",
    "affine_select": "dst pattern channel_multiplier on_true_tile on_false_value cmp_op offset name",
    "iota": "dst pattern offset channel_multiplier name",
    "memset": "dst value engine name",
    "bn_stats": "dst data name", "bn_aggr": "dst data name", "max8": "dst src name",
    "nc_find_index8": "dst data vals name", "nc_match_replace8": "dst data vals imm dst_idx name",
    "nc_stream_shuffle": "dst src shuffle_mask name",
    "local_gather": "dst src_buffer index num_elem_per_idx num_valid_indices name",
    "nc_n_gather": "dst data indices name", "sequence_bounds": "dst segment_ids name",
    "dropout": "dst data prob name", "rng": "dst engine name", "rand2": "dst min max name",
    "set_rng_seed": "src_seeds name",
    "nc_matmul": "dst stationary moving is_stationary_onezero is_moving_onezero is_transpose accumulate "
                 "tile_position tile_size perf_mode name",
    "nc_transpose": "dst data engine name",
    "dma_transpose": "dst src axes priority dge_mode oob_mode name",
    "activate2": "dst op data imm0 imm1 op0 op1 relu_param reverse0 reverse1 reduce_op reduce_res reduce_cmd engine "
                 "name",
    "exponential": "dst src max_value reduce_res reduce_cmd reduce_init name",
    "nonzero_with_count": "dst src index_offset padding_val name",
    "nc_matmul_mx": "dst stationary moving stationary_scale moving_scale tile_position tile_size accumulate name",
    "quantize_mx": "dst src dst_scale name",
    "dma_compute": "dst srcs reduce_op scales unique_indices oob_mode name",
}


@pytest.mark.parametrize("name,params", sorted(NEW_SIGNATURES.items()))
def test_new_generation_signature(name, params):
    sig = inspect.signature(getattr(nisa2, name))
    assert list(sig.parameters) == params.split()
    assert all(p.kind is not p.VAR_KEYWORD for p in sig.parameters.values())      # unknown kwargs raise


def test_new_generation_defaults():
    assert inspect.signature(nisa2.range_select).parameters["reduce_cmd"].default is nisa2.reduce_cmd.reset_reduce
    assert inspect.signature(nisa2.range_select).parameters["on_false_value"].default == np.float32(-3.4028235e38)
    assert inspect.signature(nisa2.select_reduce).parameters["reduce_cmd"].default is nisa2.reduce_cmd.idle
    assert inspect.signature(nisa2.rng).parameters["engine"].default is nisa2.engine.vector

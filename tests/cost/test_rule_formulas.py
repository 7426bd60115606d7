"""Cost rules on hand-built events: each documented formula (spec/isa.md §11.1) against a hand computation."""

import math

import pytest

from opennki.cost import cost_of
from opennki.events import AccessKind, Engine, InstructionExecuted, MemoryKind, Operand, Region
from opennki.hw import TRN1, TRN2, TRN3

R, W, A = AccessKind.READ, AccessKind.WRITE, AccessKind.ACCUMULATE
SB, PS, HBM = MemoryKind.SBUF, MemoryKind.PSUM, MemoryKind.HBM
ITEMSIZE = {"float32": 4, "int32": 4, "uint32": 4, "bfloat16": 2, "float16": 2, "uint16": 2,
            "float8_e4m3": 1, "uint8": 1}


def operand(role, access, kind, shape, dtype="float32", strides=None, partition_start=0):
    size = ITEMSIZE[dtype]
    if strides is None:
        strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    on_chip = kind is not HBM
    partitions = shape[0] if on_chip else 1
    free = math.prod(shape[1:]) if on_chip else math.prod(shape)
    region = Region(kind, id(shape) % 1000, partition_start, partitions, 0, free * size)
    return Operand(role, access, region, shape, dtype, size, partitions, free, strides, 0, role, shape)


def ev(opcode, executor, *operands, **params):
    return InstructionExecuted(0, (), 0, opcode, executor, operands, params)


def cycles(hw, engine, ns):
    spec = {Engine.VECTOR: hw.cost.vector, Engine.SCALAR: hw.cost.scalar, Engine.GPSIMD: hw.cost.gpsimd,
            Engine.TENSOR: hw.cost.tensor}[engine]
    return ns * spec.clock_ghz


def busy_cycles(e, hw=TRN1):
    return cycles(hw, cost_of(e, hw).engine, cost_of(e, hw).busy_ns)


N = 1000


@pytest.mark.parametrize("event, expected", [
    (ev("activation_reduce", Engine.SCALAR, operand("dst", W, SB, (128, N)), operand("data", R, SB, (128, N)),
        operand("reduce_res", W, SB, (128, 1)), op="exp"), N + 64),
    (ev("activation", Engine.SCALAR, operand("dst", W, SB, (128, 16)), operand("data", R, SB, (128, 16)),
        op="copy"), 64),
    (ev("tensor_scalar_reduce", Engine.VECTOR, operand("dst", W, SB, (128, N)), operand("data", R, SB, (128, N)),
        operand("reduce_res", W, SB, (128, 1))), N + 64),
    (ev("tensor_tensor_scan", Engine.VECTOR, operand("dst", W, SB, (128, N)), operand("data0", R, SB, (128, N)),
        operand("data1", R, SB, (128, N))), 2 * N),
    (ev("reciprocal", Engine.VECTOR, operand("dst", W, SB, (128, N)), operand("data", R, SB, (128, N))), 8 * N),
    (ev("bn_aggr", Engine.VECTOR, operand("dst", W, SB, (128, 2)), operand("data", R, SB, (128, 9))), 64),
    (ev("bn_aggr", Engine.VECTOR, operand("dst", W, SB, (128, 2)), operand("data", R, SB, (128, 300))), 1300),
    (ev("tensor_reduce", Engine.VECTOR, operand("dst", W, SB, (128, 1), "bfloat16"),
        operand("data", R, SB, (128, N), "bfloat16"), op="add"), N / 2),
    (ev("tensor_reduce", Engine.VECTOR, operand("dst", W, SB, (128, 1)), operand("data", R, SB, (128, N)),
        op="add"), N),
    (ev("memset", Engine.VECTOR, operand("dst", W, SB, (128, N), "bfloat16"), value=0), N / 2),
    (ev("memset", Engine.VECTOR, operand("dst", W, SB, (128, N), "bfloat16"), value=1.0), N),
    (ev("scalar_tensor_tensor", Engine.VECTOR, operand("dst", W, SB, (128, N), "bfloat16"),
        operand("data", R, SB, (128, N), "bfloat16"), operand("operand1", R, SB, (128, N), "bfloat16"),
        op0="subtract", op1="multiply"), N),
    (ev("scalar_tensor_tensor", Engine.VECTOR, operand("dst", W, SB, (128, N)), operand("data", R, SB, (128, N)),
        operand("operand1", R, SB, (128, N)), op0="add", op1="multiply"), 2 * N),
    (ev("tensor_tensor", Engine.VECTOR, operand("dst", W, SB, (128, N)), operand("data1", R, PS, (128, N)),
        operand("data2", R, SB, (128, N)), op="add"), N),
    (ev("tensor_copy_predicated", Engine.VECTOR, operand("dst", W, SB, (128, N)), operand("src", R, SB, (128, N)),
        operand("predicate", R, SB, (128, N), "uint8")), 2 * N),
    (ev("tensor_copy_predicated", Engine.VECTOR, operand("dst", W, SB, (128, N)), operand("src", R, PS, (128, N)),
        operand("predicate", R, SB, (128, N), "uint8")), N),
    (ev("tensor_copy_dynamic_src", Engine.VECTOR, operand("dst", W, SB, (128, 64)),
        operand("src", R, SB, (128, 64))), 600),
    (ev("nc_match_replace8", Engine.VECTOR, operand("dst", W, SB, (128, 8)), operand("data", R, SB, (128, 8))),
     64),                                                  # printed min(MIN_II, N), read as max (isa C13)
    (ev("affine_select", Engine.GPSIMD, operand("dst", W, SB, (128, N)), operand("on_true_tile", R, SB, (128, N))),
     150 + N),
    (ev("topk", Engine.GPSIMD, operand("val_dst", W, SB, (128, 24), "bfloat16"),
        operand("idx_dst", W, SB, (128, 24), "uint32"), operand("src", R, SB, (128, N), "bfloat16"), n=300),
     150 + 4 * 300 + 24),                                  # n the problem size, K = 24 kept (not src's size)
    (ev("nc_transpose", Engine.VECTOR, operand("dst", W, SB, (32, 32)), operand("data", R, SB, (32, 32))), 64),
])
def test_documented_formula(event, expected):
    assert busy_cycles(event) == pytest.approx(expected)


def test_strided_innermost_access_halves_the_rate():
    dense = ev("tensor_scalar", Engine.VECTOR, operand("dst", W, SB, (128, N)), operand("data", R, SB, (128, N)))
    strided = ev("tensor_scalar", Engine.VECTOR, operand("dst", W, SB, (128, N)),
                 operand("data", R, SB, (128, N), strides=(8 * N, 8)))              # 32-byte steps
    assert busy_cycles(strided) == pytest.approx(2 * busy_cycles(dense))


def test_local_gather_formula():
    k, V = 4, 512
    e = ev("local_gather", Engine.GPSIMD, operand("dst", W, SB, (128, V * k)),
           operand("src_buffer", R, SB, (128, 2048)), operand("index", R, SB, (128, V), "uint16"),
           num_elem_per_idx=k, num_valid_indices=V)
    t = 4
    C = ((28 + t * k) / (t * k)) / min(4 / 4, k)
    assert busy_cycles(e) == pytest.approx(150 + V * k / C)


def test_pe_transpose_and_fp32_factors():
    data = operand("data", R, SB, (128, 128))
    e = ev("nc_transpose", Engine.TENSOR, operand("dst", W, PS, (128, 128)), data)
    assert busy_cycles(e, TRN1) == pytest.approx(128 * 4)          # v2: matmul by identity, fp32 4 passes
    assert busy_cycles(e, TRN2) == pytest.approx(128 * 2)          # v3: transpose mode, 2x faster fp32
    assert busy_cycles(e, TRN3) == pytest.approx(128 * 2 / 2)      # v4: background transpose
    assert cost_of(e, TRN2).is_transpose and cost_of(e, TRN2).flops == 0


def test_double_row_fp8_contracts_twice_the_rows_in_the_same_time():
    st = operand("stationary", R, SB, (128, 2, 128), "float8_e4m3")
    mv = operand("moving", R, SB, (128, 2, 512), "float8_e4m3")
    plain = ev("nc_matmul", Engine.TENSOR, operand("dst", A, PS, (128, 512)), st, mv)
    double = ev("nc_matmul", Engine.TENSOR, operand("dst", A, PS, (128, 512)), st, mv, perf_mode="double_row")
    assert busy_cycles(double, TRN2) == pytest.approx(512)
    assert cost_of(double, TRN2).flops == 2 * 256 * 128 * 512
    assert cost_of(plain, TRN2).flops == 2 * 128 * 256 * 1024      # read as one [128, 256] x [128, 1024] pass


def test_dma_transpose_and_accumulate_efficiencies():
    src = operand("src", R, HBM, (128, 256), "bfloat16")
    dst = operand("dst", W, SB, (128, 256), "bfloat16")
    t2 = cost_of(ev("dma_transpose", Engine.DMA, dst, src), TRN2).dma
    t1 = cost_of(ev("dma_transpose", Engine.DMA, dst, src), TRN1).dma
    copy = cost_of(ev("dma_copy", Engine.DMA, dst, src), TRN2).dma
    assert t2.efficiency == pytest.approx(0.9 * copy.efficiency)
    assert t1.descriptor_bytes == 2                                 # one element per descriptor on v2
    rmw = cost_of(ev("dma_copy", Engine.DMA, dst, src, dst_rmw_op="add"), TRN2).dma
    assert rmw.efficiency == pytest.approx(0.5 * copy.efficiency)
    assert cost_of(ev("dma_copy", Engine.DMA, dst, src, dst_rmw_op="add"), TRN3).dma.efficiency == \
        pytest.approx(cost_of(ev("dma_copy", Engine.DMA, dst, src), TRN3).dma.efficiency)


def test_dma_queue_and_trigger_follow_direction_and_engine():
    sb = operand("dst", W, SB, (128, 512))
    hbm_src = operand("src", R, HBM, (128, 512))
    store = cost_of(ev("dma_copy", Engine.DMA, operand("dst", W, HBM, (128, 512)),
                       operand("src", R, SB, (128, 512))), TRN2).dma
    assert store.queue == "qSyncIO1" and store.hbm_write_bytes == 128 * 512 * 4
    act = cost_of(ev("dma_copy", Engine.DMA, sb, hbm_src, engine="scalar", dge_mode="hwdge"), TRN2).dma
    assert act.trigger is Engine.SCALAR and act.queue == "qActIO0" and act.dge == "hwdge"
    assert cost_of(ev("dma_copy", Engine.DMA, sb, hbm_src, dge_mode="hwdge"), TRN1).dma.dge == "none"   # v3+
    sw = cost_of(ev("dma_copy", Engine.DMA, sb, hbm_src, dge_mode="swdge"), TRN2)
    assert sw.dma.queue == "qGpSimdDynamic" and sw.busy_ns == pytest.approx((64 + 150 + 128) / 1.2)

"""Behaviour the foundation promises: poison, capacity errors, partition limits, bounds, events, listeners
that never change results, and errors whose last traceback frame is the user's kernel line."""

import traceback

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.errors import AllocationError, OutOfBoundsError, ShapeError
from opennki.events import InstructionExecuted
from opennki.kernel import run_kernel
from opennki.listeners import Recorder
from opennki.listeners.tracer import Tracer
from tests.kernels import legacy_kernels as K
from tests.raises import raises_at


def _last_frame(exc_info):
    return traceback.extract_tb(exc_info.value.__traceback__)[-1]


@nki.jit
def reads_unwritten(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    nl.store(out, value=nl.add(tile, nl.load(a)))
    return out


def test_reading_never_written_memory_gives_nan(rng):
    a = rng.standard_normal((128, 64), dtype=np.float32)
    assert np.isnan(reads_unwritten(a)).all()


@nki.jit
def reads_unwritten_int(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
    nl.store(out, value=nl.copy(tile))
    return out


def test_reading_never_written_int_memory_gives_sentinel(rng):
    a = rng.integers(-5, 5, (128, 64)).astype(np.int32)
    assert (reads_unwritten_int(a) == 4).all()


@nki.jit
def overflows_sbuf(a):
    tiles = []
    for i in range(200):
        tiles.append(nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf))   # 2 KiB/partition each
    return a


def larger_than_sbuf(a):
    capacity = nl.tile_size.total_available_sbuf_size
    big = nl.zeros((128, (capacity + 4096) // 4), dtype=nl.float32, buffer=nl.sbuf)   # one tile past SBUF
    return a


larger_than_sbuf = nki.jit(larger_than_sbuf)


@pytest.mark.parametrize("target,capacity", [("trn1", 176 * 1024), ("trn2", 208 * 1024)])
def test_sbuf_oversubscription_spills_and_a_tile_larger_than_sbuf_raises(target, capacity):
    """Automatic allocation spills what no longer fits (tests/samples_compat/test_sbuf_spill.py); only what no
    spilling can place raises the capacity error, with the numbers and the kernel line."""
    rec = Recorder()
    run_kernel(overflows_sbuf.func, (np.zeros((1, 1), np.float32),), target=target, listeners=[rec])
    assert any(e.opcode == "sbuf_spill" for e in rec.of_type(InstructionExecuted))
    with raises_at(AllocationError) as exc:
        run_kernel(larger_than_sbuf.func, (np.zeros((1, 1), np.float32),), target=target)
    msg = str(exc.value)
    assert "SBUF overflow" in msg and f"{capacity + 4096} bytes per partition needed" in msg
    assert str(capacity) in msg and target in msg
    assert _last_frame(exc).line.startswith("big = nl.zeros((128, (capacity + 4096) // 4)")


@nki.jit
def psum_tile_too_big(a):
    acc = nl.zeros((128, 4608), dtype=nl.float32, buffer=nl.psum)   # 18 KiB/partition of PSUM's 16
    return acc


@nki.jit
def psum_operands_too_big(a):
    x = nl.zeros((128, 3072), dtype=nl.float32, buffer=nl.psum)     # 12 KiB/partition
    y = nl.zeros((128, 3072), dtype=nl.float32, buffer=nl.psum)     # 12 more: y cannot spill x, its input
    y[...] = nl.add(x, 1.0)
    return a


@pytest.mark.parametrize("kernel, needed, line", [
    (psum_tile_too_big, 18432, "acc = nl.zeros((128, 4608), dtype=nl.float32, buffer=nl.psum)"),
    (psum_operands_too_big, 12288, "y[...] = nl.add(x, 1.0)"),
])
@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_psum_overflow_raises_when_spilling_cannot_make_room(kernel, needed, line, target):
    """PSUM tiles are spilled to make room (docs/design-notes.md); what spilling cannot place still raises."""
    with raises_at(AllocationError) as exc:
        run_kernel(kernel.func, (np.zeros((1, 1), np.float32),), target=target)
    msg = str(exc.value)
    assert "PSUM overflow" in msg and f"{needed} bytes per partition needed" in msg
    assert "16384" in msg and target in msg
    assert _last_frame(exc).line.startswith(line)


@nki.jit
def frees_as_it_goes(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32)
    for i in nl.affine_range(200):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)   # dropped each iteration
        t[...] = nl.load(a)
        acc[...] = nl.add(acc, t)
    nl.store(out, value=acc)
    return out


@nki.jit
def rebinds_big_tiles(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32)
    for i in nl.affine_range(4):
        big = nl.ndarray((128, 25000), dtype=nl.float32, buffer=nl.sbuf)  # 100 KB/partition: two never fit
        big[:, 0:512] = nl.load(a)
        acc[...] = nl.add(acc, big[:, 0:512])
    nl.store(out, value=acc)
    return out


def test_a_tensor_gets_memory_when_first_used(rng):
    """Rebinding `big` in a loop releases the previous one before the new one is first written, so the two
    never need SBUF at the same time (as with a compiler's liveness-based allocation)."""
    a = rng.standard_normal((128, 512), dtype=np.float32)
    np.testing.assert_allclose(run_kernel(rebinds_big_tiles.func, (a,), target="trn1"), 4 * a, rtol=1e-6)


def test_overflow_message_names_the_creation_line():
    @nki.jit
    def two_big(a):
        first = nl.ndarray((128, 30000), dtype=nl.float32, buffer=nl.sbuf)
        second = nl.ndarray((128, 30000), dtype=nl.float32, buffer=nl.sbuf)
        first[...] = 1.0
        second[...] = 2.0
        nl.store(a, value=nl.add(first[0:1, 0:1], second[0:1, 0:1]))   # both stay live up to here
        return a
    with raises_at(AllocationError) as exc:     # the add needs both at once: nothing can be spilled
        run_kernel(two_big.func, (np.zeros((1, 1), np.float32),), target="trn1")
    assert "created at test_foundation_behaviour.py" in str(exc.value)
    assert _last_frame(exc).line.startswith("nl.store(a, value=nl.add(first[0:1, 0:1], second[0:1, 0:1]))")


def test_unreachable_tensors_are_freed(rng):
    a = rng.standard_normal((128, 512), dtype=np.float32)
    np.testing.assert_allclose(frees_as_it_goes(a), 200 * a, rtol=1e-5)


@nki.jit
def too_many_partitions(a):
    nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)
    return a


def test_256_partition_tile_raises_with_kernel_line():
    with raises_at(ShapeError) as exc:
        too_many_partitions(np.zeros((1, 1), np.float32))
    assert "err_num_partition_exceed_arch_limit" in str(exc.value)
    assert "number of partitions 256 exceed architecture limitation of 128" in str(exc.value)
    assert _last_frame(exc).line == "nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)"


@nki.jit
def loads_past_the_end(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    tile = nl.load(a[i_p + 100, i_f])
    nl.store(out, value=tile)
    return out


def test_out_of_bounds_raises_with_index_range_and_line():
    with raises_at(OutOfBoundsError) as exc:
        loads_past_the_end(np.zeros((200, 64), np.float32))
    msg = str(exc.value)
    assert "err_tensor_access_out_of_bound" in msg and "index range [100, 227]" in msg and "200" in msg
    assert "nl.load" in msg
    assert _last_frame(exc).line == "tile = nl.load(a[i_p + 100, i_f])"


@nki.jit
def masked_past_the_end(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    tile = nl.load(a[i_p + 100, i_f], mask=(i_p + 100 < 200))
    nl.store(out[i_p, i_f], value=tile, mask=(i_p + 100 < 200))
    return out


def test_masked_off_elements_are_not_bounds_checked(rng):
    a = rng.standard_normal((200, 64), dtype=np.float32)
    out = masked_past_the_end(a)
    np.testing.assert_array_equal(out[:100], a[100:])
    assert np.isnan(out[100:]).all()


@nki.jit
def wrong_memory(a):
    nl.exp(a)             # an HBM tensor straight into a compute op
    return a


def test_wrong_buffer_kind_raises():
    from opennki.errors import MemoryKindError
    with raises_at(MemoryKindError) as exc:
        wrong_memory(np.zeros((4, 4), np.float32))
    assert "err_unsupported_memory" in str(exc.value)
    assert _last_frame(exc).line == "nl.exp(a)             # an HBM tensor straight into a compute op"


def test_listener_sees_every_instruction_with_its_line(rng):
    a, b = rng.standard_normal((2, 128, 512), dtype=np.float32)
    rec = Recorder()
    run_kernel(K.add_tile.func, (a, b), listeners=[rec])
    executed = rec.of_type(InstructionExecuted)
    assert [e.opcode for e in executed] == ["dma_copy", "dma_copy", "tensor_tensor", "dma_copy"]
    with open(K.__file__) as f:
        source = f.read().splitlines()
    lines = [source[e.location.lineno - 1].strip() for e in executed]
    assert lines == ["a_tile = nl.load(a_input)", "b_tile = nl.load(b_input)",
                     "nl.store(out, value=nl.add(a_tile, b_tile))", "nl.store(out, value=nl.add(a_tile, b_tile))"]
    assert [e.seq for e in executed] == list(range(len(executed)))


def _softmax_ref(x):
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm_ref(x, gamma, beta, eps):
    x = x.astype(np.float64)
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("kernel,make_args,ref", [
    (K.softmax_rows, lambda r: (r.standard_normal((200, 64), dtype=np.float32),), _softmax_ref),
    (K.matmul_tiled, lambda r: (r.standard_normal((256, 128), dtype=np.float32),
                                r.standard_normal((256, 512), dtype=np.float32)),
     lambda a, b: a.T.astype(np.float64) @ b),
    (K.layernorm_bn, lambda r: (r.standard_normal((128, 700), dtype=np.float32),
                                r.standard_normal(700, dtype=np.float32), r.standard_normal(700, dtype=np.float32),
                                1e-5), _layernorm_ref),
])
def test_results_identical_with_and_without_listeners(rng, kernel, make_args, ref):
    args = make_args(rng)
    plain = run_kernel(kernel.func, args)
    observed = run_kernel(kernel.func, args, listeners=[Recorder(), Tracer()])
    np.testing.assert_array_equal(plain, observed)      # NaN equals NaN here: so also against NumPy
    np.testing.assert_allclose(observed, ref(*args), rtol=1e-4, atol=1e-4)


def test_tracer_records_loads_and_stores_with_masks(rng):
    x = rng.standard_normal((200, 64), dtype=np.float32)
    tracer = Tracer()
    run_kernel(K.softmax_rows.func, (x,), listeners=[tracer])
    assert len(tracer.loads) == 2 and len(tracer.stores) == 2
    first, second = tracer.loads
    assert first.tensor == "x" and second.tensor == "x"
    assert first.mask is not None and first.mask.all()
    np.testing.assert_array_equal(np.sort(second.active_offsets()), np.arange(128 * 64, 200 * 64))
    assert second.mask.sum() == 72 * 64
    assert tracer.stores[1].on_chip.kind.name == "SBUF"

"""Every public name of the new generation's `nki.isa` in any release (the API stubs of SDK 2.27 ... 2.32 =
NKI 0.2 ... 0.6, spec/isa.md §0.1 and §3, plus NKI 0.7's scalars) exists and is exercised by a test that
checks values on random data against NumPy.

The claim is checked from the test sources: for each name, some test function calls it through a module alias
of `opennki.isa` (in its own body or in a module-level helper or kernel it names) and compares results with
NumPy (`np.testing`, `np.array_equal`, ...). The tests below cover the names no other test module exercises.
"""

import ast
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import DtypeError, KernelError, ShapeError
from opennki.sim.options import SimOptions
from tests.isa.helpers import rand, rejects, run

NEW_ISA_NAMES = """
NKIObject NkiInstruction NkiValidationError VirtualRegister activate2 activation activation_reduce affine_select
bn_aggr bn_stats core_barrier dge_mode dma_compute dma_copy dma_engine dma_transpose dropout engine exponential
get_nc_sub_version get_nc_version gpsimd_engine iota local_gather matmul_perf_mode max8 memset nc_find_index8
nc_match_replace8 nc_matmul nc_matmul_mx nc_n_gather nc_stream_shuffle nc_transpose nc_version nonzero_with_count
oob_mode quantize_mx rand2 rand_get_state rand_set_state range_select reciprocal reduce_cmd register_alloc
register_load register_move register_store rng scalar_engine scalar_tensor_tensor select_reduce sendrecv
sequence_bounds set_rng_seed tensor_copy tensor_copy_dynamic_dst tensor_copy_dynamic_src tensor_copy_predicated
tensor_engine tensor_partition_reduce tensor_reduce tensor_scalar tensor_scalar_cumulative tensor_scalar_reduce
tensor_tensor tensor_tensor_scan topk unknown_engine vector_engine
NkiScalar scalar_load scalar_store scalar_alu
""".split()

TESTS = Path(__file__).resolve().parents[1]
_NUMPY_CHECK = re.compile(r"np\.testing\.|assert_allclose|assert_array_equal|np\.array_equal|np\.allclose|"
                          r"assert_within_ulps")


def _isa_aliases(tree) -> set[str]:
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == "opennki.isa"}
        elif isinstance(node, ast.ImportFrom) and node.module == "opennki":
            aliases |= {a.asname or a.name for a in node.names if a.name == "isa"}
    return aliases


def numpy_checked_uses() -> dict[str, set[str]]:
    """name -> the NumPy-checking test functions (`file::test`) that call `<alias of opennki.isa>.name`."""
    found: dict[str, set[str]] = {}
    pattern = re.compile(r"\b(\w+)\.(\w+)\b")
    for path in sorted(TESTS.rglob("test_*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        aliases = _isa_aliases(tree)
        if not aliases:
            continue
        top = {n.name: ast.get_source_segment(text, n) for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        for name, source in top.items():
            if not name.startswith("test_") or not _NUMPY_CHECK.search(source):
                continue
            body = source + "".join(s for n, s in top.items() if n != name and re.search(rf"\b{n}\b", source))
            for alias, attr in pattern.findall(body):
                if alias in aliases:
                    found.setdefault(attr, set()).add(f"{path.relative_to(TESTS.parent)}::{name}")
    return found


def test_the_list_is_every_release_s_names():
    assert len(NEW_ISA_NAMES) == len(set(NEW_ISA_NAMES)) == 74


@pytest.mark.parametrize("name", NEW_ISA_NAMES)
def test_name_exists(name):
    assert hasattr(nisa, name), name


def test_every_name_is_exercised_by_a_numpy_checked_test():
    uses = numpy_checked_uses()
    missing = sorted(n for n in NEW_ISA_NAMES if not uses.get(n))
    assert not missing, f"nki.isa names without a NumPy-checked test: {missing}"


def _out(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


# -------------------------------------------------------------------------------------------------- topk

def _topk_kernel(P, src_x, n, k, sorted_):
    def kernel(x):
        src = nl.ndarray((P, src_x), nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
        vals = nl.ndarray((P, k), nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((P, k), nl.uint32, buffer=nl.sbuf)
        nisa.memset(dst=vals, value=5.0)           # positions topk does not write keep these
        nisa.memset(dst=idx, value=77)
        nisa.topk(val_dst=vals, idx_dst=idx, src=src, n=n, sorted=sorted_)
        return _out(vals), _out(idx)
    return kernel


@pytest.mark.parametrize("sorted_", [True, False])
def test_topk_per_16_partition_group_in_snake_layout(rng, sorted_):
    P, src_x, n, k = 48, 4, 57, 20
    x = rng.standard_normal((P, src_x)).astype(ml_dtypes.bfloat16)
    vals, idx = run(_topk_kernel(P, src_x, n, k, sorted_), x)
    positions = -(-k // 16)
    for g in range(P // 16):
        snake = x[16 * g:16 * g + 16].astype(np.float32).T.reshape(-1)[:n]
        order = np.argsort(-snake, kind="stable")
        ranks = np.arange(16 * positions)
        if not sorted_:
            ranks = np.where(ranks < k, k - 1 - ranks, ranks)
        want_idx = order[ranks]
        got_idx = idx[16 * g:16 * g + 16, :positions].T.reshape(-1)       # back from snake layout
        got_val = vals[16 * g:16 * g + 16, :positions].astype(np.float32).T.reshape(-1)
        np.testing.assert_array_equal(got_idx, want_idx)
        np.testing.assert_array_equal(got_val, snake[want_idx])
        np.testing.assert_array_equal(got_val[:k], (np.sort(snake)[::-1][:k] if sorted_ else np.sort(snake)[-k:]))
    np.testing.assert_array_equal(vals[:, positions:].astype(np.float32), 5.0)   # unwritten positions
    np.testing.assert_array_equal(idx[:, positions:], 77)


def test_topk_rules(rng):
    x = rng.standard_normal((32, 4)).astype(ml_dtypes.bfloat16)
    rejects(_topk_kernel(32, 4, 70, 8, True), x, error=ShapeError, api="nisa.topk")       # src holds < n
    rejects(_topk_kernel(32, 4, 6, 4, True), x, error=KernelError, api="nisa.topk")       # n < 8
    rejects(_topk_kernel(32, 4, 40, 41, True), x, error=ShapeError, api="nisa.topk")      # k > n
    y = rng.standard_normal((24, 4)).astype(ml_dtypes.bfloat16)
    rejects(_topk_kernel(24, 4, 40, 8, True), y, error=ShapeError, api="nisa.topk")       # P % 16
    rejects(_topk_kernel(32, 4, 40, 8, True), x, error=KernelError, api="nisa.topk", target="trn1")


# ------------------------------------------------------------------------------- random generator state

def _state_kernel(words, engine, seeds=None):
    """Reads the state, draws a, sets the state read (or `seeds`), draws b."""
    def kernel(*given):
        state = nl.ndarray((8, words), nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=state, engine=engine)
        a = nl.ndarray((8, 64), nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=a)
        if given:
            nisa.dma_copy(dst=state, src=given[0])
        nisa.rand_set_state(src_seeds=state, engine=engine)
        b = nl.ndarray((8, 64), nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=b)
        return _out(state), _out(a), _out(b)
    return kernel


@pytest.mark.parametrize("words,engine", [(6, nisa.engine.gpsimd), (24, nisa.engine.vector)])
def test_a_state_read_back_continues_the_stream_where_it_was_read(words, engine):
    state, a, b = run(_state_kernel(words, engine), options=SimOptions(seed=3))
    assert state.dtype == np.uint32 and state.shape == (8, words)
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) > 500                       # random bits, not a constant
    again, a2, _ = run(_state_kernel(words, engine), options=SimOptions(seed=3))
    np.testing.assert_array_equal(again, state)          # the state is a function of the stream
    np.testing.assert_array_equal(a2, a)


def test_set_state_seeds_deterministically(rng):
    seeds = rng.integers(0, 2 ** 32, (8, 6), dtype=np.uint64).astype(np.uint32)
    _, a, b = run(_state_kernel(6, nisa.engine.gpsimd), seeds)
    _, _, b2 = run(_state_kernel(6, nisa.engine.gpsimd), seeds)
    _, _, b3 = run(_state_kernel(6, nisa.engine.gpsimd), seeds ^ np.uint32(1))
    np.testing.assert_array_equal(b, b2)
    assert not np.array_equal(b, a) and not np.array_equal(b, b3)


def test_state_rules():
    def wrong_words():
        s = nl.ndarray((8, 6), nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=s, engine=nisa.engine.vector)

    def wrong_dtype():
        s = nl.ndarray((8, 6), nl.int32, buffer=nl.sbuf)
        nisa.rand_set_state(src_seeds=s)

    rejects(wrong_words, error=ShapeError, api="nisa.rand_get_state")
    rejects(wrong_dtype, error=DtypeError, api="nisa.rand_set_state")
    rejects(wrong_words, error=KernelError, api="nisa.rand_get_state", target="trn2")    # Vector: v4+
    rejects(_state_kernel(6, nisa.engine.gpsimd), error=KernelError, api="nisa.rand_get_state", target="trn1")


# --------------------------------------------------------------- handles, target queries, enums, classes

def test_instructions_return_handles_whose_dependencies_chain(rng):
    seen = {}

    def kernel(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        load = nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        act = nisa.activation(dst=y, op=nl.exp, data=t)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        store = nisa.dma_copy(dst=out, src=y)
        seen["chain"] = store.depends_on(act).depends_on(load) is store
        seen["deps"] = store.dependencies == [act, load]
        seen["types"] = all(isinstance(h, nisa.NkiInstruction) for h in (load, act, store))
        return out

    x = rand(rng, 64, 32)
    np.testing.assert_allclose(run(kernel, x), np.exp(x), rtol=1e-6)
    assert seen == {"chain": True, "deps": True, "types": True}


def test_a_dependency_out_of_a_device_loop_is_rejected(rng):
    def kernel(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        made = []

        def body(i):
            made.append(nisa.dma_copy(dst=t, src=x))
        nl.fori_loop(0, 2, body)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t).depends_on(made[0])
        return out

    def bad_producer(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x).depends_on("load")

    x = rand(rng, 8, 8)
    rejects(kernel, x, error=KernelError, match="device loop", api="depends_on")
    rejects(bad_producer, x, error=KernelError, match="NkiInstruction", api="depends_on")


@pytest.mark.parametrize("target,version", [("trn1", 2), ("trn2", 3), ("trn3", 4)])
def test_target_queries(target, version, rng):
    def kernel(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        assert nisa.get_nc_sub_version() == 0           # opennki models each generation's first revision
        nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=float(nisa.get_nc_version().value))
        assert nisa.get_nc_version() is nisa.nc_version(version)
        return _out(y)

    x = rand(rng, 16, 8)
    np.testing.assert_array_equal(run(kernel, x, target=target), x * np.float32(version))


@pytest.mark.parametrize("alias,member", [("tensor_engine", "tensor"), ("vector_engine", "vector"),
                                          ("scalar_engine", "scalar"), ("gpsimd_engine", "gpsimd"),
                                          ("unknown_engine", "unknown")])
def test_deprecated_engine_aliases_choose_the_engine(alias, member, rng):
    def kernel(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf if alias != "tensor_engine" else nl.psum)
        if alias == "tensor_engine":
            nisa.nc_transpose(dst=y, data=t, engine=nisa.tensor_engine)
        else:
            nisa.tensor_copy(dst=y, src=t, engine={"vector_engine": nisa.vector_engine,
                                                   "scalar_engine": nisa.scalar_engine,
                                                   "gpsimd_engine": nisa.gpsimd_engine,
                                                   "unknown_engine": nisa.unknown_engine}[alias])
        z = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=z, src=y)
        return _out(z)

    assert getattr(nisa, alias) is nisa.engine[member]
    x = rand(rng, 32, 32)
    np.testing.assert_array_equal(run(kernel, x), x.T if alias == "tensor_engine" else x)


def test_matmul_perf_mode_dge_mode_and_dma_engine_values(rng):
    def kernel(a, b):
        ta = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a, dge_mode=nisa.dge_mode.swdge)
        nisa.dma_copy(dst=tb, src=b)
        acc = nl.ndarray((a.shape[1], b.shape[1]), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=ta, moving=tb, perf_mode=nisa.matmul_perf_mode.none)
        y = nl.ndarray(acc.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y, src=acc)
        return _out(y)

    a, b = rand(rng, 64, 32), rand(rng, 64, 48)
    np.testing.assert_allclose(run(kernel, a, b), a.T @ b, rtol=1e-5, atol=1e-5)
    assert [m.name for m in nisa.dma_engine] == ["dma", "gpsimd_dma"]
    assert nisa.dma_engine.dma.value == 1 and nisa.dma_engine.gpsimd_dma.value == 2


def test_validation_errors_are_nki_validation_errors(rng):
    def skips_partitions(x):
        t = nl.ndarray((32, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray((16, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y, src=t.ap([[32, 16], [1, 16]]))      # partition step 32: skips partitions
        return _out(y)

    def fine(x):
        t = nl.ndarray((32, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray((32, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y, src=t.ap([[16, 32], [1, 16]]))
        return _out(y)

    x = rand(rng, 32, 16)
    err = rejects(skips_partitions, x, error=nisa.NkiValidationError)
    assert isinstance(err, AssertionError)
    np.testing.assert_array_equal(run(fine, x), x)
    assert issubclass(ShapeError, nisa.NkiValidationError) and issubclass(DtypeError, nisa.NkiValidationError)


def test_nkiobject_is_the_language_s_and_user_classes_work_in_kernels(rng):
    class Scale(nisa.NKIObject):
        factor = 2.0

    def kernel(x):
        s = Scale(factor=3.0)
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=s.factor)
        return _out(y)

    assert nisa.NKIObject is nl.NKIObject
    x = rand(rng, 16, 16)
    np.testing.assert_array_equal(run(kernel, x), x * np.float32(3.0))


def test_register_load_and_store_move_one_value(rng):
    def kernel(x):
        t = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        reg = nisa.register_alloc()
        nisa.register_load(reg, t)
        assert isinstance(reg, nisa.VirtualRegister)
        u = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.register_store(u, reg)
        return _out(u)

    x = rng.integers(-1000, 1000, (1, 1)).astype(np.int32)
    np.testing.assert_array_equal(run(kernel, x), x)


def test_dynamic_dst_copy_writes_at_the_run_time_offset(rng):
    def kernel(x, off):
        t = nl.ndarray((16, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        o = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=o, src=off)
        y = nl.ndarray((16, 32), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=y, value=0.0)
        nisa.tensor_copy_dynamic_dst(dst=y.ap([[32, 16], [1, 8]], scalar_offset=o, indirect_dim=1), src=t)
        return _out(y)

    x = rand(rng, 16, 8)
    want = np.zeros((16, 32), np.float32)
    want[:, 12:20] = x
    with pytest.warns(DeprecationWarning, match="NKI 0.4"):
        got = run(kernel, x, np.array([[12]], np.int32))
    np.testing.assert_array_equal(got, want)


def test_random_instructions_are_reproducible_by_seed(rng):
    def kernel(x, seed):
        s = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=seed)
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        outs = []
        for _ in range(2):
            nisa.set_rng_seed(src_seeds=s)
            bits = nl.ndarray((16, 32), nl.uint32, buffer=nl.sbuf)
            nisa.rng(dst=bits)
            y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
            nisa.dropout(dst=y, data=t, prob=0.5)
            outs += [_out(bits), _out(y)]
        return tuple(outs)

    x = rand(rng, 16, 32, low=1.0, high=2.0)
    bits1, y1, bits2, y2 = run(kernel, x, np.array([[11]], np.int32))
    np.testing.assert_array_equal(bits1, bits2)
    np.testing.assert_array_equal(y1, y2)
    kept = y1 != 0
    np.testing.assert_array_equal(y1[kept], x[kept])
    assert 0.3 < kept.mean() < 0.7 and len(np.unique(bits1)) > 400


def test_scalar_arithmetic_offsets_a_copy(rng):
    def kernel(x, index):
        i_tile = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=i_tile, src=index)
        i = nisa.scalar_load(i_tile)
        assert isinstance(i, nisa.NkiScalar) and isinstance(i * 2 + 1, nisa.NkiScalar)
        row = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=i * 2 + 1))
        return _out(row)

    x = rand(rng, 16, 8)
    np.testing.assert_array_equal(run(kernel, x, np.array([[3]], np.int32)), x[7:8])


def test_topk_does_not_exist_before_0_6(rng):
    import opennki as nki
    from opennki.releases import ReleaseError
    x = rng.standard_normal((16, 4)).astype(ml_dtypes.bfloat16)
    with pytest.raises(ReleaseError, match="added in NKI 0.6"):
        nki.jit(_topk_kernel(16, 4, 40, 8, True), api_version="0.5")(x)
    vals, _ = nki.jit(_topk_kernel(16, 4, 40, 8, True), api_version="0.7")(x)
    np.testing.assert_array_equal(vals[:8, 0].astype(np.float32),
                                  np.sort(x.astype(np.float32).T.reshape(-1)[:40])[::-1][:8])


@pytest.mark.parametrize("strict", [False, True])
def test_topk_sorted_keyword_is_0_6s_type_error(rng, strict):
    """sorted= came with NKI 0.7: under api_version="0.6" (hardware-strict or not) sorted=True is the TypeError
    0.6's signature gives, naming the release that added it and what to write instead; without sorted=True the
    0.6 call runs, and every level from 0.7 (or none) takes it."""
    import opennki as nki
    from opennki.releases import ReleaseTypeError
    from tests.raises import raises_at
    x = rng.standard_normal((16, 4)).astype(ml_dtypes.bfloat16)
    snake = np.sort(x.astype(np.float32).T.reshape(-1)[:40])
    with raises_at(ReleaseTypeError, match=r"unexpected keyword argument 'sorted' in NKI 0\.6.*added in NKI 0\.7",
                   line="nisa.topk(") as info:
        nki.jit(_topk_kernel(16, 4, 40, 8, True), api_version="0.6", hardware_strict=strict)(x)
    assert isinstance(info.value, TypeError) and "omit sorted=" in info.value.hint
    vals, _ = nki.jit(_topk_kernel(16, 4, 40, 8, False), api_version="0.6", hardware_strict=strict)(x)
    np.testing.assert_array_equal(np.sort(vals[:8, 0].astype(np.float32)), snake[-8:])
    for level in (None, "0.7"):
        vals, _ = nki.jit(_topk_kernel(16, 4, 40, 8, True), api_version=level, hardware_strict=strict)(x)
        np.testing.assert_array_equal(vals[:8, 0].astype(np.float32), snake[::-1][:8])

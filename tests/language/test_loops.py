"""Legacy loops: affine_range / sequential_range / static_range semantics, the output-dependency check of
affine_range (err_unexpected_output_dependencies) and its allowed exceptions, and loop_reduce
(spec/language.md §5.6, §5.7, §8.7)."""

import numpy as np
import pytest

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError
from tests.language.coverage import covers
from tests.language.helpers import run
from tests.raises import raises_at

DEPENDENCY = "err_unexpected_output_dependencies"


@covers("affine_range", "sequential_range", "static_range")
def test_loops_iterate_like_range_with_their_arguments(rng):
    x = rng.standard_normal((6, 16, 4)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((16, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((16, 4), dtype=nl.float32)
        assert len(nl.affine_range(1, 6, 2)) == 3 and list(nl.static_range(3)) == [0, 1, 2]
        for i in nl.affine_range(1, 6, 2):                        # 1, 3, 5
            acc += nl.load(x[i])
        for i in nl.sequential_range(2):                           # carried: acc = acc * 2
            acc[...] = nl.multiply(acc, 2.0)
        for i in nl.static_range(start=0, stop=1):
            acc[...] = nl.add(acc, nl.load(x[i]))
        nl.store(out, value=acc)
        return out
    np.testing.assert_allclose(run(kernel, x), (x[1] + x[3] + x[5]) * 4 + x[0], rtol=1e-5)


def _kernel_writing(pattern):
    def kernel(x):
        out = nl.ndarray((4, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        scratch = nl.ndarray((16, 8), dtype=nl.float32)
        acc = nl.zeros((16, 8), dtype=nl.float32)
        psum_acc = nl.zeros((16, 8), dtype=nl.float32, buffer=nl.psum)
        ident = nl.load(nl.shared_identity_matrix(16, dtype=nl.float32))
        for i in nl.affine_range(4):
            t = nl.load(x[i])
            if pattern == "own_slice":
                nl.store(out[i], value=t)
            elif pattern == "same_hbm_slice":
                nl.store(out[0], value=t)
            elif pattern == "same_sbuf_tile":
                scratch[...] = t
                nl.store(out[i], value=scratch)
            elif pattern == "overlapping_columns":
                nl.store(out[0, :, i:i + 2], value=t[:, 0:2])
            elif pattern == "interleaved_columns":
                nl.store(out[0, :, nl.ds(i, 1)], value=t[:, 0:1])
            elif pattern == "sbuf_accumulation":
                acc += t
            elif pattern == "explicit_accumulation":
                acc[...] = acc + t
            elif pattern == "psum_matmul_accumulation":
                psum_acc += nl.matmul(ident, t, transpose_x=True)
            elif pattern == "tile_allocated_inside":
                inner = nl.ndarray((16, 8), dtype=nl.float32)
                inner[...] = t
                nl.store(out[i], value=inner)
            elif pattern == "masked_disjoint_rows":
                i_p, i_f = nl.arange(16)[:, None], nl.arange(8)[None, :]
                nl.store(out[0, i_p, i_f], value=t, mask=(i_p >= 4 * i) & (i_p < 4 * i + 4))
        nl.store(out[3], value=nl.add(acc, psum_acc))
        return out
    return kernel


@pytest.mark.parametrize("pattern,conflicts", [
    ("own_slice", False), ("same_hbm_slice", True), ("same_sbuf_tile", True), ("overlapping_columns", True),
    ("interleaved_columns", False), ("sbuf_accumulation", False), ("explicit_accumulation", False),
    ("psum_matmul_accumulation", False), ("tile_allocated_inside", False), ("masked_disjoint_rows", False),
])
def test_affine_iterations_writing_the_same_location_are_reported(pattern, conflicts, rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    kernel = _kernel_writing(pattern)
    if conflicts:
        with raises_at(KernelError, match=DEPENDENCY) as info:
            run(kernel, x)
        assert "iterations 0 and 1" in str(info.value) and "test_loops.py" in str(info.value)
    else:
        np.testing.assert_allclose(run(kernel, x), _expected_writing(pattern, x), rtol=1e-5, atol=1e-6)


def _expected_writing(pattern, x):
    """What `_kernel_writing(pattern)` stores: NaN (HBM poison) where it writes nothing; out[3] is last
    overwritten with acc + psum_acc."""
    out = np.full((4, 16, 8), np.nan, np.float32)
    total = np.zeros((16, 8), np.float32)
    for i in range(4):
        if pattern in ("own_slice", "tile_allocated_inside"):
            out[i] = x[i]
        elif pattern == "interleaved_columns":
            out[0, :, i] = x[i][:, 0]
        elif pattern == "masked_disjoint_rows":
            out[0, 4 * i:4 * i + 4] = x[i][4 * i:4 * i + 4]
        elif pattern in ("sbuf_accumulation", "explicit_accumulation", "psum_matmul_accumulation"):
            total += x[i]
    out[3] = total
    return out


def _tile_grid_kernel(clash):
    """Each (i, j) iteration of two affine loops stores its own [4, 8] tile of an [8 x 4, 6 x 8] output;
    with `clash`, the last iteration also stores over the tile of iteration (1, 2), far from its own."""
    def kernel(x):
        out = nl.ndarray((32, 48), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(8):
            for j in nl.affine_range(6):
                t = nl.load(x[i * 4:(i + 1) * 4, j * 8:(j + 1) * 8])
                nl.store(out[i * 4:(i + 1) * 4, j * 8:(j + 1) * 8], value=t)
                if clash and i == 7 and j == 5:
                    nl.store(out[4:8, 16:24], value=t)
        return out
    return kernel


def test_affine_tile_grid_writes_are_checked_against_the_right_earlier_write(rng):
    x = rng.standard_normal((32, 48)).astype(np.float32)
    np.testing.assert_array_equal(run(_tile_grid_kernel(False), x), x)
    with raises_at(KernelError, match=DEPENDENCY, line="nl.store(out[4:8, 16:24]") as info:
        run(_tile_grid_kernel(True), x)
    assert "iterations 1 and 7" in str(info.value)     # the outer loop's iterations; first written by (1, 2)


def test_write_index_returns_the_writes_near_a_box_in_write_order():
    from opennki._src.dependencies import _Write, _Writes
    writes = _Writes()
    tiles = [((r * 128, r * 128 + 127), (c * 512, c * 512 + 511)) for r in range(16) for c in range(8)]
    for n, box in enumerate(tiles):
        writes.add(_Write(((0, n),), box, None, None, "out"))
    wide = ((0, 2047), (0, 4095))                          # the whole tensor: spans every bucket
    writes.add(_Write(((0, 999),), wide, None, None, "out"))
    unboxed = _Write(((0, 1000),), None, None, None, "out")       # run-time indices: no box
    writes.add(unboxed)
    assert [w.iteration(0) for w in writes.near(tiles[37])] == [37, 999, 1000]
    across = ((3 * 128 + 64, 4 * 128 + 63), (5 * 512 + 256, 6 * 512 + 255))   # four tiles' corners
    assert [w.iteration(0) for w in writes.near(across)] == [3 * 8 + 5, 3 * 8 + 6, 4 * 8 + 5, 4 * 8 + 6, 999,
                                                               1000]
    assert len(writes.near(None)) == len(writes.near(wide)) == len(tiles) + 2


def test_sequential_and_static_loops_may_rewrite_a_location(rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    for loop in (nl.sequential_range, nl.static_range, range):
        def kernel(x, loop=loop):
            out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in loop(4):
                nl.store(out, value=nl.load(x[i]))
            return out
        np.testing.assert_array_equal(run(kernel, x), x[3])


def test_a_sequential_loop_inside_an_affine_loop_is_one_iteration(rng):
    x = rng.standard_normal((2, 3, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((2, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            for j in nl.sequential_range(3):
                nl.store(out[i], value=nl.load(x[i, j]))
        return out
    np.testing.assert_array_equal(run(kernel, x), x[:, 2])


def test_nested_affine_loops_check_both_levels(rng):
    x = rng.standard_normal((2, 3, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((2, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            for j in nl.affine_range(3):
                nl.store(out[i], value=nl.load(x[i, j]))
        return out
    with raises_at(KernelError, match=DEPENDENCY):
        run(kernel, x)


def test_run_time_scatter_indices_are_checked(rng):
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)

    def kernel(x, idx):
        out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        i_f = nl.arange(8)[None, :]
        for i in nl.affine_range(2):
            nl.store(out[nl.load(idx[i]), i_f], value=nl.load(x[i]))
        return out
    disjoint = np.arange(8, dtype=np.int32).reshape(2, 4, 1)
    np.testing.assert_array_equal(run(kernel, x, disjoint), x.reshape(8, 8))     # rows 0-3, then 4-7
    with raises_at(KernelError, match=DEPENDENCY):
        run(kernel, x, np.array([[0, 1, 2, 3], [3, 4, 5, 6]], np.int32).reshape(2, 4, 1))


@covers("loop_reduce", "zeros")
def test_loop_reduce_accumulates_into_its_assignment_target(rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((2, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        total = nl.zeros((16, 8), dtype=nl.float32)
        biggest = nl.full((16, 8), -np.inf, dtype=nl.float32)
        for k in nl.affine_range(4):
            a = nl.load(x[k])
            total = nl.loop_reduce(a, op=np.add, loop_indices=[k])
            biggest[...] = nl.loop_reduce(a, op=np.maximum, loop_indices=k, dtype=nl.float32)
        nl.store(out[0], value=total)
        nl.store(out[1], value=biggest)
        return out
    out = run(kernel, x)
    np.testing.assert_allclose(out[0], x.sum(0), rtol=1e-5)
    np.testing.assert_array_equal(out[1], x.max(0))


def test_loop_reduce_needs_a_destination_created_before_the_loop(rng):
    def kernel(x):
        for k in nl.affine_range(2):
            fresh = nl.loop_reduce(nl.load(x[k]), op=np.add, loop_indices=[k])
        return fresh
    with raises_at(KernelError, match="assignment target"):
        run(kernel, rng.standard_normal((2, 4, 4)).astype(np.float32))


def test_nisa_instructions_are_checked_too(rng):
    x = rng.standard_normal((2, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((16, 8), dtype=nl.float32)
        for i in nl.affine_range(2):
            buf[...] = nisa.tensor_copy(nl.load(x[i]))
        nl.store(out, value=buf)
        return out
    with raises_at(KernelError, match=DEPENDENCY):
        run(kernel, x)


@pytest.mark.parametrize("masks, conflict", [((True, True), True), ((True, False), False),
                                             ((False, True), False), ((False, False), False)])
def test_writes_under_constant_masks_conflict_only_where_both_write(rng, masks, conflict):
    """A constant `mask=True` writes every element of its tile, `mask=False` none (causal kernels compare loop
    indices): iterations rewriting a tile conflict only when both write it."""
    x = rng.standard_normal((2, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.zeros((16, 8), dtype=nl.float32)
        for i in nl.affine_range(2):
            buf[...] = nisa.activation(np.exp, data=nl.load(x[i]), mask=(masks[0] if i == 0 else masks[1]))
        nl.store(out, value=buf)
        return out
    if conflict:
        with raises_at(KernelError, match=DEPENDENCY, line="buf[...] = nisa.activation"):
            run(kernel, x)
    else:
        want = np.exp(x[0] if masks[0] else x[1]) if any(masks) else np.zeros((16, 8), np.float32)
        np.testing.assert_allclose(run(kernel, x), want, rtol=1e-6)


@pytest.mark.parametrize("inner", [False, True])
def test_the_scope_rule_keeps_nothing_per_tensor(rng, inner):
    """A tensor refers to the loop it is local to (`Storage.scope`) and the rules keep no per-tensor table, so
    long loops leave nothing behind: after 200 tiles made in a loop (each in an inner loop of its own, which
    finishes while its tile lives on), the rules hold the same state as at the start, and the first tile,
    kept, is still found out of its scope."""
    import opennki._src.rules as rules
    from opennki.sim.program import current
    x = rng.standard_normal((16, 8)).astype(np.float32)
    states = []

    def kernel(x):
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        kept = None
        states.append(dict(vars(rules.rules(current()))))
        for i in nl.sequential_range(200):       # 200 tiles, one alive at a time (and the first, kept)
            if inner:
                for _ in nl.sequential_range(1):
                    t = nl.load(x)
            else:
                t = nl.load(x)
            kept = t if i == 0 else kept
        states.append(dict(vars(rules.rules(current()))))
        nl.store(out, value=kept)                # the first iteration's tile: still out of its scope
        return out
    with raises_at(KernelError, match="err_local_variable_used_out_of_scope", line="nl.store(out, value=kept)"):
        run(kernel, x)
    assert states[0].keys() == states[1].keys() == {"closed", "lean_idle", "_observers"}     # nothing per tensor


def test_a_write_in_a_finished_inner_loop_conflicts_with_the_next_outer_iteration(rng):
    x = rng.standard_normal((2, 3, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((3, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            for j in nl.affine_range(3):
                nl.store(out[j], value=nl.load(x[i, j]))     # each j its own slice, but again for every i
        return out
    with raises_at(KernelError, match=DEPENDENCY, line="nl.store(out[j], value=nl.load(x[i, j]))") as exc:
        run(kernel, x)
    assert "iterations 0 and 1" in str(exc.value)


def test_runs_of_an_affine_loop_inside_a_sequential_loop_are_ordered(rng, monkeypatch):
    from opennki._src import dependencies
    from opennki.sim.program import current
    x = rng.standard_normal((3, 2, 16, 8)).astype(np.float32)
    left = []

    def kernel(x):
        out = nl.ndarray((2, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for s in nl.sequential_range(3):
            for i in nl.affine_range(2):
                nl.store(out[i], value=nl.load(x[s, i]))    # each run rewrites what the last one wrote
            left.append(len(dependencies.checker(current()).writes))
        return out
    np.testing.assert_array_equal(run(kernel, x), x[2])
    assert left == [0, 0, 0]            # no affine loop running: the writes are dropped


def test_the_kept_loop_iterations_are_those_of_the_running_affine_loops(rng, monkeypatch):
    """`OutputDependencyChecker.frames`, changed in place at an innermost affine loop's next iteration, is at every
    write the (loop id, iteration) pairs of the running affine loops (or stale: None): nested, restarted, broken
    out of and interleaved with sequential loops."""
    from opennki._src import dependencies
    x = rng.standard_normal((2, 3, 16, 8)).astype(np.float32)
    seen = []
    executed = dependencies.OutputDependencyChecker.executed

    def checking(self, prog, instr, location):
        running = tuple((f.loop_id, f.iteration) for f in prog.loops if f.is_parallel)
        assert self.frames is None or self.frames == running
        executed(self, prog, instr, location)
        seen.append(self.frames)
        assert self.frames in (None, running)

    monkeypatch.setattr(dependencies.OutputDependencyChecker, "executed", checking)

    def kernel(x):
        out = nl.ndarray((2, 3, 3, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            for s in nl.sequential_range(2):
                for j in nl.affine_range(3):
                    nl.store(out[i, s, j], value=nl.load(x[i, j]))
            for j in nl.affine_range(3):
                if j == 2:
                    break
                nl.store(out[i, 2, j], value=nl.load(x[i, j]))
            nl.store(out[i, 2, 2], value=nl.load(x[i, 2]))
        return out
    out = run(kernel, x)
    for i in range(2):
        for s in range(3):
            np.testing.assert_array_equal(out[i, s], x[i])
    assert len({f for f in seen if f is not None}) >= 2 * (2 * 3 + 2 + 1)     # a pair tuple per loop iteration


SCOPE = "err_local_variable_used_out_of_scope"


def test_a_tile_of_a_finished_inner_loop_is_out_of_scope_in_the_outer_loop(rng):
    x = rng.standard_normal((2, 3, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((2, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            for j in nl.sequential_range(3):
                t = nl.load(x[i, j])
            nl.store(out[i], value=t)
        return out
    with raises_at(KernelError, match=SCOPE, line="nl.store(out[i], value=t)"):
        run(kernel, x)


def test_each_run_of_an_inner_loop_is_a_scope_of_its_own(rng):
    """A tile made in the first run of the inner loop is out of scope in its second run (a new loop)."""
    x = rng.standard_normal((2, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        first = None
        for i in nl.sequential_range(2):
            for j in nl.sequential_range(1):
                if first is None:
                    first = nl.load(x[i])
                else:
                    nl.store(out, value=nl.add(first, 1.0))
        return out
    with raises_at(KernelError, match=SCOPE, line="nl.store(out, value=nl.add(first, 1.0))"):
        run(kernel, x)


def test_tiles_of_running_loops_and_of_earlier_iterations_are_in_scope(rng):
    x = rng.standard_normal((3, 4, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((3, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(3):
            base = nl.load(x[i, 0])                 # made in the outer loop, used in the inner one
            prev = base
            for j in nl.sequential_range(1, 4):
                cur = nl.add(prev, nl.load(x[i, j]))   # `prev`: the previous iteration's tile
                prev = cur
                if j == 3:
                    nl.store(out[i], value=nl.multiply(cur, base))
        return out
    expected = x.sum(axis=1) * x[:, 0]
    np.testing.assert_allclose(run(kernel, x), expected, rtol=1e-5)


def test_leaving_a_loop_by_break_finishes_its_scope(rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.sequential_range(4):
            t = nl.load(x[i])
            if i == 1:
                break
        nl.store(out, value=t)
        return out
    with raises_at(KernelError, match=SCOPE, line="nl.store(out, value=t)"):
        run(kernel, x)


def test_new_generation_loops_are_plain_ranges(rng):
    import opennki.language as nl2
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl2.affine_range(4):          # no parallel semantics: rewriting out is fine
            tile = nl.load(x[i])
        nl.store(out, value=tile)              # and no loop scope
        return out
    np.testing.assert_array_equal(run(kernel, x), x[3])

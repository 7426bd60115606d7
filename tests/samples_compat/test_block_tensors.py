"""Block tensors as the official samples use them: a tensor with several block dims indexed by its leading
block dims only, and the sub-tensor handed to a helper function (regression: such indexing used to raise
err_failed_to_infer_tile_from_local_tensor)."""

import numpy as np

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError
from opennki.legacy.language import par_dim
from opennki._src.blocks import BlockTensor
from tests.language.helpers import run
from tests.raises import raises_at
from tests.sim.outcomes import by_first_appearance, event_fields


def _row_sums(sums, x, head, n_tiles):
    """Helper in the samples' style: fills one row sum per tile of its (T, par_dim(P), 1) block tensor."""
    for t in nl.affine_range(n_tiles):
        tile = nl.load(x[head, t * 128:(t + 1) * 128, :])
        sums[t, :, 0] = nisa.tensor_reduce(np.add, tile, axis=(1,), dtype=nl.float32)


def _heads_kernel(x):
    heads, seq, width = x.shape
    n_tiles = seq // 128
    out = nl.ndarray((heads, seq, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((heads, n_tiles, par_dim(128), 1), dtype=nl.float32)
    for h in nl.affine_range(heads):
        _row_sums(sums[h], x, h, n_tiles)
    for h in nl.affine_range(heads):
        per_head = sums[h]
        assert per_head.shape == (n_tiles, 128, 1)
        for t in nl.affine_range(n_tiles):
            nl.store(out[h, t * 128:(t + 1) * 128, :], value=nl.multiply(per_head[t], 2.0))
    return out


def test_leading_block_index_gives_the_remaining_block_tensor(rng):
    x = rng.standard_normal((3, 256, 40)).astype(np.float32)
    out = run(_heads_kernel, x)
    np.testing.assert_allclose(out, 2.0 * x.sum(axis=2, keepdims=True), rtol=1e-5, atol=1e-5)


def test_a_slice_in_a_block_dim_is_still_rejected(rng):
    def kernel(x):
        blocks = nl.ndarray((2, 3, par_dim(128), 4), dtype=nl.float32)
        blocks[0, :, :, :] = nl.load(x)
    x = rng.standard_normal((128, 4)).astype(np.float32)
    with raises_at(KernelError, match="err_failed_to_infer_tile_from_local_tensor"):
        run(kernel, x)


def _rest(rng, tile_shape):
    """A random rest of a block tensor's key: ints and slices (in and out of bounds, any steps), sometimes an
    entry the one-subscript path does not take (an arange index, `...`, a NumPy int), sometimes one too many."""
    rest = []
    for n in tile_shape[:int(rng.integers(1, len(tile_shape) + 2))]:
        r = rng.random()
        if r < 0.3:
            rest.append(int(rng.integers(-n - 2, n + 2)))
        elif r < 0.85:
            bound = [None] + list(range(-n - 2, n + 3))
            rest.append(slice(bound[rng.integers(len(bound))], bound[rng.integers(len(bound))],
                              [None, 1, 2, 0][rng.integers(4)]))
        else:
            rest.append([nl.arange(n)[:, None], Ellipsis, np.int64(0)][rng.integers(3)])
    if len(rest) > len(tile_shape):
        rest.append(0)
    return tuple(rest)


def _outcome(get):
    try:
        view = get()
    except Exception as e:      # noqa: BLE001 - the errors are compared, type and message
        return type(e), str(e)
    return (type(view), view.storage, tuple(view.shape), view.amap, view.consts, view.coords, view.dynamic,
            view._geo or view._geometry(), view.in_bounds())


def test_a_block_tile_subscript_in_one_step_is_the_tile_subscripted(rng):
    """`blk[b, rest]` on an SBUF block tensor is one subscript of its storage (BlockTensor._view): the view, its
    geometry and bounds verdict, and the errors are those of the block's tile subscripted with `rest`, for a block
    tensor and the sub-tensor of its leading block dims; PSUM block tensors (a storage per block) too."""
    checked = []

    def kernel(x):
        sbuf = nl.ndarray((2, 3, par_dim(16), 4, 5), dtype=nl.float32)
        psum = nl.ndarray((2, par_dim(16), 8), dtype=nl.float32, buffer=nl.psum)
        assert sbuf._root is not None and sbuf[1]._root is not None and psum._root is None
        for blk in (sbuf, sbuf[1], psum):
            nb = len(blk.blocks)
            for _ in range(300):
                index = tuple(int(rng.integers(-n, n)) for n in blk.blocks)
                rest = _rest(rng, blk.tile_shape)
                wrapped = tuple(i % n for i, n in zip(index, blk.blocks))
                # on one line: an error names the kernel line
                fast, slow = _outcome(lambda: blk[index + rest]), _outcome(lambda: blk._tile(wrapped)[rest])
                assert fast == slow, (index, rest)
                checked.append(nb)
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(kernel, x), x)
    assert checked == [2] * 300 + [1] * 600


def _random_key(rng, leads, tile_shape, with_rest: float):
    """A random block tensor key: one or two block indices drawn from `leads`, then (with probability
    `with_rest`) a random rest (`_rest`); a key of one entry is sometimes that entry alone."""
    key = tuple(leads[rng.integers(len(leads))] for _ in range(int(rng.integers(1, 3))))
    key += _rest(rng, tile_shape) if rng.random() < with_rest else ()
    return key[0] if len(key) == 1 and rng.random() < 0.5 else key


def _block_outcome(get):
    try:
        value = get()
    except Exception as e:      # noqa: BLE001 - the errors are compared, type and message
        return type(e), str(e)
    if isinstance(value, BlockTensor):
        return BlockTensor, value.blocks, value.tile_shape, value._root.storage, value._first, value.name
    return _outcome(lambda: value)


def test_block_indices_made_again_are_the_general_paths(rng):
    """An SBUF block tensor remembers the storage position of the block indices `_split` checked (exact ints,
    `BlockTensor._positions`); keys made again give what the general path gives, the view, sub-tensor or error,
    also with block indices of other types (NumPy ints, bools, floats, slices, lists, out of range), which
    the remembered positions must not take, and writes through them write the blocks the general path does."""
    leads = [0, 1, -1, 2, 3, -3, -4, np.int64(1), True, 1.0, slice(None), [0]]
    checked = []

    def kernel(x):
        blk = nl.ndarray((2, 3, par_dim(16), 8), dtype=nl.float32)
        for sub in (blk, blk[1]):
            for _ in range(300):
                key = _random_key(rng, leads, sub.tile_shape, 0.7)
                sub._positions.clear()
                # the general path (which remembers the key's position), then the key made again; on one line
                slow, fast = _block_outcome(lambda: sub[key]), _block_outcome(lambda: sub[key])
                assert fast == slow, key
                checked.append(fast[0])
        for rep in range(2):            # the second time from the remembered positions
            for i in range(6):
                blk[i // 3, i % 3] = nl.load(x[(i + rep) % 6])
        blk[np.int64(1), -1, :, 2:5] = nl.load(x[0, :, 2:5])
        blk[1][0, :, 0:1] = nl.load(x[1, :, 7:8])
        out = nl.ndarray((6, 16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in range(6):
            nl.store(out[i], value=nl.copy(blk[i // 3, i % 3]))
        return out

    x = rng.standard_normal((6, 16, 8)).astype(np.float32)
    expect = np.roll(x, -1, axis=0)
    expect[5, :, 2:5] = x[0, :, 2:5]
    expect[3, :, 0:1] = x[1, :, 7:8]
    np.testing.assert_array_equal(run(kernel, x), expect)
    assert {BlockTensor, KernelError} <= set(checked) and len({c for c in checked if isinstance(c, type)}) > 3


def test_whole_tile_subscripts_made_again_are_the_general_paths(rng):
    """`blk[b, :, :]` (full slices only, the usual operand) made again is a view of the layout its first
    subscript made (`BlockTensor._memo_key`): the view, geometry and bounds verdict of the block's tile subscripted
    with the same slices, for every block of a block tensor and of a sub-tensor (made once per lead), any count
    of full slices, and the errors of one too many."""
    checked = []

    def kernel(x):
        blk = nl.ndarray((2, 3, par_dim(16), 4, 5), dtype=nl.float32)
        assert blk[1] is blk[1] and blk[-1] is blk[1]
        for sub in (blk, blk[1]):
            for _ in range(200):
                index = tuple(int(rng.integers(-n, n)) for n in sub.blocks)
                rest = (slice(None),) * int(rng.integers(1, len(sub.tile_shape) + 2))
                wrapped = tuple(i % n for i, n in zip(index, sub.blocks))
                # on one line: an error names the kernel line
                slow, fast, again = (_outcome(lambda: sub._tile(wrapped)[rest]), _outcome(lambda: sub[index + rest]), _outcome(lambda: sub[index + rest]))  # noqa: E501
                assert fast == slow == again, rest
                checked.append(slow[0])
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(kernel, x), x)
    assert len(checked) == 400 and KernelError not in checked and len(set(checked)) == 2    # views and errors


def _attention_style(x):
    """Block tensors as the flash-attention backward uses them: declared per iteration, written and read
    whole (`blk[i, :, :]`), a sub-tensor per head handed to a helper, written by loop_reduce."""
    out = nl.ndarray((2, 2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, 2, 1, par_dim(128), 64), dtype=nl.float32)
    for h in nl.affine_range(2):
        for k in nl.affine_range(2):
            tiles = nl.zeros((2, par_dim(128), 64), dtype=nl.float32)
            for j in nl.affine_range(2):
                tiles[j, :, :] = nl.load(x[h, j])
            _reduce_into(acc[h], tiles, k)
    for h in nl.affine_range(2):
        for t in nl.affine_range(2):
            nl.store(out[h, t], value=acc[h, t, 0, :, :])
    return out


def _reduce_into(acc, tiles, k):
    for t in nl.affine_range(2):
        summed = nl.add(tiles[0, :, :], tiles[1, :, :])
        acc[t, 0, :, :] = nl.loop_reduce(nl.multiply(summed, 0.5 + t), op=np.add, loop_indices=(k,),
                                         dtype=nl.float32)


def test_whole_tile_subscripts_give_the_plain_path_values_and_events(rng):
    from opennki._src import blocks
    from opennki.listeners import Recorder

    x = rng.standard_normal((2, 2, 128, 64)).astype(np.float32)
    results = []
    for whole in (True, False):
        blocks.MEMO_VIEWS = whole
        rec = Recorder()
        try:
            results.append((run(_attention_style, x, recorder=rec), rec.events))
        finally:
            blocks.MEMO_VIEWS = True
    fast = _same_runs(results)
    summed = x[:, 0] + x[:, 1]
    want = np.stack([summed * 0.5 * 2, summed * 1.5 * 2], axis=1)
    np.testing.assert_allclose(fast, want, rtol=1e-6)


def _same_runs(results) -> np.ndarray:
    """`results`: the (output, recorded events) of a run with the view memo on, then off: the same output and
    the same events field by field (storage ids by first appearance); the output."""
    (fast, fast_events), (plain, plain_events) = results
    np.testing.assert_array_equal(fast, plain)
    sid_fast, sid_plain = by_first_appearance(), by_first_appearance()
    assert [event_fields(e, sid_fast) for e in fast_events] == [event_fields(e, sid_plain) for e in plain_events]
    return fast


def _unmemoised(get):
    """`_block_outcome(get)` with the block tensors' view memo off (the plain path)."""
    from opennki._src import blocks
    blocks.MEMO_VIEWS = False
    try:
        return _block_outcome(get)
    finally:
        blocks.MEMO_VIEWS = True


def test_memoised_block_subscripts_are_the_plain_paths(rng):
    """`blk[key]` of exact ints and int/None slices is a view of the layout the general path made for that key
    of a block tensor of the same root layout, block dims and first position (`BlockTensor._memo_key`, `_VIEWS`):
    for block tensors declared again (a new storage each), sub-tensors, random keys (block indices of other
    types, slices in and out of bounds with any steps, entries the memo does not take), made with the memo
    off, then on (filling it), then on again (from it): the view, its geometry and bounds verdict, or the error
    with its kernel line."""
    leads = [0, 1, -1, 2, 3, -3, np.int64(1), True, 1.0, slice(None)]
    checked = []

    def kernel(x):
        for _ in range(3):
            blk = nl.ndarray((2, 3, par_dim(16), 4, 5), dtype=nl.float32)
            for sub in (blk, blk[1]):
                for _ in range(150):
                    key = _random_key(rng, leads, sub.tile_shape, 0.8)
                    sub._positions.clear()
                    # on one line: an error names the kernel line
                    plain, filled, memoised = _unmemoised(lambda: sub[key]), _block_outcome(lambda: sub[key]), _block_outcome(lambda: sub[key])  # noqa: E501
                    assert filled == plain and memoised == plain, key
                    checked.append(plain[0])
                    # the key with the bounds of a slice of another type, equal to the ints the memo holds
                    at = [i for i, k in enumerate(key) if type(k) is slice] if type(key) is tuple else []
                    if at:
                        i = at[rng.integers(len(at))]
                        cast = [float, np.int64, bool][rng.integers(3)]
                        twin = key[:i] + (slice(*(None if b is None else cast(b) for b in (key[i].start, key[i].stop, key[i].step))),) + key[i + 1:]  # noqa: E501
                        plain, memoised = _unmemoised(lambda: sub[twin]), _block_outcome(lambda: sub[twin])
                        assert memoised == plain, twin
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(kernel, x), x)
    kinds = set(checked)
    assert {BlockTensor, KernelError} <= kinds and len([k for k in kinds if isinstance(k, type)]) > 3


def _sliced_blocks(x):
    """Block tensors declared per iteration, written and read through subscripts with slices (the blocked
    matmul's operands `blk[b, :, j * 16:(j + 1) * 16]`), whole tiles and a sub-tensor; one write out of bounds
    in the last iteration (an error with its kernel line)."""
    out = nl.ndarray((2, 16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((2, 2, par_dim(16), 32), dtype=nl.float32)
    for h in nl.affine_range(2):
        for k in nl.affine_range(3):
            tiles = nl.ndarray((2, par_dim(16), 32), dtype=nl.float32)
            for j in nl.affine_range(2):
                tiles[j] = nl.load(x[h, j])
            for j in nl.affine_range(2):
                for q in nl.affine_range(2):
                    acc[h, j, :, q * 16:(q + 1) * 16] = nl.add(acc[h, j, :, q * 16:(q + 1) * 16],
                                                               nl.multiply(tiles[j, :, q * 16:(q + 1) * 16], 0.5 + k))
            row = acc[h]
            row[1, :, 0:8] = nl.add(row[1, :, 0:8], tiles[0, :, 8:16])
    for h in nl.affine_range(2):
        nl.store(out[h], value=nl.add(acc[h, 0], acc[h, 1, :, :]))
    return out


def _sliced_blocks_out_of_bounds(x):
    out = _sliced_blocks(x)
    tiles = nl.ndarray((2, par_dim(16), 32), dtype=nl.float32)
    tiles[1, :, 0:16] = nl.load(x[0, 0, :, 0:16])
    tiles[1, :, 24:40] = nl.load(x[0, 0, :, 0:16])
    return out


def test_memoised_block_subscripts_give_the_plain_path_values_errors_and_events(rng):
    from opennki._src import blocks
    from opennki.listeners import Recorder

    x = rng.standard_normal((2, 2, 16, 32)).astype(np.float32)
    results, errors = [], []
    for memo in (True, False):
        blocks.MEMO_VIEWS = memo
        blocks._VIEWS.clear()
        rec = Recorder()
        try:
            results.append((run(_sliced_blocks, x, recorder=rec), rec.events))
            assert bool(blocks._VIEWS) == memo
            try:
                run(_sliced_blocks_out_of_bounds, x)
            except Exception as e:      # noqa: BLE001 - the errors are compared, type and message
                errors.append((type(e), str(e)))
        finally:
            blocks.MEMO_VIEWS = True
    fast = _same_runs(results)
    assert len(errors) == 2 and errors[0] == errors[1] and "tiles[1, :, 24:40] = nl.load" in errors[0][1]
    want = np.zeros((2, 2, 16, 32), np.float32)
    for h in range(2):
        for k in range(3):
            want[h] += x[h] * np.float32(0.5 + k)
            want[h, 1, :, 0:8] += x[h, 0, :, 8:16]
    np.testing.assert_allclose(fast, want[:, 0] + want[:, 1], rtol=1e-5)

"""Legacy tensor declarations remember what their arguments decide (`blocks.MEMO_SHAPES`, `_SHAPES`): kernels
declaring tensors in loops (plain tiles, SBUF and PSUM block tensors, named or not, each fill, dtypes spelled
several ways) give the plain path's values and events, field by field; what depends on the program (the
hardware-strict rule, the allocation mode) still raises, with its kernel line, when the memo knows the
declaration."""

import numpy as np
import pytest

import opennki.legacy.compiler as ncc
import opennki.legacy.language as nl
from opennki._src import blocks
from opennki.errors import AllocationError, KernelError, OpenNKIError
from opennki.legacy.language import par_dim
from opennki.listeners import Recorder
from opennki.sim.options import SimOptions
from tests.running import run
from tests.sim.outcomes import assert_same_outcome, by_first_appearance, event_fields


def _declarations(x):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        acc = nl.zeros((par_dim(128), 64), dtype=np.float32)
        ones = nl.ones((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        half = nl.full((128, 64), 0.5, dtype="float32", name="half")
        blk = nl.zeros((2, par_dim(128), 64), dtype=nl.bfloat16)
        named = nl.full((3, par_dim(128), 64), 2.0, dtype=nl.float32, name="named")
        flat = nl.ndarray((128, 2, 64), dtype=nl.float32)            # no par_dim: a plain [128, 2, 64] tile
        ps = nl.zeros((2, par_dim(128), 64), dtype=nl.float32, buffer=nl.psum)
        t = nl.load(x[i])
        blk[1, :, :] = nl.add(t, ones)
        flat[:, 1, :] = nl.multiply(t, half)
        acc[...] = nl.add(blk[1], flat[:, 1, :])
        acc[...] = nl.add(acc, named[i + 1])
        acc[...] = nl.add(acc, ps[i])
        acc[...] = nl.add(acc, blk[0])
        nl.store(out[i], value=acc)
    return out


def _both(kernel, *args, options=None):
    """(outcome, events) of `kernel` with the declaration memo, then without it."""
    results = []
    for memo in (True, False):
        blocks.MEMO_SHAPES = memo
        rec = Recorder()
        try:
            outcome = run(kernel, *args, options=options, recorder=rec)
        except OpenNKIError as e:
            outcome = e
        finally:
            blocks.MEMO_SHAPES = True
        sid = by_first_appearance()
        results.append((outcome, [event_fields(e, sid) for e in rec.events]))
    return results


def test_declarations_in_loops_give_the_plain_path_values_and_events(rng):
    x = rng.standard_normal((2, 128, 64)).astype(np.float32)
    blocks._SHAPES.clear()
    (memo, memo_events), (plain, plain_events) = _both(_declarations, x)
    assert blocks._SHAPES                       # the declarations were remembered
    assert_same_outcome(memo, plain)
    assert len(memo_events) > 20 and memo_events == plain_events
    bf = (x + 1).astype(nl.bfloat16).astype(np.float32)
    np.testing.assert_allclose(memo, bf + x * 0.5 + 2.0, rtol=1e-6)


def test_a_remembered_declaration_still_takes_the_programs_rules(rng):
    x = rng.standard_normal((2, 128, 64)).astype(np.float32)
    run(_declarations, x)                       # remembered without hardware-strict rules
    strict = _both(_declarations, x, options=SimOptions(hardware_strict=True))
    assert_same_outcome(strict[0][0], strict[1][0])
    assert isinstance(strict[0][0], KernelError)
    assert strict[0][0].code == "err_leading_dimension_of_tensor_must_be_partition"
    assert "blk = nl.zeros" in strict[0][0].location.source

    def mixing():
        nl.ndarray((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nl.zeros((par_dim(128), 64), dtype=np.float32)               # remembered above: auto allocation
    mixed = _both(mixing)
    assert_same_outcome(mixed[0][0], mixed[1][0])
    assert isinstance(mixed[0][0], AllocationError) and "nl.zeros" in mixed[0][0].location.source


@pytest.mark.parametrize("shape", [(128, 64), (par_dim(128), 64), (2, 128, 64), (2, par_dim(128), 64)])
def test_a_par_dim_mark_is_part_of_what_is_remembered(shape):
    """`par_dim(128) == 128`: the memo tells the shapes apart by their element types."""
    def kernel():
        t = nl.zeros(shape, dtype=nl.float32)
        assert t.shape == ((2, 128, 64) if len(shape) == 3 else (128, 64))
        assert getattr(t, "is_block_tensor", False) == isinstance(shape[1], par_dim)
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=t[0] if len(shape) == 3 else t)
        return out
    for _ in range(2):
        np.testing.assert_array_equal(run(kernel), np.zeros((128, 64), np.float32))

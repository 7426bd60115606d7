"""A launch leaves no reference cycle behind: once it returns, its simulator, programs, memories (SBUF and PSUM
images) and what the listeners and language rules hold are freed by reference counting, not at the next full
garbage collection. With listeners (estimates, recorders) the program is its memory's event sink, and the rules'
checker refers to the program's observers; both links are cut or weak, so nothing waits for the collector (an
estimate of a large kernel left millions of objects for it, which the next launch paid for)."""

import gc

import numpy as np
import pytest

from examples import attention_head, blocked_matmul, residual_rmsnorm, tiled_matmul
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder
from opennki.perf.estimate import estimate
from opennki.sim import ShapeSpec


def _opennki_garbage(run):
    """Run `run()` with the collector off; return its result and the opennki objects only a collection frees."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        result = run()
        gc.collect()
        left = [type(o).__module__ + "." + type(o).__qualname__ for o in gc.garbage
                if type(o).__module__.startswith("opennki")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return result, left


@pytest.mark.parametrize("example", [tiled_matmul, attention_head, residual_rmsnorm])
def test_a_value_run_with_a_listener_leaves_no_cycle(rng, example):
    ex = example.EXAMPLE
    args = ex["make_inputs"](rng)
    kernel = getattr(ex["kernel"], "func", ex["kernel"])
    rec = Recorder()
    out, left = _opennki_garbage(lambda: run_kernel(kernel, args, listeners=[rec]))
    assert left == []
    np.testing.assert_allclose(out, ex["reference"](*args), rtol=2e-4, atol=2e-4)
    assert len(rec.events) > 20


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("kernel", [tiled_matmul.tiled_matmul, blocked_matmul.blocked_matmul])
def test_an_estimate_leaves_no_cycle(kernel, keep):
    args = (ShapeSpec((512, 256), "bfloat16"), ShapeSpec((512, 1024), "bfloat16"))
    result, left = _opennki_garbage(lambda: estimate(kernel, args, target="trn2", keep_instructions=keep))
    assert left == []
    assert result.total_ns > 0 and len(result.records) >= 12       # the matmuls and DMAs of the 4 k-steps

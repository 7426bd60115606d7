"""The cost model's caches change no figure: with the per-signature memo of cost rules off (every cost
computed by its rule, so the per-transfer caches of the scheduler and the result miss too), every record
of an estimate (where, when, why it waited, its dependences) and the summary are the same, on kernels in
the tutorials' style (matmul steps, layernorm, Mamba, attention) and the bundled blocked matmul example."""

import pytest

from examples.blocked_matmul import blocked_matmul
from opennki.cost.rules import registry
from opennki.perf.estimate import estimate
from tests.cost import tutorial_kernels as T
from tests.cost.helpers import spec

MM = (spec((1024, 512), "bfloat16"), spec((1024, 1024), "bfloat16"))
MAMBA = tuple(spec(s) for s in ((1, 256, 128), (1, 256, 128), (256, 4), (1, 4, 128), (1, 4, 128)))
CASES = [(T.mm_tiled, MM, "trn1"), (T.mm_fully_blocked, MM, "trn2"), (blocked_matmul, MM, "trn2"),
         (T.layernorm_v2, (spec((300, 512)), spec((512,)), spec((512,))), "trn2"),
         (T.mamba_v2, MAMBA, "trn1"), (T.attention_divide_output, (spec((128, 512), "bfloat16"),) * 3, "trn2")]


def _records(result):
    return [(r.index, r.opcode, r.core, r.row, r.start, r.end, r.pred, r.stall_ns, r.stall_kind, r.ls_start,
             r.ls_end, r.issue_start, r.issue_end, r.issue_row, r.dma_engine_ns, r.deps, r.cost)
            for r in result.records]


@pytest.mark.parametrize("kernel,args,target", CASES, ids=[k.__name__ for k, _, _ in CASES])
def test_cached_estimate_equals_the_plain_one(kernel, args, target, monkeypatch):
    fast = estimate(kernel, args, target=target)
    monkeypatch.setattr(registry, "_signature", lambda ev: None)
    plain = estimate(kernel, args, target=target)
    assert len(fast.records) > 10
    assert _records(fast) == _records(plain)
    assert fast.to_dict() == plain.to_dict()

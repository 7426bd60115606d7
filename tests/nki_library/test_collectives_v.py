"""Variable-length collectives among one rank: all_to_all_v (NKI 0.3), all_gather_v (0.6) and NKI 0.7's
prepare / trigger splits with their pairing rules (one trigger per prepare, no prepare in between)."""

import numpy as np
import pytest

import opennki as nki
import opennki.collectives as ncc
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import KernelError, OutOfBoundsError
from opennki.events import InstructionExecuted
from opennki.listeners import Recorder
from opennki.releases import ReleaseError
from tests.raises import raises_at

GROUP = [[0]]


def zeros_like_hbm(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    z = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.dma_copy(dst=out, src=z)
    return out


def expected(x, meta, has_rdispls):
    count, send = int(meta[0, 0]), int(meta[1, 0])
    recv = int(meta[3, 0]) if has_rdispls else 0
    want = np.zeros(x.size, x.dtype)
    want[recv:recv + count] = x.reshape(-1)[send:send + count]
    return want.reshape(x.shape)


@nki.jit
def split_exchange(x, meta, kind, has_rdispls):
    """A prepare issued before the source is filled, unrelated work, then the trigger."""
    out = zeros_like_hbm(x)
    staged = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    prepare = ncc.all_to_all_v_prepare if kind == "all_to_all_v" else ncc.all_gather_v_prepare
    trigger = ncc.all_to_all_v_trigger if kind == "all_to_all_v" else ncc.all_gather_v_trigger
    handle = prepare([staged], [out], ncc.ReplicaGroup(GROUP), meta, has_rdispls=has_rdispls)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=staged, src=t)                     # srcs filled after the prepare
    trigger(handle)
    return out


@pytest.mark.parametrize("kind", ["all_to_all_v", "all_gather_v"])
@pytest.mark.parametrize("meta,has_rdispls", [([[5], [3]], False), ([[7], [1], [0], [20]], True),
                                              ([[0], [0]], False)])
def test_prepare_then_trigger_moves_the_metadata_chunk(rng, kind, meta, has_rdispls):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    meta = np.array(meta, np.uint32)
    got = split_exchange(x, meta, kind, has_rdispls)
    np.testing.assert_array_equal(got, expected(x + 1, meta, has_rdispls))


@pytest.mark.parametrize("collective", [ncc.all_to_all_v, ncc.all_gather_v])
def test_the_plain_variable_collectives(rng, collective):
    @nki.jit
    def plain(x, meta):
        out = zeros_like_hbm(x)
        collective([x], [out], ncc.ReplicaGroup(GROUP), meta, recv_counts_known=True, has_rdispls=True)
        return out
    x = rng.standard_normal((2, 16)).astype(np.float32)
    meta = np.array([[9], [4], [9], [6]], np.uint32)
    np.testing.assert_array_equal(plain(x, meta), expected(x, meta, True))


def test_the_prepare_reads_only_the_metadata_and_the_trigger_the_tensors(rng):
    rec = Recorder()
    x = rng.standard_normal((4, 8)).astype(np.float32)
    split_exchange.launch((x, np.array([[4], [0]], np.uint32), "all_to_all_v", False), listeners=[rec])
    events = {e.opcode: e for e in rec.of_type(InstructionExecuted)}
    prepare, trigger = events["all_to_all_v_prepare"], events["all_to_all_v_trigger"]
    assert [o.role for o in prepare.operands] == ["metadata"]
    assert sorted(o.role for o in trigger.operands) == ["dst", "src"]


def pairing_kernel(steps):
    """A kernel running `steps(x, out, meta)` (a sequence of prepares and triggers)."""
    @nki.jit
    def kernel(x, meta):
        out = zeros_like_hbm(x)
        steps(x, out, meta)
        return out
    return kernel


def a2a(x, out, meta):
    return ncc.all_to_all_v_prepare([x], [out], ncc.ReplicaGroup(GROUP), meta)


def ag(x, out, meta):
    return ncc.all_gather_v_prepare([x], [out], ncc.ReplicaGroup(GROUP), meta)


BAD_PAIRINGS = [
    (lambda x, o, m: (a2a(x, o, m), ag(x, o, m)), "share a single slot"),
    (lambda x, o, m: (a2a(x, o, m), a2a(x, o, m)), "share a single slot"),
    (lambda x, o, m: [ncc.all_to_all_v_trigger(h) for h in [a2a(x, o, m)] * 2], "already triggered"),
    (lambda x, o, m: ncc.all_gather_v_trigger(a2a(x, o, m)), "triggers a all_gather_v prepare, but got a "
                                                             "all_to_all_v one"),
    (lambda x, o, m: ncc.all_to_all_v_trigger(o), "takes the instruction a all_to_all_v_prepare returned"),
    (lambda x, o, m: a2a(x, o, m), "was never triggered"),
]


@pytest.mark.parametrize("steps,match", BAD_PAIRINGS)
def test_pairing_rules(rng, steps, match):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    with raises_at(KernelError, match=match) as exc:
        pairing_kernel(steps)(x, np.array([[2], [0]], np.uint32))
    assert exc.value.location.filename == __file__


def test_metadata_outside_the_tensors_is_an_index_error(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    with raises_at(OutOfBoundsError, match="chunk lies outside its tensors"):
        split_exchange(x, np.array([[30], [8]], np.uint32), "all_to_all_v", False)


def test_other_ranks_and_older_releases():
    x = np.zeros((4, 8), np.float32)
    with raises_at(nki.OpenNKIError, match="needs 2 devices"):
        pairing_kernel(lambda x, o, m: ncc.all_to_all_v_prepare([x], [o], ncc.ReplicaGroup([[0, 1]]), m))(
            x, np.array([[1, 1], [0, 0]], np.uint32))
    with raises_at(ReleaseError, match="all_to_all_v_prepare does not exist in NKI 0.6"):
        nki.jit(split_exchange.func, api_version="0.6")(x, np.array([[1], [0]], np.uint32), "all_to_all_v", False)


def test_replica_groups_from_a_partition_op():
    groups = {op: ncc.ReplicaGroup.from_partition_op(8, op, k).groups for op, k in
              ((ncc.rg_partition_op.bitwise_and, 0), (ncc.rg_partition_op.div, 4), (ncc.rg_partition_op.mod, 4))}
    assert groups[ncc.rg_partition_op.bitwise_and] == (tuple(range(8)),)
    assert groups[ncc.rg_partition_op.div] == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert groups[ncc.rg_partition_op.mod] == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert ncc.ReplicaGroup.from_partition_op(1, ncc.rg_partition_op.mod, 1).groups == ((0,),)

"""Automatic allocation under pressure, as in the official attention tutorials (v3-v8a, v11) and
select-and-scatter: tensors of a finished loop body are dead even while Python variables still hold them,
and PSUM is spilled when its eight banks are oversubscribed (the compiler moves PSUM tiles to SBUF), so a
PSUM block tensor may be larger than PSUM (regressions: "PSUM overflow ... 524288 bytes needed" and
"16384 bytes needed, 15872 free")."""

import numpy as np

import opennki.legacy as nki
import opennki.legacy.compiler as ncc
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.perf.estimate import estimate
from opennki.events import AccessKind, Engine, InstructionExecuted, MemoryKind, TensorAllocated
from opennki.legacy.language import par_dim
from opennki.listeners import Recorder
from opennki.perf import hints
from tests.cost.helpers import spec


def _all_scores_then_reduce(q, k):
    """All (128 x 512) score blocks live in PSUM at once (4 x 6 banks > 8), then each is reduced."""
    n_q, n_k = q.shape[1] // 128, k.shape[1] // 512
    out = nl.ndarray((q.shape[1], n_k), dtype=nl.float32, buffer=nl.shared_hbm)
    q_sb, k_sb = nl.load(q), nl.load(k)
    scores = nl.ndarray((n_q, n_k, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(n_q):
        for j in nl.affine_range(n_k):
            scores[i, j] = nisa.nc_matmul(q_sb[:, nl.ds(i * 128, 128)], k_sb[:, nl.ds(j * 512, 512)])
    for i in nl.affine_range(n_q):
        maxes = nl.ndarray((par_dim(128), n_k), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(n_k):
            maxes[:, j] = nisa.tensor_reduce(op=nl.max, data=scores[i, j], axis=1)
        nl.store(out[nl.ds(i * 128, 128), :], value=maxes)
    return out


def test_a_psum_block_tensor_larger_than_psum_is_spilled(rng):
    q = rng.standard_normal((64, 4 * 128)).astype(np.float32)
    k = rng.standard_normal((64, 6 * 512)).astype(np.float32)
    rec = Recorder()
    out = nki.jit(_all_scores_then_reduce).launch((q, k), listeners=[rec])
    expected = (q.T @ k).reshape(512, 6, 512).max(axis=2)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
    psum = [e for e in rec.of_type(TensorAllocated) if e.kind is MemoryKind.PSUM]
    assert all(e.byte_start + e.size_bytes <= 16 * 1024 for e in psum)
    assert len(psum) > 4 * 6                     # spilled blocks got a bank again when read back


def test_psum_spills_are_copies_the_cost_model_charges(rng):
    """Each spill is reported as a Vector Engine copy reading the tile at its old bank, each reload as one
    writing it at its new bank; the estimate charges them and the report names the anti-pattern."""
    q = rng.standard_normal((64, 4 * 128)).astype(np.float32)
    k = rng.standard_normal((64, 6 * 512)).astype(np.float32)
    rec = Recorder()
    nki.jit(_all_scores_then_reduce).launch((q, k), listeners=[rec])
    events = rec.of_type(InstructionExecuted)
    spills = [e for e in events if e.opcode == "psum_spill"]
    reloads = [e for e in events if e.opcode == "psum_reload"]
    assert len(spills) >= 4 * 6 - 8 and len(reloads) >= 4 * 6 - 8
    for ev, access in [(spills[0], AccessKind.READ), (reloads[0], AccessKind.WRITE)]:
        (op,) = ev.operands
        assert ev.engine is Engine.VECTOR and op.access is access and op.kind is MemoryKind.PSUM
        assert (op.partitions, op.free_elems, op.region.size_bytes) == (128, 512, 128 * 2048)
        assert ev.location.lineno > 0 and ev.location.filename == __file__
    # the first spill happens when the ninth score block needs a bank: it gives up the first block's bank
    first_matmuls = [e for e in events if e.opcode == "nc_matmul"]
    assert spills[0].seq > first_matmuls[7].seq
    assert spills[0].operands[0].region == first_matmuls[0].writes[0].region

    args = (spec(q.shape), spec(k.shape))
    result = estimate(_all_scores_then_reduce, args, target="trn2")
    assert result.opcode_counts["psum_spill"] == len(spills)
    assert "psum_spill" not in result.uncosted
    spill_ns = sum(r.duration_ns for r in result.records if r.opcode in ("psum_spill", "psum_reload"))
    assert spill_ns > 0
    found = {h.kind: h for h in hints(result)}
    assert "psum_spill" in found and f"{len(spills)} PSUM tiles were spilled" in found["psum_spill"].message


def _fused_rows(q, k, v):
    """Per row tile: 8 score banks fill PSUM, then transposes and an accumulator need PSUM too, and the
    transposes of the previous row tile's loop are still bound to a Python variable."""
    n_q = q.shape[1] // 128
    out = nl.ndarray((q.shape[1], v.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    q_sb, k_sb, v_sb = nl.load(q), nl.load(k), nl.load(v)
    v_t = nl.ndarray((par_dim(128), 8, v.shape[0]), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(8):
        v_psum = nisa.nc_transpose(v_sb[:, nl.ds(j * 128, 128)])
        v_t[:, j, :] = nisa.tensor_copy(v_psum)
    for i in nl.affine_range(n_q):
        qk = nl.ndarray((2, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        wide = nl.ndarray((par_dim(128), 1024), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(2):
            qk[j] = nisa.nc_matmul(q_sb[:, nl.ds(i * 128, 128)], k_sb[:, nl.ds(j * 512, 512)])
            wide[:, nl.ds(j * 512, 512)] = nisa.tensor_copy(qk[j])
        filler = nl.ndarray((6, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(6):
            filler[j] = nisa.nc_matmul(q_sb[:, nl.ds(i * 128, 128)], k_sb[:, nl.ds(0, 512)])
        acc = nl.zeros((par_dim(128), v.shape[0]), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(8):
            t = nisa.nc_transpose(wide[:, nl.ds(j * 128, 128)])
            t_sb = nl.ndarray((par_dim(128), 128), dtype=nl.float32, buffer=nl.sbuf)
            t_sb[...] = nisa.tensor_copy(t)
            acc += nisa.nc_matmul(t_sb, v_t[:, j, :])
        res = nl.ndarray((par_dim(128), v.shape[0]), dtype=nl.float32, buffer=nl.sbuf)
        res[...] = nisa.tensor_copy(acc)
        nl.store(out[nl.ds(i * 128, 128), :], value=res)
    return out


def test_full_psum_makes_room_for_transposes_and_accumulators(rng):
    q = rng.standard_normal((64, 256)).astype(np.float32)
    k = rng.standard_normal((64, 1024)).astype(np.float32)
    v = rng.standard_normal((32, 1024)).astype(np.float32)
    expected = (q.T @ k) @ v.T
    np.testing.assert_allclose(nki.jit(_fused_rows)(q, k, v), expected, rtol=1e-4, atol=1e-2)


def _loop_temporaries_then_big(x):
    """The last iteration's temporaries (2 x 24 KiB) stay bound to `t` and `u` after the loop, yet NKI's scope
    rule makes them dead; the big tile (160 KiB of trn1's 176) needs their memory."""
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.zeros((128, 1), dtype=nl.float32)
    for i in nl.affine_range(4):
        t = nl.load(x[:, nl.ds(i * 6144, 6144)])
        u = nl.multiply(t, 2.0)
        total[...] = nl.add(total, nl.sum(u, axis=1, keepdims=True))
    big = nl.load(x[:, 0:40 * 1024])
    nl.store(out, value=nl.add(total, nl.sum(big, axis=1, keepdims=True)))
    return out


def test_tensors_of_a_finished_loop_body_give_their_memory_back(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")           # 176 KiB usable per partition
    x = rng.standard_normal((128, 40 * 1024)).astype(np.float32)
    expected = 2 * x[:, :4 * 6144].sum(axis=1, keepdims=True) + x.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(nki.jit(_loop_temporaries_then_big)(x), expected, rtol=1e-4, atol=1e-2)


def test_loops_accept_scheduling_directives(rng):
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.sequential_range(2, directives=ncc.no_reorder()):
            nl.store(out[i], value=nl.load(x[i]))
        for j in nl.affine_range(2, precise_schedule=True):
            nl.store(out[j + 2], value=nl.multiply(nl.load(x[j + 2]), 2.0))
        return out
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    expected = np.concatenate([x[:2], 2 * x[2:]])
    np.testing.assert_array_equal(nki.jit(kernel)(x), expected)

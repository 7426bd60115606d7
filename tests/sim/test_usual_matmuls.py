"""nc_matmul's usual store (tensor_engine.py `USUAL_MATMULS`: no masks, a whole fp32 PSUM tile, through
Machine.fp32_target) gives the plain path's outputs bit for bit, its errors with their kernel lines and, with a
listener, its events field by field; the cases it hands to the plain path (`mask=`, part of a PSUM tile, a
bf16 PSUM result, uninitialised reads, per-element accumulation flags) too. Random fp32 / bf16 /
fp8 data, results against NumPy."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import OpenNKIError
from opennki.instructions import tensor_engine
from opennki.sim.options import SimOptions
from tests.isa.helpers import rand, to_sbuf
from tests.sim.outcomes import assert_same_outcome, fast_and_plain, same_both_ways
from tests.sim.test_planned_loads_matmuls import groups, tiled

BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3


@nki.jit
def special_cases(lhsT, rhs):
    """Matmuls the inline path hands on: part of a PSUM tile (then per-element accumulation flags) and
    `mask=`; whole tiles between them."""
    out = nl.ndarray((4, 64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhsT[0:128, 0:64])
    b = nl.load(rhs[0:128, 0:128])
    acc = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(a, b)
    nl.store(out[0], value=nl.copy(acc))
    part = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
    part[:, 0:64] += nisa.nc_matmul(a, b[:, 0:64])          # half the tile: per-element flags from here on
    part += nisa.nc_matmul(a, b)
    nl.store(out[1], value=nl.copy(part))
    whole = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        whole += nisa.nc_matmul(nl.load(lhsT[k * 128:(k + 1) * 128, 0:64]), nl.load(rhs[k * 128:(k + 1) * 128, :]))
    nl.store(out[2], value=nl.copy(whole))
    j_p, j_f = nl.mgrid[0:64, 0:128]
    whole[...] = nisa.nc_matmul(a, b, mask=(j_f >= 32))
    nl.store(out[3], value=nl.copy(whole))
    return out


def _flags(s, m):
    """The new generation's accumulate=None / False / True on one PSUM tile, and a bf16 PSUM result (trn3)."""
    out = nl2.ndarray((4, 32, 48), dtype=nl2.float32, buffer=nl2.shared_hbm)
    st = to_sbuf(s, nl2.bfloat16)
    mv = to_sbuf(m, nl2.bfloat16)
    p = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.psum)
    r = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.nc_matmul(dst=p, stationary=st, moving=mv)                     # None: first write overwrites
    nisa2.nc_matmul(dst=p, stationary=st, moving=mv)                     # None: then accumulates
    nisa2.tensor_copy(dst=r, src=p)
    nisa2.dma_copy(dst=out[0], src=r)
    nisa2.nc_matmul(dst=p, stationary=st, moving=mv, accumulate=True)    # a read ended the group: still adds
    nisa2.tensor_copy(dst=r, src=p)
    nisa2.dma_copy(dst=out[1], src=r)
    nisa2.nc_matmul(dst=p, stationary=st, moving=mv, accumulate=False)
    nisa2.nc_matmul(dst=p, stationary=st, moving=mv)                     # None after a matmul: adds
    nisa2.tensor_copy(dst=r, src=p)
    nisa2.dma_copy(dst=out[2], src=r)
    low = nl2.ndarray((32, 48), dtype=nl2.bfloat16, buffer=nl2.psum)
    lr = nl2.ndarray((32, 48), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.nc_matmul(dst=low, stationary=st, moving=mv)
    nisa2.tensor_copy(dst=lr, src=low)
    nisa2.dma_copy(dst=out[3], src=lr)
    return out


@nki.jit
def unwritten_operand(lhsT, rhs):
    """Reads an SBUF tile never written: an error under uninitialized="raise" (initialisation flags)."""
    out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    b = nl.load(rhs[0:128, :])
    acc = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(a, b)
    nl.store(out, value=nl.copy(acc))
    return out


def _both(kernel, args, **launch):
    """Inline and plain matmuls (tensor_engine.USUAL_MATMULS): the same outputs or error, and the same events; the outcome."""
    return same_both_ways(kernel, args, tensor_engine, "USUAL_MATMULS", 5, **launch)


def _ref(s, m):
    return s.astype(np.float64).T @ m.astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, BF16, FP8])
@pytest.mark.parametrize("shapes", [((256, 128), (256, 512)), ((200, 100), (200, 300))])
def test_tiled_matmuls_inline_give_the_plain_path_values_and_events(rng, dtype, shapes):
    lhsT, rhs = rand(rng, *shapes[0]).astype(dtype), rand(rng, *shapes[1]).astype(dtype)
    got = _both(tiled.func, (lhsT, rhs), target="trn2")
    rtol, atol = {np.float32: (1e-5, 1e-4), BF16: (2e-2, 5e-2), FP8: (0.13, 0.5)}[dtype]   # output rounding
    np.testing.assert_allclose(got.astype(np.float64), _ref(lhsT, rhs), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_accumulation_groups_and_handed_on_cases_give_the_plain_path_values(rng, dtype):
    lhsT, rhs = rand(rng, 256, 64).astype(dtype), rand(rng, 256, 128).astype(dtype)
    _both(groups.func, (lhsT, rhs))
    got = _both(special_cases.func, (lhsT, rhs))
    s, m = lhsT.astype(np.float64), rhs.astype(np.float64)
    first = s[:128].T @ m[:128]
    np.testing.assert_allclose(got[0], first, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got[1][:, :64], 2 * first[:, :64], rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got[1][:, 64:], first[:, 64:], rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got[2], s.T @ m, rtol=1e-2, atol=5e-2)
    np.testing.assert_allclose(got[3][:, 32:], first[:, 32:], rtol=1e-2, atol=1e-2)


def test_accumulate_flags_and_a_bf16_result_give_the_plain_path_values(rng):
    s, m = rand(rng, 64, 32).astype(BF16), rand(rng, 64, 48).astype(BF16)
    got = _both(nki.jit(_flags).func, (s, m), target="trn3")
    ref = _ref(s, m)
    np.testing.assert_allclose(got[:3], np.stack([2 * ref, 3 * ref, 2 * ref]), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[3], ref, rtol=1e-2, atol=5e-2)


def test_an_uninitialised_operand_gives_the_plain_path_error(rng):
    lhsT, rhs = rand(rng, 128, 64), rand(rng, 128, 128)
    err = _both(unwritten_operand.func, (lhsT, rhs), options=SimOptions(uninitialized="raise"))
    assert isinstance(err, OpenNKIError) and "nc_matmul" in err.location.source


def _three_d(s, m):
    """3-D operands and a 3-D PSUM result: the product overwrites, then adds, then overwrites again (the
    usual store's computed-into-the-tile and added-in-place cases, through the operands' flattening)."""
    out = nl2.ndarray((3, 32, 2, 24), dtype=nl2.float32, buffer=nl2.shared_hbm)
    st = to_sbuf(s, s.dtype)
    mv = to_sbuf(m, m.dtype)
    p = nl2.ndarray((32, 2, 24), dtype=nl2.float32, buffer=nl2.psum)
    r = nl2.ndarray((32, 2, 24), dtype=nl2.float32, buffer=nl2.sbuf)
    for i, acc in enumerate((None, True, False)):
        nisa2.nc_matmul(dst=p, stationary=st, moving=mv, accumulate=acc)
        nisa2.tensor_copy(dst=r, src=p)
        nisa2.dma_copy(dst=out[i], src=r)
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_three_d_operands_and_result_give_the_plain_path_values(rng, dtype):
    s, m = rand(rng, 64, 4, 8).astype(dtype), rand(rng, 64, 2, 24).astype(dtype)
    got = _both(nki.jit(_three_d).func, (s, m))
    ref = _ref(s.reshape(64, 32), m.reshape(64, 48)).reshape(32, 2, 24)
    np.testing.assert_allclose(got, np.stack([ref, 2 * ref, ref]), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_products_into_scratch_arrays_give_new_arrays_values(rng, dtype):
    """`tensor_engine.MATMUL_SCRATCH`: accumulating products computed into a reused scratch array per shape give
    the outputs and events of a new array per product, with tiles of two shapes (the last ones smaller)
    accumulating in turn, and a group whose products are bound to locals (`groups`)."""
    lhsT, rhs = rand(rng, 300, 100).astype(dtype), rand(rng, 300, 300).astype(dtype)
    outcomes, events = fast_and_plain(tiled.func, (lhsT, rhs), tensor_engine, "MATMUL_SCRATCH")
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 5 and events[0] == events[1]
    rtol, atol = {np.float32: (1e-5, 1e-4), BF16: (2e-2, 5e-2)}[dtype]
    np.testing.assert_allclose(outcomes[0].astype(np.float64), _ref(lhsT, rhs), rtol=rtol, atol=atol)
    s, m = rand(rng, 256, 64).astype(dtype), rand(rng, 256, 128).astype(dtype)
    outcomes, events = fast_and_plain(groups.func, (s, m), tensor_engine, "MATMUL_SCRATCH")
    assert_same_outcome(*outcomes)
    assert events[0] == events[1]

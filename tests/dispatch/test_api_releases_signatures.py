"""NKI 0.2 signatures that NKI 0.3 changed (docs v2.32.0 nki/migration "API breaking changes"; the SDK 2.27 / 2.28
API stubs) and what NKI 0.7 deprecates: by default each old call runs as its release defined it, with a
DeprecationWarning naming the release and the replacement; under `api_version="0.2"` it is silent; under a
later level or hardware_strict it is the TypeError Python gives that release's signature, at the kernel line."""

import warnings

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.releases import ReleaseError, ReleaseTypeError
from tests.isa.helpers import rand
from tests.raises import raises_at


def _out(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _sbuf(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def rmw_keyword(a, b):
    t = _sbuf(a)
    nisa.dma_copy(t, b, dst_rmw_op=nl.add, unique_indices=True)
    return _out(t)


def rmw_positional(a, b):
    t = _sbuf(a)
    nisa.dma_copy(t, b, nl.add)
    return _out(t)


def compute_0_2_order(a, b):
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_compute(t, [a, b], [1.0, 1.0], nl.add)
    return _out(t)


def affine_select_0_2_order(x):
    """Lower triangle (p >= f) of x, -9 elsewhere: 0.2's (dst, pattern, offset, channel_multiplier, ...)."""
    t = _sbuf(x)
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.affine_select(y, [[-1, x.shape[1]]], 0, 1, t, -9.0, nl.greater_equal)
    return _out(y)


def affine_select_0_2_cmp_keyword(x):
    """The same, 0.2's order with cmp_op= by keyword (0.3's signature would take cmp_op twice)."""
    t = _sbuf(x)
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.affine_select(y, [[-1, x.shape[1]]], 0, 1, t, -9.0, cmp_op=nl.greater_equal)
    return _out(y)


def affine_select_0_2_tile_keywords(x):
    """The same, 0.2's offset and channel_multiplier by position, the rest by keyword."""
    t = _sbuf(x)
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.affine_select(y, [[-1, x.shape[1]]], 0, 1, on_true_tile=t, on_false_value=-9.0, cmp_op=nl.greater_equal)
    return _out(y)


def register_move_imm(x):
    reg = nisa.register_alloc()
    nisa.register_move(reg, imm=42)
    t = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.register_store(t, reg)
    return _out(t)


@nki.jit
def sendrecv_gpsimd(x):
    half = x.shape[0] // 2
    rank = nl.program_id(0)
    mine = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    theirs = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[rank * half:(rank + 1) * half, :])
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - rank, recv_from_rank=1 - rank, pipe_id=0,
                  use_gpsimd_dma=True)
    out = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    if rank == 0:
        nisa.dma_copy(dst=out, src=theirs)
    return out


def _reference(kernel, args):
    a = args[0]
    if kernel in (rmw_keyword, rmw_positional, compute_0_2_order):
        return a + args[1]
    if kernel in (affine_select_0_2_order, affine_select_0_2_cmp_keyword, affine_select_0_2_tile_keywords):
        p, f = np.indices(a.shape)
        return np.where(p - f >= 0, a, np.float32(-9.0))
    return np.array([[42]], np.int32)


CASES = [(rmw_keyword, 2, "nisa.dma_copy(t, b, dst_rmw_op=nl.add, unique_indices=True)", "dma_compute"),
         (rmw_positional, 2, "nisa.dma_copy(t, b, nl.add)", "dma_compute"),
         (compute_0_2_order, 2, "nisa.dma_compute(t, [a, b], [1.0, 1.0], nl.add)", "reduce_op, scales=None"),
         (affine_select_0_2_order, 1, "nisa.affine_select(y, [[-1, x.shape[1]]], 0, 1, t, -9.0, nl.greater_equal)",
          "offset=offset"),
         (affine_select_0_2_cmp_keyword, 1, "nisa.affine_select(y, [[-1, x.shape[1]]], 0, 1, t, -9.0, "
          "cmp_op=nl.greater_equal)", "offset=offset"),
         (affine_select_0_2_tile_keywords, 1, "nisa.affine_select(y, [[-1, x.shape[1]]], 0, 1, on_true_tile=t, "
          "on_false_value=-9.0, cmp_op=nl.greater_equal)", "offset=offset"),
         (register_move_imm, 1, "nisa.register_move(reg, imm=42)", "register_move(dst, src)")]


@pytest.fixture
def args(rng):
    return rand(rng, 32, 32), rand(rng, 32, 32)


@pytest.mark.parametrize("kernel,n,line,replacement", CASES)
def test_0_2_forms_run_by_default_with_a_warning_naming_0_3(kernel, n, line, replacement, args):
    with pytest.warns(DeprecationWarning, match=r"is removed in NKI 0\.3 \(Neuron SDK 2\.29\)") as record:
        got = nki.jit(kernel)(*args[:n])
    np.testing.assert_allclose(got, _reference(kernel, args), rtol=1e-6)
    message = next(str(w.message) for w in record if "NKI 0.3" in str(w.message))
    assert replacement in message and line in message


@pytest.mark.parametrize("kernel,n,line,replacement", CASES)
def test_0_2_forms_are_silent_under_0_2(kernel, n, line, replacement, args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = nki.jit(kernel, api_version="0.2")(*args[:n])
    np.testing.assert_allclose(got, _reference(kernel, args), rtol=1e-6)


@pytest.mark.parametrize("strict", [{"api_version": "0.3"}, {"api_version": "0.6"}, {"hardware_strict": True}])
@pytest.mark.parametrize("kernel,n,line,replacement", CASES)
def test_0_2_forms_are_the_type_error_of_0_3_at_the_call(kernel, n, line, replacement, strict, args):
    with raises_at(ReleaseTypeError, match=r"is not accepted by NKI 0\.\d .*\(removed in NKI 0\.3") as exc:
        nki.jit(kernel, **strict)(*args[:n])
    assert isinstance(exc.value, TypeError) and isinstance(exc.value, ReleaseError)
    assert exc.value.location.source == line
    assert replacement in exc.value.hint


def test_sendrecv_use_gpsimd_dma(rng):
    x = rand(rng, 64, 16)
    with pytest.warns(DeprecationWarning, match=r"use_gpsimd_dma=\.\.\.\) is removed in NKI 0\.3.*gpsimd_dma"):
        np.testing.assert_array_equal(sendrecv_gpsimd[2](x), x[32:])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(nki.jit(sendrecv_gpsimd.spec.func, api_version="0.2")[2](x), x[32:])
    with raises_at(ReleaseTypeError, match="use_gpsimd_dma"):
        nki.jit(sendrecv_gpsimd.spec.func, api_version="0.3")[2](x)


def affine_select_neither_release(x):
    t = _sbuf(x)
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.affine_select(y, [[-1, x.shape[1]]], 1, t, -9.0, cmp_op=nl.greater_equal, mode=2)
    return _out(y)


def test_affine_select_call_of_neither_release_is_pythons_type_error(args):
    """As for every other nisa function, a call no release's signature takes is Python's TypeError."""
    with pytest.raises(TypeError, match=r"nisa.affine_select\(\): got an unexpected keyword argument 'mode'"):
        nki.jit(affine_select_neither_release)(args[0])


def test_affine_select_signature_is_0_3s():
    import inspect
    assert list(inspect.signature(nisa.affine_select).parameters) == [
        "dst", "pattern", "channel_multiplier", "on_true_tile", "on_false_value", "cmp_op", "offset", "name"]


def register_move_both(x):
    reg = nisa.register_alloc()
    nisa.register_move(reg, 1, imm=2)
    return x


def test_register_move_takes_src_or_imm():
    with pytest.warns(DeprecationWarning), raises_at(nki.errors.KernelError, match="src or"):
        nki.jit(register_move_both)(np.zeros((1, 1), np.float32))


# ------------------------------------------------------------------------------------------- NKI 0.7

def sums_with_range_iterators(x):
    t = _sbuf(x)
    acc = nl.ndarray((x.shape[0], 1), x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for i in nl.affine_range(2):
        for j in nl.sequential_range(2):
            for k in nl.static_range(2):
                col = t[:, 4 * i + 2 * j + k:4 * i + 2 * j + k + 1]
                nisa.tensor_tensor(dst=acc, data1=acc, data2=col, op=nl.add)
    return _out(acc)


@pytest.mark.parametrize("options,deprecated", [
    ({}, {"affine_range": "0.3", "sequential_range": "0.3", "static_range": "0.6"}),
    ({"api_version": "0.7"}, {"affine_range": "0.3", "sequential_range": "0.3", "static_range": "0.6"}),
    ({"hardware_strict": True}, {"affine_range": "0.3", "sequential_range": "0.3", "static_range": "0.6"}),
    ({"api_version": "0.5"}, {"affine_range": "0.3", "sequential_range": "0.3"}),
    ({"api_version": "0.2"}, {})])
def test_range_iterators_are_deprecated_as_the_stubs_say(rng, options, deprecated):
    x = rand(rng, 16, 8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        np.testing.assert_allclose(nki.jit(sums_with_range_iterators, **options)(x), x.sum(axis=1, keepdims=True),
                                   rtol=1e-5)
    texts = [str(w.message) for w in record if issubclass(w.category, DeprecationWarning)]
    found = {}
    for kind in ("affine_range", "sequential_range", "static_range"):
        for t in texts:
            if t.startswith(f"nl.{kind} is deprecated in NKI ") and f"nl.{kind}(2)" in t and "Python range" in t:
                found[kind] = t.split("NKI ")[1].split(" ")[0]
    assert found == deprecated, texts


def test_the_custom_frontend_is_deprecated_in_0_7(monkeypatch, rng):
    x = rand(rng, 16, 8)
    monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")
    with pytest.warns(DeprecationWarning, match=r"NKI_COMPILER_FRONTEND=custom \(the parser frontend\) is deprecated "
                                                r"in NKI 0\.7 \(Neuron SDK 2\.33\)"):
        np.testing.assert_allclose(nki.jit(sums_with_range_iterators)(x), x.sum(axis=1, keepdims=True), rtol=1e-5)


def tile_limits(x):
    t = _sbuf(x)
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=float(nl.tile_size.psum_fmax),
                       op1=nl.add, operand1=float(nl.tile_size.total_available_sbuf_size))
    return _out(y)


def test_tile_size_renames_of_0_4(rng):
    x = rand(rng, 16, 8)
    want = x * np.float32(nl.tile_size.psum_bank_fmax) + np.float32(nl.tile_size.sbuf_fmax_bytes)
    with pytest.warns(DeprecationWarning) as record:
        np.testing.assert_allclose(nki.jit(tile_limits)(x), want, rtol=1e-6)
    texts = " | ".join(str(w.message) for w in record)
    assert "nl.tile_size.psum_fmax is deprecated in NKI 0.4 (Neuron SDK 2.30)" in texts
    assert "nl.tile_size.total_available_sbuf_size is deprecated in NKI 0.4" in texts and "sbuf_fmax_bytes" in texts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nki.jit(tile_limits, api_version="0.3")(x), want, rtol=1e-6)
        import opennki.legacy as legacy_nki
        import opennki.legacy.language as lnl
        assert lnl.tile_size.psum_fmax == 512       # the legacy generation keeps the names
        legacy_nki.jit(lambda a: a)(x)


def psum_to_hbm(a, b):
    ta, tb = _sbuf(a), _sbuf(b)
    acc = nl.ndarray((a.shape[1], b.shape[1]), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=ta, moving=tb)
    out = nl.ndarray(acc.shape, nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_dma_copy_from_psum_is_0_2_only(rng):
    a, b = rand(rng, 32, 16), rand(rng, 32, 24)
    with pytest.warns(DeprecationWarning, match=r"nisa.dma_copy from PSUM is removed in NKI 0\.3.*tensor_copy"):
        np.testing.assert_allclose(nki.jit(psum_to_hbm)(a, b), a.T @ b, rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nki.jit(psum_to_hbm, api_version="0.2")(a, b), a.T @ b, rtol=1e-5, atol=1e-5)
    with raises_at(ReleaseError, match="dma_copy from PSUM is not accepted by NKI 0.3") as exc:
        nki.jit(psum_to_hbm, api_version="0.3")(a, b)
    assert exc.value.location.source == "nisa.dma_copy(dst=out, src=acc)"


def pattern_without_offset(x):
    t = _sbuf(x)
    y = nl.ndarray((16, 4), x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=t[:, 8:16].ap([[x.shape[1], 16], [2, 4]]))
    return _out(y)


@pytest.mark.parametrize("options,start", [({}, 8), ({"api_version": "0.5"}, 8), ({"api_version": "0.4"}, 0),
                                           ({"api_version": "0.2"}, 0)])
def test_an_access_pattern_s_default_offset_is_the_view_s_from_0_5(rng, options, start):
    x = rand(rng, 16, 24)
    np.testing.assert_array_equal(nki.jit(pattern_without_offset, **options)(x), x[:, start:start + 8:2])

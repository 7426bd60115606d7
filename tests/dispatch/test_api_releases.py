"""API releases (opennki.releases): by default every public release's forms are accepted, an old form with a
DeprecationWarning naming the release that changed it and the replacement; an explicit `api_version=` (or
hardware_strict) applies that release's rule, raising the error the release raises with the migration hint."""

import warnings

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.releases import Generation
from opennki.errors import KernelError
from opennki.releases import (LATEST, LEGACY_RELEASES, NEW_RELEASES, ReleaseError, accepts_every_release, level_of,
                              release)
from opennki.sim import SimOptions
from tests.raises import raises_at


@pytest.fixture
def x(rng):
    return rng.standard_normal((16, 8)).astype(np.float32)


def doubled_into_hbm(x):
    """out = 2 x, returned from nl.hbm (private HBM): legal before NKI 0.3."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def count_with_dynamic_range(x, n):
    """out[0, 0] = n (a register bound), counted one by one in an nl.dynamic_range loop."""
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    bound = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=bound, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, bound)
    acc = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0)
    for _ in nl.dynamic_range(0, reg):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1)
    nisa.dma_copy(dst=out, src=acc)
    return out


def count_with_while_reg(x, n):
    """out[0, 0] = n, counted down in a `while reg:` loop."""
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    left = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=left, src=n)
    acc = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0)
    reg = nisa.register_alloc()
    nisa.register_load(reg, left)
    while reg:
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1)
        nisa.tensor_scalar(dst=left, data=left, op0=nl.subtract, operand0=1)
        nisa.register_load(reg, left)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_releases_are_ordered_and_named():
    assert [r.name for r in NEW_RELEASES] == ["0.2", "0.3", "0.4", "0.5", "0.6", "0.7"]
    assert [r.name for r in LEGACY_RELEASES] == [f"2.{m}" for m in range(20, 27)]
    assert release("0.6.0") == release((0, 6)) < release("0.7") == LATEST[Generation.NEW]
    assert release("2.24", Generation.LEGACY).label() == "Neuron SDK 2.24"
    assert LATEST[Generation.NEW].label() == "NKI 0.7 (Neuron SDK 2.33)"
    assert level_of(SimOptions(api_version=None), Generation.LEGACY) == LATEST[Generation.LEGACY]
    assert level_of(SimOptions(api_version="0.4")) == release("0.4")
    assert level_of(SimOptions(api_version=None, compiler_frontend="custom")) == release("0.6")
    assert accepts_every_release(SimOptions(api_version=None, hardware_strict=False))
    assert not accepts_every_release(SimOptions(api_version=None, hardware_strict=True))
    with raises_at(KernelError, match="not a public release") as exc:
        release("0.9")
    assert exc.value.expected == ["0.2", "0.3", "0.4", "0.5", "0.6", "0.7"]


def test_an_unknown_api_version_is_an_error_at_the_call(x):
    with raises_at(KernelError, match="'1.5' is not a public release of the new generation"):
        nki.jit(doubled_into_hbm, api_version="1.5")(x)


def test_platform_target_warns_by_default_and_sets_the_target(x):
    with pytest.warns(DeprecationWarning, match=r"platform_target=\.\.\.\) is removed in NKI 0\.3 "
                      r"\(Neuron SDK 2\.29\).*NEURON_PLATFORM_TARGET_OVERRIDE"):
        k = nki.jit(count_with_dynamic_range, platform_target="trn1")
    assert k.spec.target == "trn1"


def test_platform_target_is_silent_under_0_2_and_an_error_from_0_3():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nki.jit(doubled_into_hbm, platform_target="trn2", api_version="0.2").spec.target == "trn2"
    for strict in ({"api_version": "0.3"}, {"api_version": "0.7"}, {"hardware_strict": True}):
        with raises_at(ReleaseError, match=r"platform_target=\.\.\.\) is not accepted by NKI 0\.\d .*removed "
                           r"in NKI 0\.3") as exc:
            nki.jit(doubled_into_hbm, platform_target="trn2", **strict)
        assert "NEURON_PLATFORM_TARGET_OVERRIDE" in exc.value.hint


def test_mode_is_ignored_with_a_warning_naming_0_3(x):
    for level in (None, "0.3", "0.7"):
        with pytest.warns(DeprecationWarning, match=r"mode=\.\.\.\) is deprecated in NKI 0\.3"):
            k = nki.jit(doubled_into_hbm, mode="simulation", api_version=level)
        assert k.mode == "auto"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nki.jit(doubled_into_hbm, mode="simulation", api_version="0.2").mode == "auto"


def test_hbm_outputs_run_with_a_warning_by_default(x):
    with pytest.warns(DeprecationWarning, match=r"a kernel output in nl\.hbm is removed in NKI 0\.3.*"
                      r"nl\.shared_hbm.*buffer=nl\.hbm\)"):
        got = nki.jit(doubled_into_hbm)(x)
    np.testing.assert_array_equal(got, 2 * x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(nki.simulate(doubled_into_hbm, api_version="0.2")(x), 2 * x)


@pytest.mark.parametrize("level", ["0.3", "0.6", "0.7"])
def test_hbm_outputs_are_the_0_3_error_at_the_allocation_line(x, level):
    with raises_at(ReleaseError, match=r"a kernel output in nl\.hbm is not accepted") as exc:
        nki.jit(doubled_into_hbm, api_version=level)(x)
    assert exc.value.code == "err_unsupported_memory"
    assert exc.value.location.source == "out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)"
    assert "nl.shared_hbm" in exc.value.hint


@pytest.mark.parametrize("kernel", [count_with_dynamic_range, count_with_while_reg])
def test_dynamic_loops_run_by_default_with_a_warning_naming_0_7(kernel):
    n = np.array([[5]], np.int32)
    with pytest.warns(DeprecationWarning, match=r"is removed in NKI 0\.7 \(Neuron SDK 2\.33\).*nl\.(fori|while)_loop"):
        got = nki.jit(kernel)(np.zeros((1, 1), np.float32), n)
    assert got[0, 0] == 5


@pytest.mark.parametrize("kernel,line", [(count_with_dynamic_range, "for _ in nl.dynamic_range(0, reg):"),
                                         (count_with_while_reg, "while reg:")])
@pytest.mark.parametrize("strict", [{"api_version": "0.7"}, {"hardware_strict": True}])
def test_dynamic_loops_are_the_0_7_error_at_the_loop_line(kernel, line, strict):
    with raises_at(ReleaseError, match=r"is not accepted by NKI 0\.7 .*\(removed in NKI 0\.7") as exc:
        nki.jit(kernel, **strict)(np.zeros((1, 1), np.float32), np.array([[3]], np.int32))
    assert exc.value.location.source == line
    assert "_loop(" in exc.value.hint


@pytest.mark.parametrize("kernel", [count_with_dynamic_range, count_with_while_reg])
def test_dynamic_loops_under_0_6_warn_as_0_6_did(kernel):
    with pytest.warns(DeprecationWarning, match=r"is deprecated in NKI 0\.6 \(Neuron SDK 2\.32\)"):
        got = nki.jit(kernel, api_version="0.6")(np.zeros((1, 1), np.float32), np.array([[4]], np.int32))
    assert got[0, 0] == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nki.jit(kernel, api_version="0.5")(np.zeros((1, 1), np.float32), np.array([[2]], np.int32))[0, 0] == 2


def test_the_custom_frontend_keeps_the_0_6_rules(monkeypatch):
    monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")
    with pytest.warns(DeprecationWarning, match=r"deprecated in NKI 0\.6"):
        got = nki.jit(count_with_dynamic_range, hardware_strict=True)(np.zeros((1, 1), np.float32),
                                                                      np.array([[3]], np.int32))
    assert got[0, 0] == 3


def string_buffer_and_int_memset(x):
    """out = x + 3: a buffer named 'sbuf' (NKI 0.2) and an int tile memset with 3.0 (cast, as in 0.2)."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer="sbuf")
    nisa.dma_copy(dst=t, src=x)
    three = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=three, value=3.0)
    nisa.tensor_tensor(dst=t, data1=t, data2=three, op=nl.add)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_0_2_buffer_strings_and_memset_casts_warn_by_default(x):
    with pytest.warns(DeprecationWarning) as record:
        np.testing.assert_allclose(nki.jit(string_buffer_and_int_memset)(x), x + 3, rtol=1e-6)
    texts = " | ".join(str(w.message) for w in record)
    assert "a buffer named by a string (buffer='sbuf') is removed in NKI 0.3" in texts
    assert "nisa.memset of a float value into an integer tensor is removed in NKI 0.3" in texts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nki.jit(string_buffer_and_int_memset, api_version="0.2")(x), x + 3, rtol=1e-6)


@pytest.mark.parametrize("kernel_line", ["t = nl.ndarray(x.shape, dtype=x.dtype, buffer=\"sbuf\")"])
def test_0_2_buffer_strings_are_the_0_3_error(x, kernel_line):
    with pytest.raises(ReleaseError, match="buffer='sbuf'.*not accepted by NKI 0.3") as exc:
        nki.jit(string_buffer_and_int_memset, api_version="0.3")(x)
    assert exc.value.location.source == kernel_line


def test_a_memset_cast_is_the_0_3_error(x):
    def cast_only(x):
        three = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=three, value=3.0)
        return x
    with pytest.raises(ReleaseError, match="memset of a float value into an integer tensor") as exc:
        nki.jit(cast_only, hardware_strict=True)(x)
    assert exc.value.location.source == "nisa.memset(dst=three, value=3.0)"


@pytest.mark.parametrize("api", [nisa.tensor_copy_dynamic_src, nisa.tensor_copy_dynamic_dst])
def test_the_dynamic_copies_are_the_0_4_error(x, api):
    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        api(dst=t, src=t)
        return x
    with pytest.raises(ReleaseError, match=r"tensor_copy_dynamic_src / tensor_copy_dynamic_dst is not accepted by "
                       r"NKI 0\.4 .*removed in NKI 0\.4") as exc:
        nki.jit(kernel, api_version="0.4")(x)
    assert "tensor_copy with .ap" in exc.value.hint and exc.value.location.source == "api(dst=t, src=t)"


def test_legacy_releases_2_20_to_2_26():
    """Legacy kernels: every release 2.20-2.26 is accepted by default; an explicit level hides the names later
    releases added (nl.gather_flattened arrived in 2.24)."""
    import opennki.legacy as nki_legacy
    import opennki.legacy.language as nl_legacy

    def gather(data, idx):
        out = nl_legacy.ndarray(data.shape, dtype=data.dtype, buffer=nl_legacy.shared_hbm)
        t = nl_legacy.gather_flattened(nl_legacy.load(data), nl_legacy.load(idx))
        nl_legacy.store(out, t)
        return out
    data = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    idx = np.tile(np.arange(16)[::-1], (8, 1)).astype(np.uint32)
    for level in (None, "2.24", "2.26"):
        got = nki_legacy.simulate_kernel(nki_legacy.jit(gather, api_version=level), data, idx)
        np.testing.assert_array_equal(got, data[:, ::-1])
    with pytest.raises(ReleaseError, match=r"nl.gather_flattened does not exist in Neuron SDK 2.23; it was added in "
                       r"Neuron SDK 2.24") as exc:
        nki_legacy.simulate_kernel(nki_legacy.jit(gather, api_version="2.23"), data, idx)
    assert exc.value.location.source == "t = nl_legacy.gather_flattened(nl_legacy.load(data), nl_legacy.load(idx))"
    with pytest.raises(KernelError, match="'0.7' is not a public release of the legacy generation"):
        nki_legacy.simulate_kernel(nki_legacy.jit(gather, api_version="0.7"), data, idx)

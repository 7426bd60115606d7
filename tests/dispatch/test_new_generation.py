"""New-generation front door: nki.jit kernels, kernel[lnc], nki.simulate, signature and output rules."""

import warnings

import numpy as np
import pytest

import opennki as nki
from opennki.compile import Kernel
from opennki.errors import KernelError
from opennki.events import ProgramStarted
from opennki.kernels.standalone import use_services
from opennki.listeners import Recorder
from tests.dispatch import kernels as K
from tests.raises import raises_at


@pytest.fixture
def x(rng):
    return rng.standard_normal((128, 64), dtype=np.float32)


def test_jit_returns_a_kernel_that_runs_with_numpy(x):
    assert isinstance(K.new_copy, Kernel)
    np.testing.assert_array_equal(K.new_copy(x), x)


def test_lnc2_runs_two_programs_on_two_cores(x):
    rec = Recorder()
    out = K.lnc_halves[2].launch((x,), listeners=[rec])
    np.testing.assert_array_equal(out, -x)
    assert [(e.program, e.core) for e in rec.of_type(ProgramStarted)] == [((0,), 0), ((1,), 1)]
    np.testing.assert_array_equal(K.lnc_halves[2](x), -x)
    np.testing.assert_array_equal(K.lnc_halves[1](x), -x)
    np.testing.assert_array_equal(nki.simulate(K.lnc_halves[2])(x), -x)


@pytest.mark.parametrize("lnc,match", [(3, "LNC=3 is not supported"), (8, "LNC=8 is not supported"),
                                       ((1, 2), "one integer")])
def test_bad_lnc_is_refused(x, lnc, match):
    with raises_at(KernelError, match=match):
        K.lnc_halves[lnc](x)


def test_lnc2_needs_trn2_or_newer(x, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    with raises_at(KernelError, match=r"LNC=2 .* needs NeuronCore-v3 \(trn2\) or newer"):
        K.lnc_halves[2](x)
    np.testing.assert_array_equal(K.lnc_halves(x), -x)


def test_lnc_must_match_the_logical_core_config(x, monkeypatch):
    """NKI 0.7: without brackets the kernel takes NEURON_LOGICAL_NC_CONFIG's degree; a bracket degree that
    differs from the compiler's (NEURON_CC_FLAGS --lnc, else the configuration) is NCC_EVRF066."""
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    np.testing.assert_array_equal(K.lnc_halves(x), -x)
    np.testing.assert_array_equal(K.lnc_halves[2](x), -x)
    with raises_at(KernelError, match="configured with LNC=1, but neuronx-cc is using LNC=2") as exc:
        K.lnc_halves[1](x)
    assert exc.value.code == "NCC_EVRF066"
    with raises_at(KernelError, match="configured with LNC=1, but neuronx-cc is using LNC=2"):
        nki.jit(K.lnc_halves.func, api_version="0.6")(x)        # before 0.7 no brackets meant LNC=1
    monkeypatch.setenv("NEURON_CC_FLAGS", "--verbose --lnc=1")
    with raises_at(KernelError, match="configured with LNC=2, but neuronx-cc is using LNC=1"):
        K.lnc_halves(x)
    monkeypatch.setenv("NEURON_CC_FLAGS", "--lnc 2")
    np.testing.assert_array_equal(K.lnc_halves(x), -x)


def test_new_generation_outputs_must_be_shared_hbm(x):
    k = nki.jit(K.new_private_output, api_version="0.3")
    with raises_at(KernelError, match="nl.hbm is not accepted by NKI 0.3") as exc:
        k(x)
    assert "nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.hbm)" in str(exc.value)
    with pytest.warns(DeprecationWarning, match="nl.hbm is removed in NKI 0.3"):
        np.testing.assert_array_equal(nki.jit(K.new_private_output)(x), x)


def test_keyword_only_parameters_are_refused_at_decoration_from_0_3_to_0_6():
    def kernel(a, *, scale):
        return a
    for level in ("0.3", "0.6"):
        with raises_at(KernelError, match=r"cannot use the '\*' separator.*\['scale'\]"):
            nki.jit(kernel, api_version=level)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for strict in ({"api_version": "0.2"}, {"api_version": "0.7"}, {}, {"hardware_strict": True}):
            nki.jit(kernel, **strict)               # NKI 0.2 allowed them; 0.7 traces plain Python


def test_list_arguments_are_refused_from_0_3(x):
    def second(tensors):
        return K.new_copy.func(tensors[1])
    with raises_at(KernelError, match="lists are not accepted as kernel arguments.*pass a tuple"):
        nki.jit(second, hardware_strict=True)([x, x])
    with pytest.warns(DeprecationWarning, match="a list as a kernel argument is removed in NKI 0.3"):
        np.testing.assert_array_equal(nki.jit(second)([-x, x]), x)


def test_platform_target_is_refused_from_0_3_and_mode_is_ignored(x):
    with raises_at(KernelError, match="NEURON_PLATFORM_TARGET_OVERRIDE"):
        nki.jit(K.new_private_output, platform_target="trn2", hardware_strict=True)
    with pytest.warns(DeprecationWarning, match="mode=...[)] is deprecated in NKI 0.3"):
        k = nki.jit(mode="simulation")(K.new_copy.func)
    assert k.mode == "auto"
    np.testing.assert_array_equal(k(x), x)


def test_simulate_writes_modified_inputs_back(x):
    y = x.copy()
    assert nki.simulate(K.new_increment_inplace)(y) is None
    np.testing.assert_allclose(y, x + 1, rtol=1e-6)
    z = x.copy()
    nki.simulate(K.new_increment_inplace.func)(z)           # a plain function is wrapped
    np.testing.assert_array_equal(z, y)


def test_benchmark_is_offered_for_new_generation_kernels(x):
    seen = []
    previous = use_services(benchmark=lambda kernel, args, kwargs, **config: seen.append(kernel.spec) or "r")
    try:
        bench = nki.benchmark(K.new_copy)
        out = bench(x)
    finally:
        use_services(**previous)
    assert bench.benchmark_result == "r" and out.shape == x.shape
    assert seen[0].func is K.new_copy.func and seen[0].generation.name == "NEW"

"""JAX: the nki_call primitive eagerly and under jax.jit, the Neuron lowering text (custom call, base64
backend_config, aliases, frontend attributes), the trace-cache switch, the platform guard and NKI_SIMULATOR."""

import base64
import json
import re

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import opennki as nki_new  # noqa: E402
import opennki.legacy as nki  # noqa: E402
from opennki.bridges.jax import neuron_lowering_text  # noqa: E402
from opennki.compile import compute_mode  # noqa: E402
from opennki.errors import KernelError  # noqa: E402
from opennki.bridges.framework import JAXKernel  # noqa: E402
from opennki.kernels.standalone import SimulateKernel  # noqa: E402
from tests.dispatch import kernels as K  # noqa: E402
from tests.raises import raises_at


def test_eager_call_returns_jax_arrays(x):
    out = K.jit_scale_rows(jnp.asarray(x), 2.5)
    assert isinstance(out, jax.Array)
    np.testing.assert_allclose(np.asarray(out), x * 2.5, rtol=1e-6)


def test_kernel_inside_jax_jit(x):
    k = nki.jit(K.scale_rows)

    @jax.jit
    def f(a):
        return jnp.tanh(k[2](a, 0.5)) + 1.0
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x))), np.tanh(x * 0.5) + 1.0, rtol=1e-5)
    assert compute_mode((jnp.asarray(x),), {}, "auto") is JAXKernel


def test_bfloat16_and_tuple_outputs_under_jit(rng):
    a = rng.standard_normal((128, 32), dtype=np.float32).astype(ml_dtypes.bfloat16)
    s, m = jax.jit(lambda t: K.jit_sum_and_max(t))(jnp.asarray(a))
    assert s.dtype == jnp.bfloat16 and s.shape == (128, 1)
    np.testing.assert_array_equal(np.asarray(m)[:, 0], a.max(axis=1))
    np.testing.assert_allclose(np.asarray(s, np.float32)[:, 0], a.astype(np.float32).sum(axis=1), rtol=2e-2)


def test_kernel_writing_its_input_returns_the_written_input(rng):
    a, b = (rng.standard_normal((128, 64), dtype=np.float32) for _ in range(2))
    r = np.zeros_like(a)
    written = jax.jit(lambda p, q, o: K.jit_add_into(p, q, o))(jnp.asarray(a), jnp.asarray(b), jnp.asarray(r))
    np.testing.assert_allclose(np.asarray(written), a + b, rtol=1e-6)
    np.testing.assert_array_equal(r, 0)                 # the caller's array is untouched (JAX is immutable)


def _backend_config(text):
    return json.loads(base64.b64decode(re.search(r'backend_config = "([^"]+)"', text).group(1)))


def test_neuron_lowering_is_a_custom_call_with_the_traced_program(x):
    k = nki.jit(K.scale_rows)
    text = neuron_lowering_text(lambda a: k[2](a, 3.0) * 2, jnp.asarray(x))
    assert "stablehlo.custom_call @AwsNeuronCustomNativeKernel(%arg0)" in text
    config = _backend_config(text)
    assert config["func_name"] == "scale_rows" and config["grid"] == [2] and config["input_names"] == ["x"]
    assert config["outputs"] == [{"name": "scale_rows_output0", "shape": [256, 64], "dtype": "float32"}]
    assert 'mhlo.frontend_attributes = {nki_grid = "2", nki_kernel = "scale_rows"' in text
    assert "output_operand_aliases" not in text
    assert "xla_ffi_python_cpu_callback" not in text


def test_neuron_lowering_aliases_written_inputs_to_outputs(rng):
    a, b, r = (jnp.asarray(rng.standard_normal((128, 64), dtype=np.float32)) for _ in range(3))
    text = neuron_lowering_text(lambda p, q, o: K.jit_add_into(p, q, o), a, b, r)
    assert re.search(r"output_operand_aliases = \[#stablehlo.output_operand_alias<output_tuple_indices = \[\], "
                     r"operand_index = 2", text)
    assert _backend_config(text)["mutated_inputs"] == ["result"]


def test_cpu_lowering_runs_the_simulator(x):
    text = jax.jit(lambda a: K.jit_scale_rows(a, 1.0)).lower(jnp.asarray(x)).as_text()
    assert "AwsNeuronCustomNativeKernel" not in text and "callback" in text


def test_trace_cache_bypass_on_the_lowering_path(x, monkeypatch):
    k = nki.jit(K.scale_rows)
    a = jnp.asarray(x)
    neuron_lowering_text(lambda t: k(t, 2.0), a)
    tk = k.resolve(JAXKernel)
    before = tk.trace_count
    neuron_lowering_text(lambda t: k(t, 2.0), a)
    assert tk.trace_count == before                              # cached
    monkeypatch.setenv("NKI_DONT_CACHE_TRACE_FOR_JAX_LOWERING", "TRUE")
    neuron_lowering_text(lambda t: k(t, 2.0), a)
    assert tk.trace_count == before + 1                          # re-traced at lowering time


def test_platform_guard_only_in_strict_mode_and_lifted_by_nki_simulator(x, monkeypatch):
    k = nki.jit(K.scale_rows)
    a = jnp.asarray(x)
    monkeypatch.setenv("OPENNKI_STRICT_PLATFORM", "1")
    # raised from JAX's lowering rule, whose frames (not the caller's) are the innermost outside opennki
    with pytest.raises(KernelError, match="nki only support on neuron, current target: cpu"):
        jax.jit(lambda t: k(t, 2.0))(a)
    with raises_at(KernelError, match="nki only support on neuron, current target: cpu"):
        k(a, 2.0)
    monkeypatch.setenv("NKI_SIMULATOR", "1")
    np.testing.assert_allclose(np.asarray(jax.jit(lambda t: k(t, 3.0))(a)), x * 3.0, rtol=1e-6)


def test_nki_simulator_env_serves_jax_callers(x, monkeypatch):
    monkeypatch.setenv("NKI_SIMULATOR", "1")
    k = nki_new.jit(K.new_copy.func)
    a = jnp.asarray(x[:128])
    out = k(a)
    assert isinstance(out, jax.Array) and list(k._kernels) == [SimulateKernel]
    np.testing.assert_array_equal(np.asarray(out), x[:128])
    out = jax.jit(lambda t: k(t) + 1)(a)
    assert JAXKernel in k._kernels
    np.testing.assert_allclose(np.asarray(out), x[:128] + 1, rtol=1e-6)
    y = x[:128].copy()
    written = nki_new.jit(K.new_increment_inplace.func)(jnp.asarray(y))      # eager, immutable input
    np.testing.assert_allclose(np.asarray(written), y + 1, rtol=1e-6)


def test_jax_mode_rejects_torch_tensors(x):
    torch = pytest.importorskip("torch")
    with raises_at(KernelError, match="mode 'jax', which takes jax tensors, but was called with torch"):
        nki.jit(K.scale_rows, mode="jax")(torch.from_numpy(x), 2.0)

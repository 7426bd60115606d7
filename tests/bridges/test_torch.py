"""PyTorch: CPU tensors in, tensors out (dtype kept, bfloat16 bit-exact), in-place updates, the custom
operator under torch.compile(fullgraph=True), NKI_SIMULATOR=1, and clear errors."""

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import opennki as nki_new  # noqa: E402
import opennki.legacy as nki  # noqa: E402
from opennki.errors import KernelError  # noqa: E402
from opennki.bridges.framework import PyTorchKernel  # noqa: E402
from opennki.kernels.standalone import BaremetalKernel, SimulateKernel  # noqa: E402
from tests.dispatch import kernels as K  # noqa: E402
from tests.raises import raises_at


def test_float32_tensors_in_tensors_out(x):
    out = K.jit_scale_rows(torch.from_numpy(x), 1.5)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), x * 1.5, rtol=1e-6)


def test_bfloat16_is_bridged_without_loss(x):
    t = torch.from_numpy(x).to(torch.bfloat16)
    out = K.jit_scale_rows(t, 3.0)
    assert out.dtype == torch.bfloat16
    expected = (t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).astype(np.float32) * 3.0)
    expected = expected.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(torch.int16).numpy(), expected.view(np.int16))


def test_tuple_outputs_come_back_as_a_tuple_of_tensors(rng):
    a = rng.standard_normal((128, 32), dtype=np.float32)
    s, m = K.jit_sum_and_max(torch.from_numpy(a))
    assert isinstance(s, torch.Tensor) and s.shape == (128, 1)
    np.testing.assert_allclose(s.numpy()[:, 0], a.sum(axis=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(m.numpy()[:, 0], a.max(axis=1))


def test_kernel_writing_its_input_updates_the_tensor_in_place(rng):
    a, b = (torch.from_numpy(rng.standard_normal((128, 64), dtype=np.float32)) for _ in range(2))
    result = torch.zeros(128, 64)
    assert K.jit_add_into(a, b, result) is None
    torch.testing.assert_close(result, a + b)


def test_one_kernel_serves_numpy_then_torch(x):
    k = nki.jit(K.scale_rows)
    np.testing.assert_allclose(k(x, 2.0), x * 2.0, rtol=1e-6)
    np.testing.assert_allclose(k(torch.from_numpy(x), 2.0).numpy(), x * 2.0, rtol=1e-6)
    assert set(k._kernels) == {BaremetalKernel, PyTorchKernel}


def test_torchxla_mode_requires_torch_tensors(x):
    k = nki.jit(K.scale_rows, mode="torchxla")
    with raises_at(KernelError, match="mode 'torchxla', which takes torch tensors, but was called with NumPy"):
        k(x, 2.0)
    np.testing.assert_allclose(k(torch.from_numpy(x), 2.0).numpy(), x * 2.0, rtol=1e-6)


def test_mixing_torch_and_numpy_is_a_clear_error(x):
    with raises_at(KernelError, match="tensors of several frameworks"):
        nki.jit(K.add_into)(torch.from_numpy(x[:128]), x[:128], x[:128].copy())


def test_64_bit_tensors_are_refused_with_a_hint():
    with raises_at(KernelError, match="torch.int64 is not a NeuronCore dtype") as exc:
        K.jit_scale_rows(torch.arange(256 * 64).reshape(256, 64), 2)
    assert "torch.int32" in str(exc.value)


def test_model_calling_kernels_compiles_with_fullgraph(rng):
    a = torch.from_numpy(rng.standard_normal((256, 64), dtype=np.float32))
    b = torch.from_numpy(rng.standard_normal((128, 64), dtype=np.float32))

    def model(x, y):
        scaled = K.jit_scale_rows(x, 0.5)
        s, m = K.jit_sum_and_max(y)
        return torch.relu(scaled).sum() + s.sum() * m.mean()

    compiled = torch.compile(model, fullgraph=True)
    expected = torch.relu(a * 0.5).sum() + b.sum() * b.max(dim=1).values.mean()
    torch.testing.assert_close(compiled(a, b), expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(compiled(a * 2, b), torch.relu(a).sum() + b.sum() * b.max(dim=1).values.mean(),
                               rtol=1e-4, atol=1e-3)


def test_first_torch_call_of_a_kernel_may_happen_inside_torch_compile(rng):
    fresh = nki_new.jit(K.new_copy.func)                 # never called before: made while Dynamo traces
    x = torch.from_numpy(rng.standard_normal((128, 64), dtype=np.float32))
    compiled = torch.compile(lambda t: fresh(t) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), x * 2)


def test_fake_implementation_gives_shapes_without_running(rng):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(128, 32)
        s, m = K.jit_sum_and_max(a)
    assert s.shape == (128, 1) and m.dtype == torch.float32


def test_nki_simulator_env_routes_torch_to_the_simulator(x, monkeypatch):
    monkeypatch.setenv("NKI_SIMULATOR", "1")
    k = nki_new.jit(K.new_copy.func)
    t = torch.from_numpy(x[:128]).to(torch.bfloat16)
    out = k(t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and torch.equal(out, t)
    assert list(k._kernels) == [SimulateKernel]


def test_simulate_takes_torch_and_writes_back(rng):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    t = torch.from_numpy(x.copy())
    assert nki_new.simulate(K.new_increment_inplace)(t) is None
    np.testing.assert_allclose(t.numpy(), x + 1, rtol=1e-6)
    out = nki_new.simulate(K.new_copy)(t)
    assert isinstance(out, torch.Tensor) and torch.equal(out, t)

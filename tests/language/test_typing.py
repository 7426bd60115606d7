"""`nki.typing` (nt): parameter annotations, shape placeholders, and the parameter mutability rules
(err_annotation_shape_mismatch, err_cannot_update_immutable_parameter, err_mutable_parameter_not_returned)."""

import ml_dtypes
import numpy as np

import opennki.legacy as nki
import opennki.legacy.language as nl
import opennki.legacy.typing as nt
from opennki.releases import Generation
from opennki.errors import KernelError
from opennki._src.tensor import NkiTensor
from opennki.sim.options import SimOptions
from opennki.sim.simulator import ShapeSpec, Simulator
from tests.raises import raises_at


def test_placeholders_are_shape_specs():
    spec = nt.tensor[[8192, 4096], nl.bfloat16]
    assert isinstance(spec, ShapeSpec) and spec.shape == (8192, 4096) and spec.dtype == ml_dtypes.bfloat16
    assert nt.tensor[128, 512].shape == (128, 512) and nt.mutable_tensor[4].mutable


def test_placeholders_run_shape_only():
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(a)))
        return out
    out = Simulator(options=SimOptions(shape_only=True)).launch(kernel, (nt.tensor[[64, 32], nl.float32],),
                                                                 tensor_type=NkiTensor)
    assert out.shape == (64, 32)


def test_annotated_parameter_shapes_are_checked(rng):
    @nki.jit
    def kernel(a: nt.tensor[16, 8]):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out
    x = rng.standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(kernel(x), x)
    with raises_at(KernelError, match="err_annotation_shape_mismatch"):
        kernel(rng.standard_normal((16, 9)).astype(np.float32))


def test_parameters_are_immutable_unless_annotated_mutable(rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)

    @nki.jit
    def writes_input(a: nt.tensor, b):
        out = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        nl.store(a, value=nl.load(b))
        return out
    with raises_at(KernelError, match="err_cannot_update_immutable_parameter") as info:
        writes_input(x.copy(), x)
    assert "nl.store(a, value=nl.load(b))" in str(info.value)

    @nki.jit
    def updates(a: nt.mutable_tensor, b):
        nl.store(a, value=nl.add(nl.load(a), nl.load(b)))
        return a
    target = x.copy()
    np.testing.assert_allclose(updates(target, x), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(target, 2 * x, rtol=1e-6)        # the caller's array is updated in place

    @nki.jit
    def forgets(a: nt.mutable_tensor, b):
        out = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        nl.store(a, value=nl.load(b))
        nl.store(out, value=nl.load(b))
        return out
    with raises_at(KernelError, match="err_mutable_parameter_not_returned"):
        forgets(x.copy(), x)


def test_the_legacy_generation_makes_unannotated_parameters_immutable(rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)

    def kernel(a, b):
        out = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        nl.store(a, value=nl.load(b))
        return out

    def old_convention(a, b):                 # no return: outputs are parameters (before SDK 2.20.1)
        nl.store(b, value=nl.load(a))
    sim = Simulator()
    with raises_at(KernelError, match="err_cannot_update_immutable_parameter"):
        sim.launch(kernel, (x.copy(), x), tensor_type=NkiTensor, generation=Generation.LEGACY)
    sim.launch(kernel, (x.copy(), x), tensor_type=NkiTensor, generation=Generation.NEW)
    out = np.zeros_like(x)
    sim.launch(old_convention, (x, out), tensor_type=NkiTensor, generation=Generation.LEGACY)
    np.testing.assert_array_equal(out, x)


def test_a_launched_kernel_is_not_kept_alive_by_its_remembered_rules(rng):
    import gc
    import weakref
    x = rng.standard_normal((16, 8)).astype(np.float32)
    big = np.ones(1 << 20, np.float32)

    def kernel(a: nt.tensor[16, 8]):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), float(big[0])))      # the closure holds `big`
        return out
    np.testing.assert_array_equal(nki.jit(kernel)(x), x + 1)
    with raises_at(KernelError, match="err_annotation_shape_mismatch"):      # remembered rules, checked again
        nki.jit(kernel)(rng.standard_normal((8, 8)).astype(np.float32))
    gone = weakref.ref(kernel)
    del kernel
    gc.collect()
    assert gone() is None

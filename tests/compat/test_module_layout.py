"""The real module layout of both generations, through the NKI import names: every module path public NKI
code imports exists under `neuronxcc.nki...` / `nki...` and holds the names of the real package (the API
stubs of the Neuron SDK docs: `general/nki/api/nki/...` at SDK 2.26, `nki/api/nki/...` at 2.32), as the
very objects of opennki's mirrored modules; and the aliases win over a namespace folder of that name."""

import importlib
import sys

import pytest

from opennki import compat

# module path -> names public code takes from it (the stubs' names; the language/isa facades have tests of
# their own that list every name)
LEGACY_TREE = {
    "neuronxcc.nki": ["jit", "baremetal", "benchmark", "profile", "simulate_kernel", "trace", "tensor",
                      "FrameworkKernel"],
    "neuronxcc.nki.language": ["load", "store", "arange", "mgrid", "par_dim", "sbuf", "psum", "tile_size"],
    "neuronxcc.nki.isa": ["nc_matmul", "activation", "dma_copy", "engine", "oob_mode", "constants"],
    "neuronxcc.nki.isa.constants": ["engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version"],
    "neuronxcc.nki.compiler": ["sbuf", "psum", "skip_middle_end_transformations", "enable_stack_allocator",
                               "force_auto_alloc", "allocation_scope", "multi_buffer", "no_reorder"],
    "neuronxcc.nki.typing": ["tensor", "mutable_tensor"],
    "neuronxcc.nki.compile": ["GenericKernel"],
    "neuronxcc.nki.meta": ["tensor"],
}
NEW_TREE = {
    "nki": ["jit", "simulate", "language", "isa", "collectives", "typing"],
    "nki.language": ["ndarray", "NkiTensor", "NKIObject", "MemoryRegion", "tile_size", "no_reorder"],
    "nki.isa": ["nc_matmul", "dma_copy", "engine", "dma_engine", "oob_mode", "VirtualRegister", "constants"],
    "nki.isa.constants": ["dge_mode", "engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd"],
    "nki.collectives": ["ReplicaGroup", "all_reduce", "all_gather", "rank_id"],
    "nki.typing": ["tensor", "mutable_tensor"],
    "nki.compiler": ["no_reorder", "skip_middle_end_transformations"],
    "nki.compile": ["GenericKernel"],
}


@pytest.fixture
def mapped():
    compat.install()
    yield
    compat.uninstall()


@pytest.mark.parametrize("module, names", list(LEGACY_TREE.items()) + list(NEW_TREE.items()))
def test_every_public_module_path_imports_with_its_names(mapped, module, names):
    mod = importlib.import_module(module)
    real = mod.__name__                                   # the opennki module itself, not a copy
    assert real.startswith("opennki")
    for alias, target in compat.ALIASES.items():
        if module == alias or module.startswith(alias + "."):
            assert real == target + module[len(alias):]   # compat maps module for module
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing


def test_submodules_and_parent_attributes_are_the_same_objects(mapped):
    from neuronxcc.nki.isa.constants import dge_mode, oob_mode
    import neuronxcc.nki.isa as nisa
    from neuronxcc.nki.compile import GenericKernel
    from neuronxcc import nki
    assert oob_mode is nisa.oob_mode and dge_mode is nisa.dge_mode
    assert isinstance(nki.jit(lambda a: a), GenericKernel)
    from nki.isa import constants
    import nki.isa
    assert constants.oob_mode is nki.isa.oob_mode
    from nki.typing import tensor
    import neuronxcc.nki.typing as nt
    assert tensor is nt.tensor


def test_legacy_tensor_type_is_the_tile_class_kernels_receive(mapped):
    from neuronxcc import nki
    import neuronxcc.nki.language as nl
    import numpy as np
    seen = []

    @nki.jit(mode="simulation")
    def kernel(a: nki.tensor):
        seen.append(isinstance(a, nki.tensor))
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) * 2.0)
        return out

    x = np.random.default_rng(0).random((4, 8), dtype=np.float32)
    np.testing.assert_array_equal(kernel(x), x * 2.0)
    assert seen == [True]


# ------------------------------------------------------------------------------- alias precedence on sys.path

def _drop(top):
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


@pytest.mark.parametrize("top", ["nki", "neuronxcc"])
def test_a_namespace_folder_of_that_name_loses_to_the_alias(tmp_path, monkeypatch, capsys, top):
    """A checkout of the SDK docs has `nki/` (and tests import from its parent folder) without `__init__.py`:
    no installation, so the alias wins over it silently, as a real installed package would."""
    (tmp_path / top / "examples").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, top, raising=False)
    assert compat.real_installation(top) is None
    importlib.import_module(top)                          # already imported as a namespace package, even
    try:
        assert "nki" in compat.install().get("nki", "") + compat.install().get("neuronxcc.nki", "")
        assert "real" not in capsys.readouterr().err
        language = importlib.import_module("nki.language" if top == "nki" else "neuronxcc.nki.language")
        assert language.__name__ in ("opennki.language", "opennki.legacy.language")
    finally:
        compat.uninstall()
        _drop(top)


def test_a_real_package_behind_a_namespace_folder_is_still_never_shadowed(tmp_path, monkeypatch, capsys):
    (tmp_path / "first" / "nki").mkdir(parents=True)              # namespace folder earlier on the path
    (tmp_path / "second" / "nki").mkdir(parents=True)
    (tmp_path / "second" / "nki" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path / "second"))
    monkeypatch.syspath_prepend(str(tmp_path / "first"))
    monkeypatch.delitem(sys.modules, "nki", raising=False)
    try:
        assert "nki" not in compat.install()
        assert "a real 'nki' is installed" in capsys.readouterr().err
        assert importlib.import_module("nki").REAL
    finally:
        compat.uninstall()
        _drop("nki")

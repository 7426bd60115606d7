"""Front door: make the import names `neuronxcc.nki...` and `nki...` mean opennki, on request only.

Imports nothing from opennki at import time (the facades are imported when a mapped name is). `install()`
puts an import finder on `sys.meta_path` that maps
    neuronxcc.nki[.X]  ->  opennki.legacy[.X]     (the legacy facade; `neuronxcc` itself is an empty stub)
    nki[.X]            ->  opennki[.X]            (the new-generation facade)
so `from neuronxcc import nki`, `import neuronxcc.nki.language as nl`, `import nki.isa as nisa` give
opennki's modules themselves (`neuronxcc.nki.language is opennki.legacy.language`). Nothing is patched: the
finder only answers for those names.

A folder of that name without `__init__.py` on `sys.path` (a namespace package, as in a checkout of the
SDK docs) is no installation: the alias wins over it, as a real installed package would. A real
installation is never shadowed silently: when `neuronxcc` or `nki` is importable from elsewhere,
that name is left alone and `install` says so (on stderr); `force=True` (`opennki run --force`,
`pytest -p opennki.pytest_plugin --opennki-force`) maps it anyway, and says that too.
`opennki run`, the pytest plugin and user code call this; importing opennki never does.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

ALIASES = {"neuronxcc.nki": "opennki.legacy", "nki": "opennki"}
_STUB_DOC = "opennki's stand-in for the neuronxcc package: only `neuronxcc.nki` exists (opennki.legacy)."


class _AliasLoader(importlib.abc.Loader):
    """Loads an alias name as the real opennki module object (keeping that module's own spec)."""

    def __init__(self, real_name: str):
        self.real_name = real_name
        self.real_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.real_name)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self.real_spec    # the import system stamped the alias spec on it; undo that


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = types.ModuleType(spec.name, _STUB_DOC)
        module.__path__ = []
        module.__opennki_stub__ = True
        return module

    def exec_module(self, module):
        return None


class AliasFinder(importlib.abc.MetaPathFinder):
    """Answers for the mapped names only (module docstring)."""

    def __init__(self):
        self.aliases: dict[str, str] = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "neuronxcc" and "neuronxcc.nki" in self.aliases:
            return importlib.util.spec_from_loader(fullname, _StubLoader(), is_package=True)
        for alias, real in self.aliases.items():
            if fullname == alias or fullname.startswith(alias + "."):
                real_name = real + fullname[len(alias):]
                real_spec = importlib.util.find_spec(real_name)
                if real_spec is None:
                    return None
                return importlib.util.spec_from_loader(
                    fullname, _AliasLoader(real_name), is_package=real_spec.submodule_search_locations is not None)
        return None


_finder = AliasFinder()


def _top(alias: str) -> str:
    return alias.split(".")[0]


def _is_namespace(spec) -> bool:
    """A namespace package: folders of that name without `__init__.py` (a checkout of the SDK docs has `nki/`).
    The import system only makes one when no regular package of the name exists on the whole path."""
    return spec is not None and spec.origin in (None, "namespace") and spec.submodule_search_locations is not None \
        and (spec.loader is None or type(spec.loader).__name__ == "NamespaceLoader")


def real_installation(top: str) -> str | None:
    """Where a real (non-opennki) package `top` is importable from, or None. A namespace folder is no
    installation: a real package of that name would win over it, and so does opennki's alias."""
    module = sys.modules.get(top)
    if module is not None and not getattr(module, "__opennki_stub__", False) and not _is_alias(top, module) \
            and not _is_namespace(getattr(module, "__spec__", None)):
        return getattr(module, "__file__", None) or repr(module)
    for finder in sys.meta_path:
        if finder is _finder or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec(top, None)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and not _is_namespace(spec):
            return spec.origin or next(iter(spec.submodule_search_locations or []), top)
    return None


def _is_alias(top: str, module) -> bool:
    return getattr(module, "__name__", "").split(".")[0] == "opennki"


def _say(message: str) -> None:
    print(f"opennki: {message}", file=sys.stderr)


def install(force: bool = False, names=tuple(ALIASES)) -> dict[str, str]:
    """Map the NKI import names onto opennki (module docstring); returns the mapping now in force."""
    for alias in names:
        if alias not in ALIASES:
            raise ValueError(f"unknown NKI import name {alias!r}; expected one of {sorted(ALIASES)}")
        if alias in _finder.aliases:
            continue
        top = _top(alias)
        where = real_installation(top)
        if where is not None and not force:
            _say(f"a real '{top}' is installed ({where}); using it, not opennki. "
                 f"Pass --force (or install(force=True)) to run on opennki instead.")
            continue
        if where is not None:
            _say(f"'{top}' is installed ({where}) but forced to opennki's {ALIASES[alias]}")
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            if where is not None or _is_namespace(getattr(sys.modules[name], "__spec__", None)):
                del sys.modules[name]          # a real package forced aside, or a namespace folder imported
        _finder.aliases[alias] = ALIASES[alias]
    if _finder.aliases and _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    return dict(_finder.aliases)


def uninstall() -> None:
    """Remove the mapping and forget the alias modules (the opennki modules themselves stay imported)."""
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    for alias in list(_finder.aliases):
        top = _top(alias)
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            module = sys.modules[name]
            if getattr(module, "__opennki_stub__", False) or _is_alias(top, module):
                del sys.modules[name]
    _finder.aliases.clear()


def installed() -> dict[str, str]:
    return dict(_finder.aliases)


__all__ = ["install", "uninstall", "installed", "real_installation", "ALIASES"]

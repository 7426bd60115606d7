"""Front door (legacy generation): `neuronxcc.nki.compile`, the module NKI's jit kernel class lives in.

Imports the dispatch layer only. Code written against NKI reaches the class there
(`from neuronxcc.nki.compile import GenericKernel`, spec/entrypoints.md §2.1); these are opennki's own
dispatch objects, so `isinstance(nki.jit(f), GenericKernel)` holds.
"""

from opennki.compile import GenericKernel, _native_mode_map, compute_mode  # noqa: F401

__all__ = ["GenericKernel", "compute_mode", "_native_mode_map"]

"""Front door (legacy generation): `neuronxcc.nki.meta`, where SDK 2.28 moved the tensor type `nki.tensor`
(spec/entrypoints.md §1). Imports the language layer's tensor class, the one `nki.tensor` names too."""

from opennki._src.tensor import NkiTensor as tensor

__all__ = ["tensor"]

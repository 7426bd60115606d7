"""Front door (new generation): `nki.typing` (`nt`, NKI 0.3+): `nt.tensor[shape]` parameter annotations and
shape-and-dtype placeholders, and `nt.mutable_tensor` (seen in NKI Library signatures; spec/entrypoints.md §7).

Imports the legacy typing facade: both generations' `nt` are the same objects, checked the same way.
"""

from opennki.legacy.typing import TensorType, mutable_tensor, tensor

__all__ = ["tensor", "mutable_tensor", "TensorType"]

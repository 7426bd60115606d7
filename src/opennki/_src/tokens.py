"""Language layer: operator objects that are both callable `nl` functions and `op=` tokens for `nisa`.

`nl.add(x, y)` adds tiles; `nisa.tensor_tensor(..., op=nl.add)` names the ALU operator. Instructions read
the operator's `nki_name`, so an `NlOp` from either generation (or a NumPy function in the legacy one)
selects the same table entry.
"""

from __future__ import annotations

import operator

from opennki.errors import KernelError
from opennki.instructions.base import OPERATOR_TYPES


class NlOp:
    """An `nl` operator: calling it runs the op; passing it as `op=` names it."""


    def __init__(self, name: str, impl=None, doc: str | None = None):
        self.nki_name = name
        self._impl = impl if impl is not None else self._token_only
        self.__doc__ = doc or (impl.__doc__ if impl is not None else None)
        self.__wrapped__ = impl

    @property
    def __name__(self) -> str:
        return self.nki_name

    # `op(...)` calls `impl` itself: Python looks `__call__` up on the class and calls what this descriptor
    # gives for the instance (its `_impl`, read by a C getter), so no frame of ours forwards `*args, **kwargs`
    # (every `nl.add(...)` of a kernel's loops passed through one)
    __call__ = property(operator.attrgetter("_impl"))

    def _token_only(self, *args, **kwargs):
        raise KernelError(f"nl.{self.nki_name} is an operator token for nisa instructions (op=...), not a "
                          "callable function")

    def __repr__(self) -> str:
        return f"nl.{self.nki_name}"

    def __reduce__(self):
        return (NlOp, (self.nki_name,))


OPERATOR_TYPES.add(NlOp)        # its name never changes: instruction signatures key it by name

"""Front door (new generation): `nki.compiler`. NKI 0.2+ documents no public names in it ("direct allocation
APIs have been reworked": tensors are placed with `nl.ndarray(..., address=)`, spec/entrypoints.md §8), but
the installed package has the module and code migrated from the legacy generation still applies its kernel
directives. So it holds the legacy directives that change compilation only (checked and recorded, no effect
on results) and the scheduling scope `no_reorder` (the same object as `nl.no_reorder`).

Imports the legacy compiler facade and the new language facade.
"""

from opennki.language import no_reorder
from opennki.legacy.compiler import (allocation_scope, enable_stack_allocator, force_auto_alloc, multi_buffer,
                                     skip_middle_end_transformations)

__all__ = ["skip_middle_end_transformations", "enable_stack_allocator", "force_auto_alloc", "allocation_scope",
           "multi_buffer", "no_reorder"]

"""Language layer: legacy SPMD grid annotations (`nl.nc`, `nl.spmd_dim`) and their resolution to a launch grid.

Imports errors and hw only. A legacy launch `kernel[g0, g1, ...]` takes, per grid dimension, an int, `nl.nc(n)`
(the dimension is spread over `n` physical NeuronCores of a logical core) or `nl.spmd_dim(...)` (one
dimension built from sub-dimensions, some of them `nl.nc`). `nl.nc(2) * 2` is `nl.spmd_dim(nl.nc(2), 2)` and
`2 * nl.nc(2)` is `nl.spmd_dim(2, nl.nc(2))` (spec/language.md §5.8, spec/entrypoints.md §2.3).

Sub-dimensions of one `spmd_dim` are mixed-radix digits of the program id along that axis, the first
sub-dimension being the most significant: in `spmd_dim(nc(2), 2)` program ids 0, 1 run on NC0 and 2, 3 on
NC1; in `spmd_dim(2, nc(2))` even ids run on NC0 and odd ids on NC1. When several grid dimensions carry `nc`
annotations, the physical core is the mixed-radix number of all `nc` digits, outermost grid dim first.

`resolve_grid(key)` turns a subscript key into `(sizes, cores_of)`: the grid sizes and a function mapping
program ids to a physical core index (None when no dimension is annotated, i.e. everything on one core).

`kernel[0]` (decision, docs/compatibility.md "`kernel[0]`"): a public sample launches its kernel so, and its
author checked the numbers on hardware with `nki.baremetal` (nki-samples PR #63), so NKI runs one program
there. opennki launches it as `kernel[1]`, with a `UserWarning` at the launching line. Every other size that
is not a positive integer (`kernel[-1]`, `kernel[2, 0]`, `nl.nc(0)`, a float) stays an error.
"""

from __future__ import annotations

import operator
import warnings

from opennki.errors import KernelError, user_location
from opennki.instructions.base import require

MAX_CORES_PER_LOGICAL_CORE = 2   # LNC is 1 or 2 on every NeuronCore generation (spec/hardware.md §1)


def _size(value, what: str) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise KernelError(f"{what} must be a positive integer", got=value) from None
    if n <= 0:
        raise KernelError(f"{what} must be a positive integer", got=n)
    return n


class nc:
    """`nl.nc(n)`: a grid (sub-)dimension of size `n` spread over `n` physical NeuronCores (trn2 / trn3).
    `n` is checked when the kernel is launched (`resolve_grid`), so the error ends at the launching line."""

    __slots__ = ("size",)

    def __init__(self, size):
        self.size = size

    def __eq__(self, other) -> bool:
        return isinstance(other, nc) and other.size == self.size

    def __hash__(self) -> int:
        return hash(("nc", repr(self.size)))

    def __mul__(self, other) -> "spmd_dim":
        return spmd_dim(self, other)

    def __rmul__(self, other) -> "spmd_dim":
        return spmd_dim(other, self)

    def __repr__(self) -> str:
        return f"nl.nc({self.size})"


def _checked_nc(core: nc) -> nc:
    n = _size(core.size, "nl.nc(n)")
    if n > MAX_CORES_PER_LOGICAL_CORE:
        raise KernelError(f"nl.nc({n}): a logical NeuronCore has at most {MAX_CORES_PER_LOGICAL_CORE} "
                          "physical cores", expected=f"<= {MAX_CORES_PER_LOGICAL_CORE}", got=n)
    return nc(n)


class spmd_dim:
    """`nl.spmd_dim(*sizes)`: one grid dimension made of sub-dimensions (ints or `nl.nc`), outermost first."""

    def __init__(self, *sizes):
        parts = []
        for s in sizes:
            parts.extend(s.parts if isinstance(s, spmd_dim) else (s,))
        self.parts = tuple(parts)       # checked at launch (`checked`), like nl.nc sizes

    def checked(self) -> "spmd_dim":
        """This dimension with every sub-dimension checked: positive ints, nl.nc(1) or nl.nc(2)."""
        if not self.parts:
            raise KernelError("nl.spmd_dim needs at least one sub-dimension")
        return spmd_dim(*(_checked_nc(p) if isinstance(p, nc) else _size(p, "an nl.spmd_dim sub-dimension")
                          for p in self.parts))

    @property
    def size(self) -> int:
        total = 1
        for p in self.parts:
            total *= p.size if isinstance(p, nc) else p
        return total

    def __mul__(self, other) -> "spmd_dim":
        return spmd_dim(self, other)

    def __rmul__(self, other) -> "spmd_dim":
        return spmd_dim(other, self)

    def __repr__(self) -> str:
        return f"nl.spmd_dim({', '.join(repr(p) for p in self.parts)})"


class CoreMap:
    """Program ids -> physical core, from the `nc` digits of every grid dimension (module docstring).

    Attributes:
        cores: number of physical cores the grid is spread over.
    """

    def __init__(self, dims: tuple[tuple, ...]):
        # per grid dim: tuple of (radix, is_nc) digits, most significant first
        self.dims = dims
        cores = 1
        for digits in dims:
            for radix, is_nc in digits:
                if is_nc:
                    cores *= radix
        self.cores = cores

    def __call__(self, ids) -> int:
        core = 0
        for digits, i in zip(self.dims, ids):
            rest = int(i)
            values = []
            for radix, is_nc in reversed(digits):
                values.append((rest % radix, radix, is_nc))
                rest //= radix
            for value, radix, is_nc in reversed(values):
                if is_nc:
                    core = core * radix + value
        return core

    def __repr__(self) -> str:
        return f"CoreMap(cores={self.cores})"


def resolve_grid(key, target=None):
    """(sizes, cores_of) of a legacy launch subscript `kernel[key]` (module docstring).

    Args:
        key: an int, `nl.nc(n)`, `nl.spmd_dim(...)`, a product like `nl.nc(2) * 2`, or a tuple of these.
        target: optional HwConfig or target name; multi-core grids are rejected on trn1
            (`err_multi_cores_spmd_not_supported`).
    Returns:
        the grid sizes, and a `CoreMap` (callable ids -> core, with `.cores`) or None without `nl.nc`.
    """
    if not isinstance(key, tuple):
        if type(key) is int and key == 0:
            where = user_location(2)
            warnings.warn_explicit("kernel[0]: NKI launches one program for a grid of 0 (a public sample's "
                                   "hardware run relies on it); opennki runs it as kernel[1]", UserWarning,
                                   where.filename if where else "<kernel>", where.lineno if where else 0)
            key = 1
        key = (key,)
    sizes, dims, any_nc = [], [], False
    for entry in key:
        if isinstance(entry, nc):
            entry = spmd_dim(entry)
        if isinstance(entry, spmd_dim):
            entry = entry.checked()
            digits = tuple((p.size, True) if isinstance(p, nc) else (p, False) for p in entry.parts)
            any_nc = any_nc or any(is_nc for _, is_nc in digits)
            sizes.append(entry.size)
        else:
            n = _size(entry, "an SPMD grid dimension")
            digits = ((n, False),)
            sizes.append(n)
        dims.append(digits)
    if not any_nc:
        return tuple(sizes), None
    cores_of = CoreMap(tuple(dims))
    if cores_of.cores > MAX_CORES_PER_LOGICAL_CORE:
        raise KernelError(f"the nl.nc annotations of this grid need {cores_of.cores} physical cores; a logical "
                          f"NeuronCore has at most {MAX_CORES_PER_LOGICAL_CORE}", got=key)
    if target is not None and cores_of.cores > 1:
        from opennki.hw import get_target
        hw = target if hasattr(target, "capabilities") else get_target(target)
        require(hw, "lnc2", "an SPMD grid spread over several NeuronCores (nl.nc)",
                code="err_multi_cores_spmd_not_supported")
    return tuple(sizes), cores_of


__all__ = ["nc", "spmd_dim", "resolve_grid", "CoreMap"]

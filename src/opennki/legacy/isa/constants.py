"""Front door (legacy generation): `neuronxcc.nki.isa.constants`, the nisa enums under the module name
official samples import them from (`from neuronxcc.nki.isa.constants import dge_mode`; spec/isa.md §12.1 C35).

Imports nothing: the enums with the legacy numbering are defined here, and `neuronxcc.nki.isa` exports these
very objects.
"""

import enum


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4     # later legacy-namespace releases (the SDK's own tensor_scalar_cumulative tests, 2.32)


class dge_mode(enum.IntEnum):
    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(enum.IntEnum):
    error = 0
    skip = 1


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3


__all__ = ["dge_mode", "engine", "nc_version", "oob_mode", "reduce_cmd"]

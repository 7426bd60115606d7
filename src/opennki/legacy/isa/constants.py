"""Front door (legacy generation): `neuronxcc.nki.isa.constants`, the nisa enums under the module name
official samples import them from (`from neuronxcc.nki.isa.constants import dge_mode`; spec/isa.md C35).

Imports the legacy isa facade only: these are the very enum objects `neuronxcc.nki.isa` exports.
"""

from opennki.legacy.isa import dge_mode, engine, nc_version, oob_mode, reduce_cmd

__all__ = ["dge_mode", "engine", "nc_version", "oob_mode", "reduce_cmd"]

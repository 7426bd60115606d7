"""Hardware layer: NeuronCore parameters per target as validated data. Imports nothing from opennki.

A target is chosen by name (`trn1`, `inf2`, `gen2`, `trn2`, `gen3`, `trn3`, `gen4`, as
`NEURON_PLATFORM_TARGET_OVERRIDE` spells them) or falls back to `DEFAULT_TARGET`. NKI's simulator
defaults to trn3 when no device is present (spec/entrypoints.md §2.5); opennki does the same.
"""

from __future__ import annotations

from opennki.environment import VARIABLES, setting
from opennki.hw.config import Capabilities, HwConfig, MemorySpec, TileLimits
from opennki.hw.trn1 import TRN1
from opennki.hw.trn2 import TRN2
from opennki.hw.trn3 import TRN3

TARGETS: dict[str, HwConfig] = {
    "trn1": TRN1, "inf2": TRN1, "gen2": TRN1,
    "trn2": TRN2, "gen3": TRN2,
    "trn3": TRN3, "gen4": TRN3,
}
DEFAULT_TARGET = "trn3"
TARGET_ENV = VARIABLES["target"]


def get_target(name: str | HwConfig | None = None) -> HwConfig:
    """The HwConfig for `name`, else for `$NEURON_PLATFORM_TARGET_OVERRIDE`, else for trn3."""
    if isinstance(name, HwConfig):
        return name
    if name is None:
        name = setting("target") or DEFAULT_TARGET
    key = str(name).strip().lower()
    if key not in TARGETS:
        raise ValueError(f"unknown NeuronCore target {name!r}; expected one of {sorted(TARGETS)}")
    return TARGETS[key]


def first_with(capability: str) -> str:
    """How a message names the first NeuronCore generation with `capability` (a `Capabilities` field), from
    its data: `NeuronCore-v3 (trn2)`."""
    since = Capabilities.since(capability)
    return f"NeuronCore-v{since} ({next(t.name for t in TARGETS.values() if t.nc_version == since)})"


__all__ = ["HwConfig", "MemorySpec", "TileLimits", "TARGETS", "DEFAULT_TARGET", "TARGET_ENV", "get_target", "first_with",
           "TRN1", "TRN2", "TRN3"]

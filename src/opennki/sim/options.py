"""Simulator layer: the options that change how a kernel runs, as one frozen record.

Environment variables only supply defaults (read when a `SimOptions` is created, never at import).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from opennki.releases import env_api_version, env_compiler_frontend


UNINITIALIZED_MODES = ("nan", "raise", "zero")


def _env_flag(name: str, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True, kw_only=True)
class SimOptions:
    """How the simulator runs a kernel.

    Fields:
        target: NeuronCore target name (`trn1`/`trn2`/`trn3` or NKI's aliases); None means
            `$NEURON_PLATFORM_TARGET_OVERRIDE`, else trn3.
        precise_fp: store bf16/fp16/fp8 tensors in their real formats so every write rounds as hardware
            does (default; `NKI_PRECISE_FP=0` stores them as fp32, to tell algorithm bugs from rounding).
        shape_only: check and account every instruction without computing (no data is allocated); used for
            cost estimates and framework shape inference.
        hardware_strict: raise for operations that NKI's simulator accepts but hardware rejects (default
            from `OPENNKI_HARDWARE_STRICT`).
        seed: seed of the random generator behind `rand`, `dropout` and `rng` (`random_seed` reseeds it).
        detect_races: attach the race and hazard checker (listeners/races.py): loop-carried dependencies
            between `affine_range` iterations and races between SPMD programs / LNC cores are reported at
            the end of the launch, the first one raised as a RaceError (default from
            `OPENNKI_DETECT_RACES`). Off, nothing is attached and nothing costs.
        uninitialized: what a read of never-written memory gives: "nan" (fresh memory holds NaN / 4, the
            default), "raise" (every element is tracked; the first read of one never written raises an
            UninitializedReadError naming the tensor, the element, the reading line and the line that
            created the tensor; masked-off elements are not reads) or "zero" (fresh memory holds zeros).
            Default from `OPENNKI_UNINITIALIZED`.
        api_version: the public NKI release whose rules apply ("0.6", "2.24"; see opennki.releases); None
            (default, or `$OPENNKI_API_VERSION`) accepts every release, old forms with a DeprecationWarning.
        compiler_frontend: NKI 0.7's specialization frontend, `$NKI_COMPILER_FRONTEND`: "tracer" (default,
            Python tracing) or "custom" (the deprecated 0.6 parser: 0.6 rules for the new generation, so
            dynamic loops still run and NkiScalar APIs are rejected).
        progress: a progress line on stderr for launches running longer than 2 s (sim/progress.py): None
            (default) when stderr is a terminal, True always, False never (default from `OPENNKI_PROGRESS`).
    """

    target: str | None = None
    precise_fp: bool = field(default_factory=lambda: _env_flag("NKI_PRECISE_FP", True))
    shape_only: bool = False
    hardware_strict: bool = field(default_factory=lambda: _env_flag("OPENNKI_HARDWARE_STRICT", False))
    seed: int = 0
    api_version: str | None = field(default_factory=env_api_version)
    compiler_frontend: str = field(default_factory=env_compiler_frontend)
    detect_races: bool = field(default_factory=lambda: _env_flag("OPENNKI_DETECT_RACES", False))
    uninitialized: str = field(default_factory=lambda: os.environ.get("OPENNKI_UNINITIALIZED") or "nan")
    progress: bool | None = field(default_factory=lambda: _env_flag("OPENNKI_PROGRESS", None))

    def __post_init__(self):
        if self.uninitialized not in UNINITIALIZED_MODES:
            raise ValueError(f"SimOptions.uninitialized must be one of {UNINITIALIZED_MODES}, "
                             f"got {self.uninitialized!r}")

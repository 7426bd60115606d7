"""Simulator layer: the options that change how a kernel runs, as one frozen record.

Environment variables only supply defaults: a field made with `from_environment(name)` takes the setting
`name` of `opennki.environment` (read when a `SimOptions` is created, never at import). To add an option,
add a field here (and, if a variable sets its default, a field of `opennki.environment.Environment`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opennki.environment import setting

UNINITIALIZED_MODES = ("nan", "raise", "zero")


def from_environment(name: str):
    """A field whose default is the environment setting `name` (opennki.environment), read at creation."""
    return field(default_factory=lambda: setting(name), metadata={"setting": name})


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
        interleave_seed: the cores of a launch over two physical cores (LNC=2, legacy `nl.nc(2)` grids;
            each core's programs one after another) run interleaved, one instruction at a time, as on
            hardware they run at once:
            before each instruction a random generator seeded with this picks which core runs next, so a race
            between the cores shows its effect as hardware could see it, reproducibly per seed (default from
            `OPENNKI_INTERLEAVE_SEED`, else 0). Shape-only runs exchange no data and keep cores in turn.
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
    precise_fp: bool = from_environment("precise_fp")
    shape_only: bool = False
    hardware_strict: bool = from_environment("hardware_strict")
    seed: int = 0
    api_version: str | None = from_environment("api_version")
    compiler_frontend: str = from_environment("compiler_frontend")
    detect_races: bool = from_environment("detect_races")
    interleave_seed: int = from_environment("interleave_seed")
    uninitialized: str = from_environment("uninitialized")
    progress: bool | None = from_environment("progress")

    def __post_init__(self):
        if self.uninitialized not in UNINITIALIZED_MODES:
            raise ValueError(f"SimOptions.uninitialized must be one of {UNINITIALIZED_MODES}, "
                             f"got {self.uninitialized!r}")

"""Settings: every environment variable opennki reads, as the documented fields of one record.

Imports nothing of opennki, so every layer may read it (errors and hw included). `environment()` reads all
the variables when asked and `setting(name)` reads one field: never at import and never cached, so a test
or a tool may change a variable between two launches. One parser reads every variable, by the kind its
field declares:
  * flag: on unless the variable is one of 0 / false / no / off (any case); unset or empty gives the
    field's default;
  * text: the stripped value (`lower`: also lower-cased); unset or empty gives the default;
  * number: a non-negative integer; unset, empty or anything else gives the default;
  * words: the value split on whitespace.
Options a call can also give (`SimOptions` fields, `jit(...)` keywords) take their defaults from here
(`SimOptions` names the field it reads). To add a setting, add one field with `_variable(...)`. The one
writer, `put(name, value)`, sets a setting's variable to the text the parser reads back as `value` (the
command line sets the target so for the script it runs and the processes that script starts).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

FALSE_WORDS = ("0", "false", "no", "off")


def _variable(name: str, kind: str, default, doc: str):
    return field(default=default, metadata={"variable": name, "kind": kind, "doc": doc})


@dataclass(frozen=True)
class Environment:
    """The settings opennki reads from the environment (module docstring); each field names its variable."""

    target: str | None = _variable(
        "NEURON_PLATFORM_TARGET_OVERRIDE", "text", None,
        "NeuronCore target (trn1 / trn2 / trn3 or NKI's aliases) when a kernel names none; default trn3")
    simulator: bool = _variable(
        "NKI_SIMULATOR", "flag", False,
        "run every call that would need a Neuron device (auto, baremetal, torchxla, jax) on the simulator")
    lnc: int | None = _variable(
        "NEURON_LOGICAL_NC_CONFIG", "number", None,
        "the logical NeuronCore degree: a new-generation launch without brackets uses it (NKI 0.7), and the "
        "graph compiler's degree when NEURON_CC_FLAGS has no --lnc")
    compiler_flags: tuple[str, ...] = _variable(
        "NEURON_CC_FLAGS", "words", (),
        "the graph compiler's flags; only --lnc=N / --lnc N is read (a kernel's LNC must equal it)")
    dma_transpose_as_pe_transpose: bool = _variable(
        "NKI_DMA_TRANSPOSE_AS_PE_TRANSPOSE", "flag", False,
        "DMA transposes run on the PE array, which reserves PSUM bank 7 (trn2+): nl.tile_size.psum_num_banks "
        "is one less")
    precise_fp: bool = _variable(
        "NKI_PRECISE_FP", "flag", True,
        "store bf16 / fp16 / fp8 tensors in their real formats (off: as fp32) (SimOptions.precise_fp)")
    hardware_strict: bool = _variable(
        "OPENNKI_HARDWARE_STRICT", "flag", False,
        "raise for what NKI's simulator accepts but hardware rejects (SimOptions.hardware_strict)")
    detect_races: bool = _variable(
        "OPENNKI_DETECT_RACES", "flag", False,
        "attach the race and hazard checker to every launch (SimOptions.detect_races)")
    interleave_seed: int = _variable(
        "OPENNKI_INTERLEAVE_SEED", "number", 0,
        "seed of the order in which the cores of an LNC=2 launch take turns, instruction by instruction "
        "(SimOptions.interleave_seed)")
    uninitialized: str = _variable(
        "OPENNKI_UNINITIALIZED", "text", "nan",
        "what a read of never-written memory gives: nan, raise or zero (SimOptions.uninitialized)")
    api_version: str | None = _variable(
        "OPENNKI_API_VERSION", "text", None,
        "the public NKI release whose rules apply, e.g. 0.6 or 2.24; unset accepts every release "
        "(SimOptions.api_version)")
    compiler_frontend: str = _variable(
        "NKI_COMPILER_FRONTEND", "lower", "tracer",
        "NKI 0.7's specialization frontend: tracer or custom (the 0.6 parser) (SimOptions.compiler_frontend)")
    progress: bool | None = _variable(
        "OPENNKI_PROGRESS", "flag", None,
        "a progress line on stderr for long launches: unset decides by whether stderr is a terminal "
        "(SimOptions.progress)")
    full_traceback: bool = _variable(
        "OPENNKI_FULL_TRACEBACK", "flag", False,
        "keep opennki's own frames in the tracebacks of kernel errors")
    strict_platform: bool = _variable(
        "OPENNKI_STRICT_PLATFORM", "flag", False,
        "a kernel inside jax.jit on a platform other than neuron is an error, as in NKI (unless NKI_SIMULATOR)")
    jax_no_trace_cache: bool = _variable(
        "NKI_DONT_CACHE_TRACE_FOR_JAX_LOWERING", "flag", False,
        "trace the kernel again for every JAX lowering instead of reusing the traced program")


FIELDS = {f.name: f for f in fields(Environment)}
VARIABLES = {name: f.metadata["variable"] for name, f in FIELDS.items()}


def parse(name: str, raw: str | None):
    """The value of setting `name` for the variable text `raw` (None: unset), by the kind of its field."""
    f = FIELDS[name]
    kind, text = f.metadata["kind"], (raw or "").strip()
    if kind == "words":
        return tuple(text.split())
    if not text:
        return f.default
    if kind == "flag":
        return text.lower() not in FALSE_WORDS
    if kind == "number":
        return int(text) if text.isdigit() else f.default
    return text.lower() if kind == "lower" else text


def setting(name: str, environ=None):
    """One setting, read now from `environ` (default: the process environment)."""
    env = os.environ if environ is None else environ
    return parse(name, env.get(VARIABLES[name]))


def put(name: str, value, environ=None) -> None:
    """Set setting `name` to `value` in `environ` (default: the process environment), written as the text
    `parse` reads back as `value` (a flag as 1 / 0, words joined by spaces); None unsets it."""
    env = os.environ if environ is None else environ
    variable, kind = VARIABLES[name], FIELDS[name].metadata["kind"]
    if value is None:
        env.pop(variable, None)
        return
    if kind == "flag":
        text = "1" if value else "0"
    elif kind == "words":
        text = " ".join(value)
    else:
        text = str(value)
    if parse(name, text) != value:
        raise ValueError(f"{variable} cannot hold {value!r}: it would read back as {parse(name, text)!r}")
    env[variable] = text


def environment(environ=None) -> Environment:
    """Every setting, read now."""
    return Environment(**{name: setting(name, environ) for name in FIELDS})


__all__ = ["Environment", "environment", "setting", "parse", "put", "VARIABLES", "FALSE_WORDS"]

"""API releases: which public NKI release's rules a kernel is held to, and the forms releases changed.

Imports errors only, so every layer (front doors, language, isa adapters, the compiler-rule lint) can ask.

Releases (docs/compatibility.md has the sources):
  * legacy generation (`neuronxcc.nki`): SDK 2.20 ... 2.26 (NKI "0.1");
  * new generation (`nki`): NKI 0.2 (SDK 2.27/2.28), 0.3 (2.29), 0.4 (2.30), 0.5 (2.31), 0.6 (2.32),
    0.7 (2.33).

The level is `SimOptions.api_version` (`jit(api_version=...)`, `simulate(kernel, api_version=...)`, or
`$OPENNKI_API_VERSION`): None, the default, means *accept every release*. A form that some release changed
(`Change`) then keeps working as that older release defined it, with a `DeprecationWarning` naming the
release that changed it and the replacement. An explicit level applies that release's rule exactly: a form
removed at or before it raises the error that release raises (with the migration hint), a form only
deprecated at it warns as NKI does, and a form it still had runs silently. `hardware_strict` without an
explicit level holds the kernel to the latest release of its generation (`LATEST`).

`level_of(options, generation)` is the small, importable answer for rule checkers ("which release's rules
apply?"); `accepts_every_release(options)` says whether old forms are tolerated.
"""

from __future__ import annotations

import enum
import warnings
from dataclasses import dataclass, field

from opennki.environment import VARIABLES
from opennki.errors import KernelError

API_VERSION_ENV = VARIABLES["api_version"]
FRONTEND_ENV = VARIABLES["compiler_frontend"]
CUSTOM_FRONTEND = "custom"      # NKI 0.7: the deprecated 0.6 parser frontend ("tracer" is the default)


class Generation(enum.Enum):
    """Which NKI API generation a kernel was decorated with (it decides grid, output and language rules)."""

    LEGACY = "neuronxcc.nki"
    NEW = "nki"


@dataclass(frozen=True, order=True)
class Release:
    """One public NKI release: `number` orders releases within a generation.

    Fields:
        number: (major, minor) of NKI (new generation, (0, 7)) or of the Neuron SDK (legacy, (2, 26)).
        generation: the API generation (`Generation`).
        sdk: the Neuron SDK version(s) that shipped it ("2.33", "2.27/2.28").
    """

    number: tuple
    generation: Generation = field(compare=False)
    sdk: str = field(compare=False)

    @property
    def name(self) -> str:
        return ".".join(str(p) for p in self.number)

    def label(self) -> str:
        """How NKI's documents name it: 'NKI 0.7 (Neuron SDK 2.33)' / 'Neuron SDK 2.26'."""
        if self.generation is Generation.NEW:
            return f"NKI {self.name} (Neuron SDK {self.sdk})"
        return f"Neuron SDK {self.sdk}"

    def __str__(self) -> str:
        return self.label()


NEW_RELEASES = tuple(Release((0, minor), Generation.NEW, sdk) for minor, sdk in
                     ((2, "2.27/2.28"), (3, "2.29"), (4, "2.30"), (5, "2.31"), (6, "2.32"), (7, "2.33")))
LEGACY_RELEASES = tuple(Release((2, minor), Generation.LEGACY, f"2.{minor}") for minor in range(20, 27))
LATEST = {Generation.NEW: NEW_RELEASES[-1], Generation.LEGACY: LEGACY_RELEASES[-1]}


class ReleaseError(KernelError):
    """A form the kernel's API release no longer accepts (the error that release raises)."""


class ReleaseTypeError(ReleaseError, TypeError):
    """A call in an old release's signature (a keyword it had, its positional order) that the kernel's release
    rejects as Python does: a TypeError ("unexpected keyword argument")."""


def release(version, generation: Generation = Generation.NEW) -> Release:
    """The Release named `version` ("0.6", "0.6.0", (0, 6), "2.24", or a Release) in `generation`."""
    if isinstance(version, Release):
        return version
    releases = NEW_RELEASES if generation is Generation.NEW else LEGACY_RELEASES
    if isinstance(version, str):
        parts = version.strip().split(".")
    elif isinstance(version, tuple):
        parts = list(version)
    else:
        parts = [version]
    try:
        number = tuple(int(p) for p in parts[:2])
        if len(parts) > 2 and any(int(p) != 0 for p in parts[2:]) and generation is Generation.NEW:
            raise ValueError
    except (TypeError, ValueError):
        number = None
    for r in releases:
        if r.number == number:
            return r
    raise KernelError(f"api_version {version!r} is not a public release of the {generation.name.lower()} generation",
                      expected=[r.name for r in releases], got=version)


def requested_version(options) -> str | None:
    """The explicit API level of `options` (None: accept every release)."""
    return getattr(options, "api_version", None)


def accepts_every_release(options) -> bool:
    """Old forms of every release are tolerated (with a DeprecationWarning): no explicit level and not
    hardware-strict."""
    return requested_version(options) is None and not getattr(options, "hardware_strict", False)


def level_of(options, generation: Generation = Generation.NEW) -> Release:
    """The release whose rules apply: the explicit `api_version`, else the latest of the generation. The
    custom frontend (`NKI_COMPILER_FRONTEND=custom`) keeps the new generation at NKI 0.6's rules."""
    generation = generation or Generation.NEW
    version = requested_version(options)
    level = LATEST[generation] if version is None else release(version, generation)
    if generation is Generation.NEW and uses_custom_frontend(options):
        level = min(level, release("0.6"))
    return level


def uses_custom_frontend(options) -> bool:
    return getattr(options, "compiler_frontend", "tracer") == CUSTOM_FRONTEND


@dataclass(frozen=True)
class Change:
    """A form some release deprecated or removed, and what replaced it.

    Fields:
        form: the old form, as users write it (`nki.jit(platform_target=...)`).
        replacement: what to write instead.
        removed_in: the release ("0.3") from which the form is an error (None: only deprecated so far).
        deprecated_in: the release that started warning about it (None: removed without a deprecation).
        restored_in: the release from which the form is legal again (NKI 0.7's tracing accepts the Python its
            parser refused), or None.
        generation: the API generation (`Generation`).
        code: the NKI error code of the removal, when documented.
        source: the document stating the change (for docs/compatibility.md and the messages).
        error: the class of the removal's error (ReleaseTypeError for a signature change).
    """

    form: str
    replacement: str
    removed_in: str | None = None
    deprecated_in: str | None = None
    restored_in: str | None = None
    generation: Generation = Generation.NEW
    code: str | None = None
    source: str = ""
    error: type = ReleaseError

    def changed_in(self) -> Release:
        return release(self.removed_in or self.deprecated_in, self.generation)

    def message(self, verb: str, at: Release) -> str:
        accepted = "; accepted because every release is accepted by default" if verb == "removed" else ""
        return f"{self.form} is {verb} in {at.label()}{accepted}; use {self.replacement}"

    def apply(self, options, *, location=None, instruction=None) -> None:
        """Warn or raise for one use of the old form under `options` (module docstring). Returns when the
        old form may go on."""
        if self.restored_in is not None:
            level = level_of(options, self.generation)
            if level >= release(self.restored_in, self.generation):
                return                  # legal again from restored_in (the latest release of the generation too)

        if accepts_every_release(options) and not (uses_custom_frontend(options) and self.generation is Generation.NEW):
            _warn(self.message("deprecated" if self.removed_in is None else "removed", self.changed_in()), location)
            return
        level = level_of(options, self.generation)
        if self.removed_in is not None and level >= release(self.removed_in, self.generation):
            removed = release(self.removed_in, self.generation)
            raise self.error(f"{self.form} is not accepted by {level.label()} (removed in {removed.label()})",
                               code=self.code, hint=f"use {self.replacement}", location=location,
                               instruction=instruction, got=self.form, expected=self.replacement)
        if self.deprecated_in is not None and level >= release(self.deprecated_in, self.generation):
            _warn(self.message("deprecated", release(self.deprecated_in, self.generation)), location)


def warn_custom_frontend(options, location=None) -> None:
    """NKI 0.7 deprecates its parser frontend (`NKI_COMPILER_FRONTEND=custom`), to be removed "in the next Neuron
    release" (docs `latest/about-neuron/announcements/neuron2.x/announce-nki-specialization-change`): a
    DeprecationWarning for every new-generation kernel run with it. The frontend itself still holds the kernel to
    NKI 0.6's rules (`level_of`)."""
    if uses_custom_frontend(options):
        _warn(f"{FRONTEND_ENV}={CUSTOM_FRONTEND} (the parser frontend) is deprecated in {LATEST[Generation.NEW].label()} "
              "and removed in the next release; use the tracer frontend (unset the variable) and migrate dynamic "
              "loops to nl.fori_loop / nl.while_loop", location)


def _warn(text: str, location=None) -> None:
    from opennki.errors import user_location
    loc = location if location is not None else user_location(3)
    where = f" ({loc}: {loc.source})" if loc is not None else ""
    warnings.warn(text + where, DeprecationWarning, stacklevel=4)


def added_in(version: str, api: str, options, generation: Generation = Generation.NEW) -> None:
    """`api` first appeared in `version`: under an explicit earlier level it does not exist."""
    if requested_version(options) is None:
        return
    level = level_of(options, generation)
    first = release(version, generation)
    if level < first:
        raise ReleaseError(f"{api} does not exist in {level.label()}; it was added in {first.label()}",
                           instruction=api, hint=f"use api_version={first.name!r} or later")


def keyword_added_in(version: str, api: str, keyword: str, options, replacement: str,
                     generation: Generation = Generation.NEW) -> None:
    """`api`'s keyword `keyword` first appeared in `version`: under an explicit earlier level the call is the
    TypeError that release's signature gives ("unexpected keyword argument"), naming the release that added the
    keyword and what to write instead (`replacement`). Without an explicit level every release is accepted."""
    if requested_version(options) is None:
        return
    level = level_of(options, generation)
    first = release(version, generation)
    if level < first:
        raise ReleaseTypeError(f"{api}() got an unexpected keyword argument {keyword!r} in {level.label()}; "
                               f"{keyword}= was added in {first.label()}", instruction=api, got=keyword,
                               hint=f"{replacement}, or use api_version={first.name!r} or later")


__all__ = ["Generation", "uses_custom_frontend", "FRONTEND_ENV", "Release", "NEW_RELEASES", "LEGACY_RELEASES", "LATEST", "ReleaseError", "ReleaseTypeError", "Change", "release",
           "level_of", "accepts_every_release", "added_in", "keyword_added_in", "API_VERSION_ENV", "warn_custom_frontend"]

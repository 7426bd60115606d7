"""Language layer: legacy language rules checked on every instruction: masks must be compile-time affine
predicates, and tensors created inside a loop stay inside it.

Imports sim (Observer, PROGRAM_SETUP) and machine (index, tensor). Installed for every program; both rules
only concern the legacy generation's `mask=` and loops, so new-generation kernels never trigger them.

* `err_unsupported_expression_in_mask`: a `mask=` must be a comparison of affine index expressions
  (`nl.arange`, loop variables, `program_id`, joined with `&`); a predicate built from `%` / `//`
  (`NonAffineIndex`) or a run-time tile is rejected (spec/language.md §8.4).
* `err_local_variable_used_out_of_scope`: a tensor created inside an `affine_range` / `sequential_range`
  loop body is local to that body (spec/language.md §8.9); using it after the loop finished is an error.
  `core.alloc` records the loops running when a tensor is created (`record_scope`). Python `if` blocks,
  which NKI scopes too, leave no trace in an eager run and are not checked; nor are `static_range` loops,
  which NKI unrolls while tracing. The same rule tells liveness: when SBUF or PSUM is full, the tensors of
  finished loop bodies still bound to Python variables are released (`LanguageRules.reclaim`).
"""

from __future__ import annotations

import weakref

from opennki.errors import KernelError
from opennki.machine.index import Predicate
from opennki.machine.memory import Memory
from opennki.machine.tensor import TensorView
from opennki.sim.program import PROGRAM_SETUP, Observer

STATE = "opennki._src.rules"


class LanguageRules(Observer):
    """The per-program checker of the module's rules. A tensor created in a scoped loop refers to that loop's
    frame (`Storage.scope`, set by `record_scope`), which says when the loop has finished: an operand whose
    loop has finished is used out of its scope. So the rules keep nothing per tensor (no table to prune), a
    loop's end is one flag, and the check per operand is one attribute read, made only once some scoped loop
    of the program has finished (`closed`)."""

    # on the lean path (no `mask=`, or a bool one) `check` only looks for an operand out of its scope, which the
    # lean path finds itself (Observer.lean_scopes)
    lean_scopes = True

    def __init__(self, observers):
        self.closed = False             # some scoped loop of the program has finished
        # until then `check` does nothing but reject a non-affine `mask=` (Observer.lean_idle)
        self.lean_idle = True
        # the program's (Observers.refresh once closed); weakly, as the observers hold this checker: a cycle
        # would keep both, and all the program's observers hold, until a full garbage collection
        self._observers = weakref.ref(observers)

    def loop_finished(self, frame) -> None:
        """The scoped loop `frame` (control.LoopFrame) has finished: its tensors that still live are out of scope
        from now on."""
        frame.finished = True
        if not self.closed:
            self.closed = True
            self.lean_idle = False
            self._observers().refresh()

    def check(self, prog, instr) -> None:
        mask = instr.mask
        if mask is not None:
            if isinstance(mask, TensorView) or (isinstance(mask, Predicate) and not mask.affine):
                raise KernelError("a mask must be a compile-time comparison of affine index expressions "
                                  "(nl.arange / loop variables / program_id, joined with &)",
                                  code="err_unsupported_expression_in_mask",
                                  hint="% and // or run-time values cannot be masks; restructure the index or "
                                       "use nl.where")
        if not self.closed:
            return
        for _, view, _ in instr._operands or instr.operands():
            scope = view.storage.scope
            if scope is not None and scope.finished:
                self.out_of_scope(view.storage)

    def out_of_scope(self, st) -> None:
        """The operand `st` (a Storage) is used after its scoped loop finished (the lean path finds it itself:
        `lean_scopes`)."""
        scope = st.scope
        line = scope.location.lineno if scope.location is not None else "?"
        raise KernelError(f"Local variable '{st.name}' is referenced outside of its parent scope: it "
                          f"was created inside the loop at line {line}, which has finished",
                          code="err_local_variable_used_out_of_scope",
                          hint="declare the tensor before the loop and assign it with t[...] = ...")

    def reclaim(self, prog, kind) -> bool:
        """Tensors created in a loop body that has finished are dead (using them is the error above), even
        while a Python variable still holds them: release their memory, as a compiler's liveness would."""
        if not self.closed:
            return False
        freed = False
        for st in prog.memory.placed(kind):
            scope = st.scope
            if scope is not None and scope.finished:
                Memory.release_early(st)
                freed = True
        return freed


def rules(prog) -> LanguageRules:
    return prog.state[STATE]


def record_scope(prog, view) -> None:
    """Remember that the tensor `view` was created inside the innermost running scoped loop; made outside every
    scoped loop, it has no scope, even if it is a result tile reused at its call site (Program.spare) whose
    first making was inside one (a helper called in a loop, then once more after it)."""
    storage = view.storage
    for frame in reversed(prog.loops):
        if frame.is_scope:
            storage.scope = frame
            return
    storage.scope = None


def _install(prog) -> None:
    checker = prog.state[STATE] = LanguageRules(prog.observers)
    prog.observers.append(checker)


PROGRAM_SETUP.append(_install)

__all__ = ["LanguageRules", "record_scope"]

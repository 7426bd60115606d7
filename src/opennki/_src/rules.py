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
_PRUNE_MIN = 1024          # scope entries kept before the first pruning of dead tensors' entries


class LanguageRules(Observer):
    """The per-program checker of the module's rules. `scopes` holds an entry per live tensor created in a
    scoped loop; entries of tensors that died are dropped in batches (`remember`), so a long kernel keeps
    as many entries as it has live tensors, not one per tensor it ever made."""

    def __init__(self):
        # storage id -> (loop id, lineno, name, weak reference to the storage)
        self.scopes: dict[int, tuple[int, int, object, weakref.ref]] = {}
        self.prune_at = _PRUNE_MIN

    def remember(self, storage, loop_id: int, line, name) -> None:
        scopes = self.scopes
        scopes[storage.id] = (loop_id, line, name, weakref.ref(storage))
        if len(scopes) >= self.prune_at:
            self.scopes = scopes = {sid: e for sid, e in scopes.items() if e[3]() is not None}
            self.prune_at = max(_PRUNE_MIN, 2 * len(scopes))    # amortised: each entry is looked at O(1) times

    def check(self, prog, instr) -> None:
        mask = instr.mask
        if mask is not None:
            if isinstance(mask, TensorView) or (isinstance(mask, Predicate) and not mask.affine):
                raise KernelError("a mask must be a compile-time comparison of affine index expressions "
                                  "(nl.arange / loop variables / program_id, joined with &)",
                                  code="err_unsupported_expression_in_mask",
                                  hint="% and // or run-time values cannot be masks; restructure the index or "
                                       "use nl.where")
        scopes = self.scopes
        if not scopes:
            return
        for _, view, _ in instr._operands or instr.operands():
            scope = scopes.get(view.storage.id)
            if scope is None:
                continue
            for frame in reversed(prog.loops):      # innermost first: where most operands were made
                if frame.loop_id == scope[0]:
                    break
            else:
                raise KernelError(f"Local variable '{scope[2]}' is referenced outside of its parent scope: it "
                                  f"was created inside the loop at line {scope[1]}, which has finished",
                                  code="err_local_variable_used_out_of_scope",
                                  hint="declare the tensor before the loop and assign it with t[...] = ...")

    def reclaim(self, prog, kind) -> bool:
        """Tensors created in a loop body that has finished are dead (using them is the error above), even
        while a Python variable still holds them: release their memory, as a compiler's liveness would."""
        if not self.scopes:
            return False
        running = {frame.loop_id for frame in prog.loops}
        freed = False
        for st in prog.memory.placed(kind):
            scope = self.scopes.get(st.id)
            if scope is not None and scope[0] not in running:
                Memory.release_early(st)
                freed = True
        return freed


def rules(prog) -> LanguageRules:
    return prog.state[STATE]


def record_scope(prog, view) -> None:
    """Remember that the tensor `view` was created inside the innermost running scoped loop; made outside every
    scoped loop, it has no scope, even if it is a result tile reused at its call site (Program.spare) whose
    first making was inside one (a helper called in a loop, then once more after it)."""
    checker = prog.state[STATE]
    storage = view.storage
    for frame in reversed(prog.loops):
        if frame.is_scope:
            known = checker.scopes.get(storage.id)
            if known is not None and known[0] == frame.loop_id and known[3]() is storage:
                return                  # a result tile reused in the same loop (Program.spare): the same entry
            line = frame.location.lineno if frame.location is not None else "?"
            checker.remember(storage, frame.loop_id, line, view.name)
            return
    checker.scopes.pop(storage.id, None)


def _install(prog) -> None:
    checker = prog.state[STATE] = LanguageRules()
    prog.observers.append(checker)


PROGRAM_SETUP.append(_install)

__all__ = ["LanguageRules", "record_scope"]

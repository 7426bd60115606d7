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
    as many entries as it has live tensors, not one per tensor it ever made. When a loop finishes, the entries
    of its still-live tensors move to `closed` (`loop_finished`): an operand found there is used out of its
    scope. A tensor was made inside its loop, so "its loop is not running" is "its loop has finished", and the
    check per operand is one look-up in `closed` (empty in most programs) instead of a walk of the running
    loops."""

    def __init__(self):
        # Entries are keyed by the storage object's id(), not its `Storage.id`, which a result tile reused at its
        # call site renews (Program.new_tensor); every look-up compares the entry's storage with the one asked
        # about, so an id() of a dead storage given to a new one finds no entry of it.
        # id(storage) -> (loop id, lineno, name, weak reference to the storage)
        self.scopes: dict[int, tuple[int, int, object, weakref.ref]] = {}
        self.prune_at = _PRUNE_MIN
        self.by_loop: dict[int, list[tuple[int, tuple]]] = {}     # loop id -> (storage id, entry) made in it
        self.closed: dict[int, tuple[int, int, object, weakref.ref]] = {}   # entries of finished loops
        self.prune_closed_at = _PRUNE_MIN

    def remember(self, storage, loop_id: int, line, name) -> None:
        scopes = self.scopes
        sid = id(storage)
        entry = scopes[sid] = (loop_id, line, name, weakref.ref(storage))
        made = self.by_loop.get(loop_id)
        if made is None:
            self.by_loop[loop_id] = [(sid, entry)]
        else:
            made.append((sid, entry))
        if self.closed:
            self.closed.pop(sid, None)              # a result tile reused in another loop (Program.spare)
        if len(scopes) >= self.prune_at:
            self.scopes = scopes = {sid: e for sid, e in scopes.items() if e[3]() is not None}
            self.prune_at = max(_PRUNE_MIN, 2 * len(scopes))    # amortised: each entry is looked at O(1) times

    def forget(self, storage) -> None:
        """`storage` (a reused result tile) was made again outside every scoped loop: it has no scope."""
        sid = id(storage)
        self.scopes.pop(sid, None)
        if self.closed:
            self.closed.pop(sid, None)

    def loop_finished(self, loop_id: int) -> None:
        """The scoped loop `loop_id` has finished: its tensors that still live and still belong to it are out
        of scope from now on."""
        made = self.by_loop.pop(loop_id, None)
        if not made:
            return
        scopes, closed = self.scopes, self.closed
        for sid, entry in made:
            if entry[3]() is not None and scopes.get(sid) is entry:
                closed[sid] = entry
        if len(closed) >= self.prune_closed_at:
            self.closed = closed = {sid: e for sid, e in closed.items() if e[3]() is not None}
            self.prune_closed_at = max(_PRUNE_MIN, 2 * len(closed))

    def check(self, prog, instr) -> None:
        mask = instr.mask
        if mask is not None:
            if isinstance(mask, TensorView) or (isinstance(mask, Predicate) and not mask.affine):
                raise KernelError("a mask must be a compile-time comparison of affine index expressions "
                                  "(nl.arange / loop variables / program_id, joined with &)",
                                  code="err_unsupported_expression_in_mask",
                                  hint="% and // or run-time values cannot be masks; restructure the index or "
                                       "use nl.where")
        closed = self.closed
        if not closed:
            return
        for _, view, _ in instr._operands or instr.operands():
            st = view.storage
            scope = closed.get(id(st))
            if scope is not None and scope[3]() is st:
                raise KernelError(f"Local variable '{scope[2]}' is referenced outside of its parent scope: it "
                                  f"was created inside the loop at line {scope[1]}, which has finished",
                                  code="err_local_variable_used_out_of_scope",
                                  hint="declare the tensor before the loop and assign it with t[...] = ...")

    def reclaim(self, prog, kind) -> bool:
        """Tensors created in a loop body that has finished are dead (using them is the error above), even
        while a Python variable still holds them: release their memory, as a compiler's liveness would."""
        closed = self.closed
        if not closed:
            return False
        freed = False
        for st in prog.memory.placed(kind):
            scope = closed.get(id(st))
            if scope is not None and scope[3]() is st:
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
            known = checker.scopes.get(id(storage))
            if known is not None and known[0] == frame.loop_id and known[3]() is storage:
                return                  # a result tile reused in the same loop (Program.spare): the same entry
            line = frame.location.lineno if frame.location is not None else "?"
            checker.remember(storage, frame.loop_id, line, view.name)
            return
    checker.forget(storage)


def _install(prog) -> None:
    checker = prog.state[STATE] = LanguageRules()
    prog.observers.append(checker)


PROGRAM_SETUP.append(_install)

__all__ = ["LanguageRules", "record_scope"]

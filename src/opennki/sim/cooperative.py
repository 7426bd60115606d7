"""Simulator layer: the SPMD programs of one launch running as cooperating threads (for collectives).

Imports errors and events only (it drives `Simulator.run_program`). Programs normally run one after the other. A
collective such as the legacy `nl.all_reduce` needs a value from every program of its group at once, so the
first collective call switches the launch to cooperation: the programs not started yet are adopted and each
gets its own thread. Exactly one program runs at any time: a baton passes between them in grid order, so
execution stays deterministic, the events of a program keep their order, and no simulator state needs locks.

A program that must wait (`wait(ids, ready, what)`) hands the baton to the next runnable program: one not
started, or one whose wait condition now holds. When no program can run while some wait, the kernel's
programs disagree on their collectives; the waiting programs then fail with a KernelError naming them. An
error in any program aborts the others and is raised to the caller of the launch.

A launch spread over several physical cores (LNC=2, legacy `nl.nc` grids; `LaunchState.interleave` holds a
seeded random generator) cooperates from its first instruction and interleaves the cores instruction by
instruction, as hardware runs them at once: before each instruction (`step`) the generator picks which core's
program goes next, and a waiting program hands the baton to one the generator picks. The programs of one core
run one after another, in grid order, as they do on that core: a core's turn belongs to its first program
that has neither finished nor waits for others (a program waiting at a collective lets the next program of
its core start, so a collective over programs of one core can complete). The order is a function of the seed
alone (`SimOptions.interleave_seed`), so a run is reproducible; a kernel whose cores are ordered by barriers
and sendrecv computes the same values in every order. A program that finishes without making a call its
peers wait at is named with the line of its last instruction.
"""

from __future__ import annotations

import contextvars
import threading

from opennki.errors import KernelError, user_location
from opennki.events import ProgramsMet


class _Aborted(BaseException):
    """Raised inside programs that are stopped because another program failed (never reaches users)."""


class Cooperation:
    """The programs of one launch as cooperating threads (module docstring).

    Args:
        sim: the Simulator running the launch.
        launch: its LaunchState; the programs in `launch.pending_programs` are adopted.
        first: the ids of the program that asked for cooperation (it runs on the launch's own thread).
    """

    def __init__(self, sim, launch, first: tuple[int, ...]):
        self.sim = sim
        self.launch = launch
        self.main_ids = first
        self.main_thread = threading.current_thread()
        self.order = [first] + list(launch.pending_programs)
        launch.pending_programs.clear()
        self.cond = threading.Condition()
        self.running = first
        self.started = {first}
        self.waiting: dict[tuple, tuple] = {}       # ids -> (ready callable, description)
        self.waiting_at: dict[tuple, object] = {}   # ids -> the kernel line it waits at
        self.missing: dict[tuple, object] = {}      # ids waiting at a rendezvous -> () -> members not there yet
        self.finished: set[tuple] = set()
        self.failure: BaseException | None = None
        self.threads: list[threading.Thread] = []
        self.adopted_ran = 0
        self.meetings: dict[object, dict] = {}      # rendezvous key -> {ids: posted value}
        self.interleave = launch.interleave         # random.Random picking the next program, or None
        # interleaved: each core's programs in grid order (a core runs them one after another)
        self.per_core: dict[int, list] = {}
        if self.interleave is not None:
            core_of = launch.cores_of or (lambda ids: 0)
            for ids in self.order:
                self.per_core.setdefault(core_of(ids), []).append(ids)
        self.last_line: dict[tuple, object] = {}    # ids -> kernel line of its last instruction (interleaved)
        self.context = contextvars.copy_context()   # adopted programs run in a copy of the launch's context

    @classmethod
    def of(cls, prog) -> "Cooperation":
        """The launch's cooperation, created (adopting the programs not started yet) on first use."""
        launch = prog.launch
        if launch.cooperation is None:
            prog.machine.stop_deferring()   # threads share HBM: no data step waits (`Machine.defer`)
            launch.cooperation = cls(prog.sim, launch, prog.ids)
        return launch.cooperation

    def has_finished(self, ids) -> bool:
        """True if program `ids` already returned (including programs that ran before cooperation began)."""
        return ids in self.finished or ids not in self.order

    # -- waiting --------------------------------------------------------------------------------------------
    def wait(self, ids, ready, what: str) -> None:
        """Block program `ids` (the one running now) until `ready()` holds, letting the others run."""
        with self.cond:
            if ready():
                return
            self.waiting[ids] = (ready, what)
            self.waiting_at[ids] = user_location()
            try:
                self._pass_baton(ids)
                while self.running != ids and self.failure is None:
                    self.cond.wait()
                self._raise_if_failed()
            finally:
                self.waiting.pop(ids, None)

    def rendezvous(self, ids, key, members, value, what: str) -> dict:
        """Post `value` as program `ids`'s part of the meeting `key`, wait until every program of `members`
        has posted to it, and return {ids: value} of all of them (cross-core exchanges: `nisa.sendrecv`,
        `nisa.core_barrier`). A member that already finished without coming is a KernelError."""
        posts = self.meetings.setdefault(key, {})
        posts[ids] = value
        if all(m in posts for m in members):
            # complete: nobody posts to it again, and the members hold `posts` themselves; keeping it here
            # would keep the posted tiles (sendrecv sources) alive, and their SBUF ranges taken, to the end
            del self.meetings[key]
        gone = [m for m in members if m not in posts and self.has_finished(m)]
        if gone:
            raise self._gone_error(what, gone)
        self.missing[ids] = lambda: [m for m in members if m not in posts]
        try:
            self.wait(ids, lambda: all(m in posts for m in members), what)
        finally:
            self.missing.pop(ids, None)
        if self.sim.listeners:
            self.sim.emit(ProgramsMet(ids, tuple(members), what, user_location()))
        return posts

    def _gone_error(self, what: str, gone, location=None, waiting=None) -> KernelError:
        """Programs `gone` finished without making the call `what` their peers make (program `waiting`
        makes it, at `location`; None: the running program, at its kernel line)."""
        ended = "".join(f"; {list(m)} ended after{_at(self.last_line[m])}" for m in gone if m in self.last_line)
        error = KernelError(f"{what}: programs {[list(m) for m in gone]} finished without making this call "
                            f"(divergent control flow: the programs took different paths around it){ended}",
                            code="err_divergent_control_flow", location=location,
                            hint="every core named in the call must make it, the same number of times")
        waiting = self.running if waiting is None else waiting
        return _with_lines(error, [(waiting, error.location)] + [(m, self.last_line.get(m)) for m in gone])

    def step(self, ids, location) -> None:
        """Interleaved launches: program `ids` is about to run an instruction at `location`; the generator
        picks the runnable program that runs next (module docstring)."""
        with self.cond:
            self.last_line[ids] = location
            choices = self._turns(ids)
            chosen = choices[self.interleave.randrange(len(choices))] if len(choices) > 1 else choices[0]
            if chosen == ids:
                return
            self._hand_to(chosen)
            while self.running != ids and self.failure is None:
                self.cond.wait()
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self.failure is not None:
            if threading.current_thread() is self.main_thread:
                raise self.failure
            raise _Aborted()

    def _runnable(self, ids) -> bool:
        if ids in self.finished:
            return False
        entry = self.waiting.get(ids)
        return entry is None or entry[0]()

    def _turns(self, running=None) -> list:
        """Interleaved launches: the program whose turn it is on each core, in core order: the core's first
        program that has not finished and does not wait for others (`running`, the program asking, counts
        as runnable). Finished programs leave their core's list."""
        turns = []
        for programs in self.per_core.values():
            while programs and programs[0] in self.finished:
                programs.pop(0)
            for ids in programs:
                if ids == running or self._runnable(ids):
                    turns.append(ids)
                    break
        return turns

    def _pass_baton(self, current) -> None:
        """Give the baton to the next runnable program after `current` (caller holds the lock)."""
        n = len(self.order)
        start = self.order.index(current)
        runnable = [ids for ids in (self.order[(start + k) % n] for k in range(1, n + 1)) if self._runnable(ids)]
        if self.interleave is not None:
            turns = set(self._turns())
            runnable = [ids for ids in runnable if ids in turns]
        if runnable:
            pick = self.interleave.randrange(len(runnable)) if self.interleave is not None else 0
            self._hand_to(runnable[pick])
            return
        self.running = None
        if self.waiting and self.failure is None:
            first = min(self.waiting)
            missing = self.missing[first]() if first in self.missing else []
            if missing and all(self.has_finished(m) for m in missing):
                self.failure = self._gone_error(self.waiting[first][1], missing, self.waiting_at.get(first), first)
                self.cond.notify_all()
                return
            blocked = "; ".join(f"{list(i)} waits at {w}{_at(self.waiting_at.get(i))}"
                                for i, (_, w) in sorted(self.waiting.items()))
            done = sorted(i for i in self.order if i in self.finished)
            ended = "".join(f"; {list(i)} ended after{_at(self.last_line[i])}" for i in done if i in self.last_line)
            self.failure = _with_lines(KernelError(
                f"SPMD programs wait for each other forever (divergent control flow): {blocked}; programs "
                f"that already finished: {[list(i) for i in done] or 'none'}{ended}",
                code="err_divergent_control_flow",
                location=self.waiting_at.get(first),
                hint="every program of a collective's group (every core of a barrier or sendrecv) must make "
                     "the same calls in the same order"),
                [(i, self.waiting_at.get(i)) for i in sorted(self.waiting)] + [(i, self.last_line.get(i))
                                                                               for i in done])
        self.cond.notify_all()

    def _hand_to(self, ids) -> None:
        """Let program `ids` run (starting its thread the first time; caller holds the lock)."""
        self.running = ids
        if ids not in self.started:
            self.started.add(ids)
            thread = threading.Thread(target=self.context.copy().run, args=(self._worker, ids), daemon=True,
                                      name=f"opennki-program-{ids}")
            self.threads.append(thread)
            thread.start()
        self.cond.notify_all()

    # -- adopted programs -----------------------------------------------------------------------------------
    def _worker(self, ids) -> None:
        with self.cond:
            while self.running != ids and self.failure is None:
                self.cond.wait()
        try:
            if self.failure is None:
                self.sim.run_program(self.launch, ids)
                self.adopted_ran += 1
        except _Aborted:
            pass
        except BaseException as e:  # noqa: BLE001 - reported to the launch's thread
            with self.cond:
                if self.failure is None:
                    self.failure = e
        finally:
            with self.cond:
                self.finished.add(ids)
                if self.failure is None:
                    self._pass_baton(ids)
                else:
                    self.cond.notify_all()

    def finish(self) -> int:
        """The launch's own program returned: run the adopted programs to the end; returns how many ran."""
        with self.cond:
            self.finished.add(self.main_ids)
            if self.failure is None:
                self._pass_baton(self.main_ids)
            while self.failure is None and len(self.finished) < len(self.order):
                self.cond.wait()
            failure = self.failure
        if failure is not None:
            self._join_all()
            raise failure
        return self.adopted_ran

    def abort(self) -> None:
        """The launch's own program failed: stop every adopted program."""
        with self.cond:
            if self.failure is None:
                self.failure = _Aborted()
            self.cond.notify_all()
        self._join_all()

    def _join_all(self) -> None:
        for thread in self.threads:
            thread.join(timeout=30)



def _with_lines(error: KernelError, where) -> KernelError:
    """The divergence error with `program_lines`: (program ids, kernel line) of each program involved, where
    it waits or where it ended (the simulator turns them into a finding when findings are collected)."""
    error.program_lines = tuple((ids, loc) for ids, loc in where if loc is not None)
    return error


def _at(location) -> str:
    """' (file:line: source)' of a kernel line, for messages naming where each program waits."""
    return f" ({location.filename}:{location.lineno}: {location.source})" if location is not None else ""

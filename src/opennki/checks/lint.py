"""Checks: the NKI compiler's tracing rules as a static lint of a kernel's source (no run needed).

Imports errors, releases and listeners.findings. A CPU run executes a kernel as ordinary Python, so it
accepts Python that NKI's compiler refuses (spec/language.md §8.9, §8.10). `lint(kernel)` parses the
kernel function's source and reports, as `Finding`s of kind LINT with the rule's NKI error code:

Legacy generation (`neuronxcc.nki`, every release):
  * `err_dynamic_control_flow_not_supported`: `if` / `while` / `x if c else y` on a tensor's value;
  * `err_control_flow_condition_depending_on_arange`: a condition on `nl.arange` / `nl.mgrid` indices;
  * `err_ambiguous_tensor_truth_value`: `and` / `or` / `not` on a tensor or index (`mask=` joins with `&`);
  * `err_local_variable_used_out_of_scope`: a tensor created inside a loop body (`affine_range`,
    `sequential_range`, `range`) or inside an `if` on a loop variable, used after that block;
  * `err_shared_hbm_must_in_kernel_level`: a `shared_hbm` tensor created inside a loop or an `if`.
New generation (`nki`):
  * `err_dynamic_control_flow_not_supported`: control flow on a computed tensor value (only registers
    drive control flow at run time: `fori_loop`, `while_loop`);
  * `mixed_generations`: a `neuronxcc.nki` API inside a new-generation kernel (a compile error from 0.4);
  * up to NKI 0.6 (and with the 0.7 custom frontend), the specialization's restricted Python:
    `unsupported_is` (`is` / `is not`), `kernel_signature` (keyword-only parameters, list defaults),
    `unsupported_generator` (generator expressions, `yield` in a helper).
    NKI 0.7 traces kernels as plain Python, so these do not apply at its level (`releases.level_of`).

Helper functions the kernel calls (module-level functions of its own file, followed through their own
calls) are linted with the kernel's generation and release; their findings name the helper's line.

What a name holds is inferred from its assignments in the kernel: the result of an `nl` / `nisa` call
(resolved through the kernel's globals, so any import alias works) is a tensor, `nl.arange` / `nl.mgrid`
give indices, shapes and loop variables are plain values. Kernel parameters are not assumed to be tensors
(they may be scalars), so the lint misses rules broken on parameters rather than report what is legal.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

from opennki.errors import SourceLocation
from opennki.listeners.findings import Finding, FindingKind
from opennki.releases import Generation, level_of, release, uses_custom_frontend

TENSOR, INDEX, DECLARED = "tensor", "index", "declared"    # DECLARED: a new-generation nl.ndarray & co.

# nl / nisa names whose results are not tensors
_PLAIN = frozenset({
    "program_id", "num_programs", "program_ndim", "affine_range", "sequential_range", "static_range", "range",
    "dynamic_range", "fori_loop", "while_loop", "ds", "par_dim", "device_print", "no_reorder", "nc",
    "spmd_dim", "tile_size", "register_alloc", "register_load", "register_move", "register_store",
    "is_sbuf", "is_psum", "is_hbm", "is_on_chip", "loop_reduce", "core_barrier", "sendrecv", "get_nc_version",
    "dma_engine", "engine", "reduce_cmd", "dge_mode", "oob_mode",
})
_INDEX_CALLS = frozenset({"arange"})
_DECLARATIONS = frozenset({"ndarray", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
                           "full_like", "shared_constant", "shared_identity_matrix", "rand", "random"})
_SCOPED_LOOPS = frozenset({"affine_range", "sequential_range", "range"})
_LOOP_CALLS = _SCOPED_LOOPS | {"static_range", "dynamic_range"}
_PLAIN_ATTRS = frozenset({"shape", "dtype", "ndim", "size", "name", "buffer", "itemsize"})

_WHY = {
    "err_dynamic_control_flow_not_supported":
        "the compiler decides control flow when it compiles the kernel, before any tensor has a value; the "
        "simulator knows the value and takes one branch, which hardware cannot",
    "err_control_flow_condition_depending_on_arange":
        "nl.arange / nl.mgrid indices stand for every partition or element at once; a Python condition on "
        "them is decided for one of them only",
    "err_ambiguous_tensor_truth_value":
        "and / or / not ask for one truth value of a whole tile, which has many",
    "err_local_variable_used_out_of_scope":
        "NKI scopes tensors to the block that creates them; the compiler rejects a use after the block, "
        "which the simulator runs as plain Python",
    "err_shared_hbm_must_in_kernel_level":
        "shared_hbm tensors are the kernel's outputs and shared scratch, allocated once per launch",
    "mixed_generations":
        "new-generation kernels are compiled by the nki frontend, which rejects neuronxcc.nki APIs from NKI 0.4",
    "unsupported_is":
        "NKI's specialization (up to 0.6) parses a restricted Python without `is` / `is not`",
    "kernel_signature":
        "from NKI 0.3 kernel parameters cannot be keyword-only and take tuples, not lists",
    "unsupported_generator":
        "NKI's specialization up to 0.6 parses a restricted Python without generators (NKI 0.7's tracing "
        "frontend added them: 'Announcing changes to NKI specialization')",
}
_FIX = {
    "err_dynamic_control_flow_not_supported":
        "compute both sides and select with nl.where / a mask (legacy), or drive the loop with a register "
        "(nl.fori_loop / nl.while_loop)",
    "err_control_flow_condition_depending_on_arange": "express the condition as a mask= predicate",
    "err_ambiguous_tensor_truth_value": "join predicates with & and |, and negate with ~ or a comparison",
    "err_local_variable_used_out_of_scope":
        "declare the tensor before the block (nl.ndarray) and assign into it with t[...] = ...",
    "err_shared_hbm_must_in_kernel_level":
        "create the shared_hbm tensor at the top level of the kernel and write slices of it in the block",
    "mixed_generations": "use the nki.language / nki.isa API of the same name",
    "unsupported_is": "compare with == / != (t != None for a tensor that may be absent)",
    "kernel_signature": "make the parameter positional-or-keyword and pass a tuple",
    "unsupported_generator": "build a list with a comprehension or a for loop instead",
}


def lint(kernel, generation=Generation.LEGACY, options=None) -> list[Finding]:
    """The lint findings of `kernel` (a function, or a jit kernel with `.func` / `.spec.func`) for its
    generation (a `Generation`; None: legacy) at the release `options` selects (module
    docstring), and of the helper functions it calls: module-level Python functions of the kernel's own file
    (plain or jit-decorated), followed through their calls in turn, since NKI's compiler traces them as part
    of the kernel. A helper's findings name its own line and function, and the kernel. A function whose
    source is not available gives no findings."""
    if generation is None:
        generation = Generation.LEGACY
    if not isinstance(generation, Generation):
        raise TypeError(f"lint takes a Generation, got {generation!r}")
    top = _function(kernel)
    findings, seen, todo = [], set(), [top]
    while todo:
        fn = todo.pop(0)
        if fn in seen:
            continue
        seen.add(fn)
        linter = _lint_function(fn, generation, options, top, is_kernel=fn is top)
        if linter is not None:
            findings += linter.findings
            todo += linter.helpers
    return findings


def _lint_function(fn, generation, options, kernel, is_kernel: bool) -> "_Linter | None":
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None:
        return None
    linter = _Linter(fn, generation, options, inspect.getsourcefile(fn) or "<unknown>", start - 1,
                     kernel.__name__)
    linter.run(node, is_kernel)
    return linter


def _function(kernel):
    for attr in ("spec", "func", "__wrapped__"):
        inner = getattr(kernel, attr, None)
        if attr == "spec" and inner is not None:
            inner = getattr(inner, "func", None)
        if inner is not None and inner is not kernel:
            return _function(inner)
    return kernel


def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


class _Linter:
    def __init__(self, fn, generation, options, filename, offset, kernel_name: str):
        self.fn = fn
        self.kernel_name = kernel_name
        self.helpers: list = []             # module-level functions of the same file this one calls
        self.globals = dict(getattr(fn, "__globals__", {}))
        closure = getattr(fn, "__closure__", None) or ()
        for name, cell in zip(getattr(fn.__code__, "co_freevars", ()), closure):
            try:
                self.globals[name] = cell.cell_contents
            except ValueError:
                pass
        self.generation = generation
        self.options = options
        self.filename, self.offset = filename, offset
        self.kinds: dict[str, str | None] = {}
        self.loop_vars: set[str] = set()
        self.findings: list[Finding] = []
        level = level_of(options, Generation.NEW)
        self.restricted = generation is Generation.NEW and (level < release("0.7", Generation.NEW)
                                                   or uses_custom_frontend(options))

    # -- results --------------------------------------------------------------------------------------------
    def report(self, rule: str, node, message: str) -> None:
        line = self.offset + node.lineno
        loc = SourceLocation(self.filename, line, self.fn.__name__)
        if any(f.rule == rule and f.lines[0].lineno == line for f in self.findings):
            return
        self.findings.append(Finding(FindingKind.LINT, rule, message, (loc,), why=_WHY[rule], fix=_FIX[rule],
                                     kernel=self.kernel_name))

    # -- name resolution ------------------------------------------------------------------------------------
    def resolve(self, node):
        """The object an expression of names and attributes refers to in the kernel's globals, or None."""
        if isinstance(node, ast.Name):
            if node.id in self.kinds:
                return None
            return self.globals.get(node.id, getattr(__builtins__, node.id, None)
                                    if not isinstance(__builtins__, dict) else __builtins__.get(node.id))
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return getattr(base, node.attr, None) if base is not None else None
        return None

    @staticmethod
    def api_name(obj) -> tuple[str, str] | None:
        """(module family, name) of an NKI API object: family "nki" for opennki / nki, "neuronxcc" for the
        legacy generation's modules."""
        module = getattr(obj, "__module__", None) or ""
        if isinstance(obj, types.ModuleType):
            module = obj.__name__
        name = getattr(obj, "__name__", None) or type(obj).__name__
        if _in_package(module, "opennki.legacy") or _in_package(module, "neuronxcc"):
            return "neuronxcc", name
        if _in_package(module, "opennki") or _in_package(module, "nki"):
            return "nki", name
        return None     # user code, also in packages merely named like NKI's (`nkilib`, `nki_samples`)

    def kind(self, node) -> str | None:
        """TENSOR, INDEX or None (a plain value or unknown) for an expression."""
        if isinstance(node, ast.Name):
            return self.kinds.get(node.id)
        if isinstance(node, ast.Call):
            obj = self.resolve(node.func)
            api = self.api_name(obj) if obj is not None else None
            if api is not None and not isinstance(obj, (types.ModuleType, type)):
                name = api[1]
                if name in _INDEX_CALLS:
                    return INDEX
                if name in _PLAIN or name.startswith("_"):
                    return None
                if self.generation is Generation.NEW and name in _DECLARATIONS:
                    return DECLARED  # `if t:` / `t != None` are presence tests; `t > 0` is a value
                return TENSOR if callable(obj) else None
            if isinstance(node.func, ast.Attribute) and self.kind(node.func.value) in (TENSOR, DECLARED):
                return None if node.func.attr in _PLAIN_ATTRS else TENSOR
            return None
        if isinstance(node, ast.Subscript):
            obj = self.resolve(node.value)
            if obj is not None and type(obj).__name__ == "_MGrid":
                return INDEX
            return self.kind(node.value)
        if isinstance(node, ast.Attribute):
            inner = self.kind(node.value)
            if inner is None or node.attr in _PLAIN_ATTRS:
                return None
            return TENSOR if inner == DECLARED else inner
        if isinstance(node, (ast.BinOp, ast.Compare, ast.UnaryOp, ast.BoolOp)):
            parts = ([node.left, node.right] if isinstance(node, ast.BinOp) else
                     [node.left, *node.comparators] if isinstance(node, ast.Compare) else
                     [node.operand] if isinstance(node, ast.UnaryOp) else node.values)
            kinds = {self.kind(p) for p in parts}
            if isinstance(node, ast.Compare) and any(isinstance(p, ast.Constant) and p.value is None
                                                      for p in parts):
                return None          # a presence test (`t != None`)
            if isinstance(node, ast.BoolOp):
                kinds.discard(DECLARED)
            return TENSOR if kinds & {TENSOR, DECLARED} else INDEX if INDEX in kinds else None
        return None

    # -- walking --------------------------------------------------------------------------------------------
    def run(self, fn_node, is_kernel: bool = True) -> None:
        if self.restricted and is_kernel:
            self.check_signature(fn_node)
        self.body(fn_node.body, scoped=None)

    def helper(self, call) -> None:
        """Remember the function `call` calls if it is a helper to follow (see `lint`)."""
        obj = self.resolve(call.func)
        if obj is None or self.api_name(obj) is not None and not hasattr(obj, "spec"):   # jit: its function
            return
        obj = _function(obj)
        if not isinstance(obj, types.FunctionType) or obj.__qualname__ != obj.__name__:
            return
        try:
            same_file = inspect.getsourcefile(obj) == self.filename
        except TypeError:
            return
        if same_file and obj is not self.fn and obj not in self.helpers:
            self.helpers.append(obj)

    def check_signature(self, fn_node) -> None:
        args = fn_node.args
        if args.kwonlyargs:
            self.report("kernel_signature", args.kwonlyargs[0],
                        f"kernel parameter '{args.kwonlyargs[0].arg}' is keyword-only")
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            if isinstance(default, ast.List):
                self.report("kernel_signature", default, "a kernel parameter defaults to a list")

    def body(self, statements, scoped) -> None:
        for i, stmt in enumerate(statements):
            self.statement(stmt, scoped)
            created = self.created_in_block(stmt)
            if created:
                self.used_after(created, statements[i + 1:], stmt)

    def statement(self, stmt, scoped) -> None:
        for node in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) else ():
            self.expression_rules(node)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self.assign(stmt, scoped)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            loop = self.loop_kind(stmt.iter)
            for target in ast.walk(stmt.target):
                if isinstance(target, ast.Name):
                    self.kinds[target.id] = None
                    if loop is not None:
                        self.loop_vars.add(target.id)
            self.body(stmt.body, stmt if loop in _SCOPED_LOOPS else scoped)
            self.body(stmt.orelse, scoped)
        elif isinstance(stmt, ast.While):
            self.condition(stmt.test)
            self.body(stmt.body, scoped)
            self.body(stmt.orelse, scoped)
        elif isinstance(stmt, ast.If):
            self.condition(stmt.test)
            inner = stmt if self.is_nki_branch(stmt.test) else scoped
            self.body(stmt.body, inner)
            self.body(stmt.orelse, inner)
        elif isinstance(stmt, (ast.With, ast.AsyncWith, ast.Try)):
            for part in ("body", "orelse", "finalbody"):
                self.body(getattr(stmt, part, []), scoped)
            for handler in getattr(stmt, "handlers", []):
                self.body(handler.body, scoped)

    def assign(self, stmt, scoped) -> None:
        value = stmt.value
        if value is None:
            return
        kind = self.kind(value)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if isinstance(stmt, ast.AugAssign):
            return
        for target in targets:
            if isinstance(target, ast.Name):
                self.kinds[target.id] = kind
            elif isinstance(target, (ast.Tuple, ast.List)):
                values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
                for k, elt in enumerate(target.elts):
                    if isinstance(elt, ast.Name):
                        if values is not None and len(values) == len(target.elts):
                            self.kinds[elt.id] = self.kind(values[k])
                        else:
                            self.kinds[elt.id] = kind if kind == INDEX else None
        if scoped is not None and self.generation is Generation.LEGACY and self.is_shared_hbm(value):
            self.report("err_shared_hbm_must_in_kernel_level", stmt,
                        "a shared_hbm tensor is created inside a loop or branch")

    def is_shared_hbm(self, value) -> bool:
        if not isinstance(value, ast.Call):
            return False
        for kw in value.keywords:
            if kw.arg == "buffer":
                obj = self.resolve(kw.value)
                if getattr(obj, "name", None) == "shared_hbm" or getattr(kw.value, "attr", None) == "shared_hbm":
                    return True
        return False

    def loop_kind(self, iterator) -> str | None:
        if isinstance(iterator, ast.Call):
            obj = self.resolve(iterator.func)
            if obj is range:
                return "range"
            api = self.api_name(obj) if obj is not None else None
            if api is not None and api[1] in _LOOP_CALLS:
                return api[1]
        return None

    def is_nki_branch(self, test) -> bool:
        """An `if` NKI scopes: one whose condition involves a loop variable or a tensor (legacy tracing
        creates a block for it); `if` on plain Python values is decided while tracing."""
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        return bool(names & self.loop_vars) or self.kind(test) is not None

    # -- rules ----------------------------------------------------------------------------------------------
    def condition(self, test) -> None:
        kind = self.kind(test)
        if kind == DECLARED:
            return
        if kind is not None and self.generation is Generation.LEGACY and isinstance(test, (ast.Name, ast.Subscript)):
            self.report("err_ambiguous_tensor_truth_value", test, "the truth value of a whole tensor or index")
        elif kind == TENSOR:
            self.report("err_dynamic_control_flow_not_supported", test,
                        "control flow depends on a tensor's value")
        elif kind == INDEX and self.generation is Generation.LEGACY:
            self.report("err_control_flow_condition_depending_on_arange", test,
                        "a condition depends on nl.arange / nl.mgrid indices")

    def expression_rules(self, node) -> None:
        if isinstance(node, ast.Call):
            self.helper(node)
        if isinstance(node, ast.IfExp):
            self.condition(node.test)
        elif isinstance(node, ast.BoolOp) and self.generation is Generation.LEGACY:
            if any(self.kind(v) is not None for v in node.values):
                self.report("err_ambiguous_tensor_truth_value", node,
                            f"'{'and' if isinstance(node.op, ast.And) else 'or'}' on a tensor or index")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and self.generation is Generation.LEGACY:
            if self.kind(node.operand) is not None:
                self.report("err_ambiguous_tensor_truth_value", node, "'not' on a tensor or index")
        elif isinstance(node, ast.Compare) and self.restricted:
            if any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                self.report("unsupported_is", node, "'is' / 'is not' in a new-generation kernel")
        elif isinstance(node, (ast.GeneratorExp, ast.Yield, ast.YieldFrom)) and self.restricted:
            what = "a generator expression" if isinstance(node, ast.GeneratorExp) else "'yield'"
            self.report("unsupported_generator", node, f"{what} in a new-generation kernel or its helper")
        elif isinstance(node, ast.Attribute) and self.generation is Generation.NEW:
            obj = self.resolve(node)
            if obj is not None and not isinstance(node.value, ast.Attribute):
                api = self.api_name(obj)
                if api is not None and api[0] == "neuronxcc":
                    self.report("mixed_generations", node,
                                f"'{ast.unparse(node)}' is a neuronxcc.nki (legacy) API")

    def created_in_block(self, stmt) -> list[tuple[str, ast.AST]]:
        """Names a legacy scoped block (loop body, NKI `if`) binds to new tensors: (name, assignment)."""
        if self.generation is not Generation.LEGACY:
            return []
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            if self.loop_kind(stmt.iter) not in _SCOPED_LOOPS:
                return []
            blocks = [stmt.body]
        elif isinstance(stmt, ast.If) and self.is_nki_branch(stmt.test):
            blocks = [stmt.body, stmt.orelse]
        else:
            return []
        out = []
        for block in blocks:
            for node in block:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Assign) and self.kind(sub.value) == TENSOR:
                        out += [(t.id, sub) for t in sub.targets if isinstance(t, ast.Name)]
        return out

    def used_after(self, created, following, block) -> None:
        """Report the first read of each name of `created` in the statements after the block, in program
        order, unless the name is bound again first."""
        pending = dict(created)

        def scan(statements) -> None:
            for stmt in statements:
                if not pending:
                    return
                if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    reads = [stmt.value] if stmt.value is not None else []
                    reads += [t for t in targets if not isinstance(t, ast.Name)]
                    if isinstance(stmt, ast.AugAssign):
                        reads += targets
                    uses(reads)
                    for t in targets:
                        if isinstance(t, ast.Name) and not isinstance(stmt, ast.AugAssign):
                            pending.pop(t.id, None)
                elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith,
                                       ast.Try)):
                    uses([getattr(stmt, "iter", None), getattr(stmt, "test", None)]
                         + [item.context_expr for item in getattr(stmt, "items", [])])
                    for part in ("body", "orelse", "finalbody"):
                        scan(getattr(stmt, part, []))
                    for handler in getattr(stmt, "handlers", []):
                        scan(handler.body)
                elif not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                    uses([stmt])

        def uses(nodes) -> None:
            for node in nodes:
                if node is None:
                    continue
                for n in ast.walk(node):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in pending:
                        origin = pending.pop(n.id)
                        self.report("err_local_variable_used_out_of_scope", n,
                                    f"tensor '{n.id}' is created at line {self.offset + origin.lineno}, inside "
                                    f"the block starting at line {self.offset + block.lineno}, and used after it")

        scan(following)


__all__ = ["lint"]

"""Imports point one way: every import of src/opennki (module level and inside functions) goes to its own
layer or a lower one of the list in docs/design-notes.md ("Layers"), and no modules import each other in a
cycle."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "opennki"


def layers() -> list[tuple[str, list[str]]]:
    """(layer name, entries) from the design notes' layer list, top first."""
    text = (ROOT / "docs" / "design-notes.md").read_text()
    block = re.search(r"## Layers[^\n]*\n.*?```text\n(.*?)```", text, re.S).group(1)
    out = []
    for line in block.splitlines():
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        out.append((parts[0], parts[1].split()))
    return out


def module_files() -> dict[str, Path]:
    mods = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def imports(mods: dict[str, Path]) -> list[tuple[str, str, int]]:
    """(importer, imported module, line) for every import of an opennki module."""
    def known(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    found = []
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                if t == "opennki" or t.startswith("opennki."):
                    target = known(t)
                    if target != mod:
                        found.append((mod, target, node.lineno))
    return found


def layer_of(path: Path, table) -> int:
    rel = path.relative_to(SRC).as_posix()
    best, best_len = None, -1
    for i, (_, entries) in enumerate(table):
        for e in entries:
            if (rel == e or (e.endswith("/") and rel.startswith(e))) and len(e) > best_len:
                best, best_len = i, len(e)
    assert best is not None, f"src/opennki/{rel} is in no layer of docs/design-notes.md"
    return best


def test_every_module_has_a_layer_and_imports_point_down():
    table, mods = layers(), module_files()
    level = {m: layer_of(p, table) for m, p in mods.items()}
    upward = [f"src/opennki/{mods[a].relative_to(SRC).as_posix()}:{line} imports {b} "
              f"({table[level[a]][0]} -> {table[level[b]][0]})"
              for a, b, line in sorted(set(imports(mods))) if level[b] < level[a]]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_import_cycles():
    mods = module_files()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for a, b, _ in imports(mods):
        graph[a].add(b)
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):                                     # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))
    for m in sorted(graph):
        if m not in index:
            visit(m)
    assert not cycles, "modules importing each other in a cycle:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checker_sees_imports_inside_functions():
    # the walk covers function bodies: a lazily imported module is an edge like any other
    edges = {(a, b) for a, b, _ in imports(module_files())}
    assert ("opennki.bridges", "opennki.bridges.torch") in edges     # `bridge()` imports it when called
    assert ("opennki.compile", "opennki.kernels.frameworks") in edges


def exported(tree) -> set[str]:
    """The names a module's `__all__` lists (a facade re-exports the names NKI spells with an underscore)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            try:
                return set(ast.literal_eval(node.value))
            except ValueError:
                return set()
    return set()


def test_no_module_imports_a_private_name_of_another_package():
    mods, private = module_files(), []
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        public = exported(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("opennki"):
                source = node.module if node.module in mods and mods[node.module].name != "__init__.py" \
                    else node.module + ".__init__"
                if source.rpartition(".")[0] == package:
                    continue
                private += [f"src/opennki/{path.relative_to(SRC).as_posix()}:{node.lineno} imports {a.name} "
                            f"from {node.module}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__") and a.name not in public]
    assert not private, "private names imported across packages:\n" + "\n".join(private)

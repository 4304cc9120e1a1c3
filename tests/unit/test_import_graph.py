"""The packages' import graph has no cycle and no import from a lower layer to a higher one: data
flows one way, and a module can be read without the ones that import it. Imports inside functions
count too (they are how a cycle is hidden)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("bert_jax", "data_prep")


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the package modules it imports, anywhere in its body}."""
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        graph[name] = {m for m in found if m in files and m != name and "." in m}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of more than one module (Tarjan)."""
    index, low, stack, on, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_the_finder_sees_a_cycle():
    assert cycles({"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}) == [
        ["a.x", "a.y", "a.z"]
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package):
    graph = import_graph()
    assert any(m.startswith(package + ".") for m in graph)
    found = [c for c in cycles(graph) if any(m.startswith(package + ".") for m in c)]
    assert not found, f"import cycles: {found}"


# bert_jax's layers, lowest first (bert_jax/__init__.py): a module imports only from its own
# layer and those below. The first prefix that matches a module names its layer.
LAYERS = (
    ("bert_jax.cli", "bert_jax.storage"),
    ("bert_jax.text", "bert_jax.data.contract", "bert_jax.data"),
    ("bert_jax.data.input",),
    ("bert_jax.model",),
    # Hugging Face's names, files and export directories: what training needs to start from a
    # Hugging Face directory, and what exports write (training.pretrained reads both kinds).
    ("bert_jax.hf",),
    ("bert_jax.training",),
    ("bert_jax.runtime",),
    ("bert_jax.finetune", "bert_jax.plan", "bert_jax.main", "bert_jax.embed", "bert_jax.export"),
    ("bert_jax", "data_prep"),
)


def layer(module: str) -> int:
    matches = [
        (len(prefix), i)
        for i, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(matches)[1]  # the longest prefix: bert_jax.data.input before bert_jax.data


def test_no_upward_import():
    graph = import_graph()
    # `from bert_jax.training import pretrained` imports the package too: only modules count
    packages = {m for m in graph if (ROOT / m.replace(".", "/") / "__init__.py").exists()}
    upward = {
        (a, b) for a, targets in graph.items() for b in targets - packages if layer(b) > layer(a)
    }
    assert not upward, f"imports from a lower layer to a higher one: {upward}"

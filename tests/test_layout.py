"""The layout of the top-level modules (issue 17), read with `ast` from the files themselves:
no import of ours inside a function, nothing imports the loop (`credo`) or the evaluation CLI
(`eval`), no import cycle, and every module short enough to read end to end, opening with a
docstring that says what it holds. tests/ and bench/ are not modules of the package."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(path.stem for path in ROOT.glob("*.py"))  # our modules: the checkout's top-level .py files
ENTRY_POINTS = ("credo", "eval")  # run, never imported
MAX_LINES = 600
MAX_LOOP_LINES = 500  # credo.py: the loop, read end to end first
MAX_CHAIN = 7  # modules in the longest import chain from an entry point


def imports_of_ours(name: str) -> list[tuple[str, int, bool]]:
    """(module imported, line, inside a function?) for each import of our modules in `name`.py."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                found.extend(
                    (imported.split(".")[0], child.lineno, nested)
                    for imported in names
                    if imported.split(".")[0] in MODULES
                )
            visit(child, nested)

    visit(ast.parse((ROOT / f"{name}.py").read_text()), False)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports."""
    return {name: {imported for imported, _, _ in imports_of_ours(name)} for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first module repeated at the end), or None."""
    state: dict[str, str] = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt, path + [nxt])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_the_cycle_finder_by_hand():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": set(), "b": {"b"}}) == ["b", "b"]


def test_the_modules_are_found():
    assert {"credo", "eval", "config", "policy", "losses", "rollout", "verifier", "metrics", "report"} <= set(MODULES)


def test_no_module_imports_ours_inside_a_function():
    inside = [(name, imported, line) for name in MODULES for imported, line, nested in imports_of_ours(name) if nested]
    assert inside == []


def test_nothing_imports_the_loop_or_the_evaluation_cli():
    importers = {
        name: sorted(imported & set(ENTRY_POINTS))
        for name, imported in import_graph().items()
        if imported & set(ENTRY_POINTS)
    }
    assert importers == {}


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_every_module_is_short_and_opens_with_a_docstring():
    too_long, undocumented = {}, []
    for name in MODULES:
        text = (ROOT / f"{name}.py").read_text()
        tree = ast.parse(text)
        if not (
            tree.body
            and isinstance(tree.body[0], ast.Expr)
            and isinstance(tree.body[0].value, ast.Constant)
            and isinstance(tree.body[0].value.value, str)
            and tree.body[0].value.value.strip()
        ):
            undocumented.append(name)
        if len(text.splitlines()) > (MAX_LOOP_LINES if name == "credo" else MAX_LINES):
            too_long[name] = len(text.splitlines())
    assert undocumented == []
    assert too_long == {}, f"modules over {MAX_LINES} lines (credo.py: {MAX_LOOP_LINES}): {too_long}"


def longest_chain(graph: dict[str, set[str]], start: str) -> list[str]:
    """The longest import path from `start` (the graph has no cycle)."""
    best = [start]
    for nxt in sorted(graph[start]):
        path = [start, *longest_chain(graph, nxt)]
        if len(path) > len(best):
            best = path
    return best


def test_the_longest_chain_finder_by_hand():
    assert longest_chain({"a": {"b", "c"}, "b": {"c"}, "c": set()}, "a") == ["a", "b", "c"]
    assert longest_chain({"a": set()}, "a") == ["a"]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_import_chains_are_short(entry):
    """Importing a module loads what it imports: a long chain from an entry point is a deep
    house (issue 26: `credo -> checkpoint -> parallel -> config -> data -> ... -> sandbox`)."""
    chain = longest_chain(import_graph(), entry)
    assert len(chain) <= MAX_CHAIN, " -> ".join(chain)


def test_the_configuration_loads_no_data_engine_or_verifier():
    """config holds the schema and the confidence plan: reading a config must not load the
    datasets, the engines or the sandbox (what config imports, and all that that imports)."""
    graph, seen, todo = import_graph(), set(), ["config"]
    while todo:
        for imported in graph[todo.pop()] - seen:
            seen.add(imported)
            todo.append(imported)
    assert seen & {"data", "engine", "verifier", "grading", "sandbox", "convert"} == set(), sorted(seen)


# The verifier's layers (docs/verifier.md): exactly what each of its files imports of ours.
@pytest.mark.parametrize(
    "name, allowed",
    [
        ("verifier", {"grading", "mathpool", "rollout", "sandbox", "typed_json"}),  # rollout: the one answer segment
        ("grading", {"sandbox"}),
        ("sandbox", {"sandbox_resources"}),
        ("sandbox_resources", set()),
        ("mathpool", set()),
        ("typed_json", set()),
        ("sandbox_lockdown", set()),
        ("sandbox_child", {"sandbox_lockdown", "typed_json"}),  # spliced in, never imported
    ],
)
def test_the_verifier_layers(name, allowed):
    assert import_graph()[name] == allowed


def test_every_parse_of_python_source_goes_through_the_lock():
    """CPython 3.11's AST constructor is not thread-safe (gh-106905: "AST constructor recursion
    depth mismatch", seen in CI while data.py converted records in threads); grading and
    conversion run in thread pools, so ast.parse is called in grading.parse_python only."""
    calls = []
    for name in MODULES:
        for node in ast.walk(ast.parse((ROOT / f"{name}.py").read_text())):
            if isinstance(node, ast.FunctionDef):
                for inner in ast.walk(node):
                    if (
                        isinstance(inner, ast.Call)
                        and isinstance(inner.func, ast.Attribute)
                        and inner.func.attr == "parse"
                        and isinstance(inner.func.value, ast.Name)
                        and inner.func.value.id == "ast"
                    ):
                        calls.append((name, node.name))
    assert sorted(set(calls)) == [("grading", "parse_python")]

"""The layout (README.md, "Layout"), read with `ast` from the files themselves.

The top level holds the method: the modules one training step needs to be read. Every other
concern is one folder named for it, opening (its `__init__.py`) with what it holds. The rules
are about concepts, not line counts:

* the top level is exactly TOP_LEVEL, and every folder of ours is one of FOLDERS;
* no import inside a function but those of DEFERRED_IMPORTS, each with its reason; no import cycle;
* imports only go down: every folder has a layer (FOLDERS), a module imports its own layer's and
  lower layers' modules, two folders of one layer never import each other (the method's layer
  excepted: adapters/ reads a Config), and nothing imports the entry points (credo, eval);
* the loop reaches the sandbox only through the verifier, and never loads the dataset
  converters (dataprep);
* one training step reads in at most STEP_LINES lines over at most STEP_FILES modules, and
  in at most LONGEST_STEP_LINES on every path a shipped config takes (bench/step_lines.py says
  what it counts).

tests/ and bench/ are not modules of the package."""

import ast
from pathlib import Path

import pytest

from bench import step_lines

ROOT = Path(__file__).resolve().parent.parent
# What one training step needs to be read (README, "Layout").
TOP_LEVEL = {
    "credo",  # the loop of section 3: rollouts, outcomes, credit, the update
    "problems",  # the problems a run reads, and the order it draws them in
    "rollout",  # prompts (app:model) and segments on token ids
    "methods",  # the registries research changes: rewards, target, calibration loss, advantages, loss terms
    "confidence",  # the confidence channel: every registered read of c, and a run's plan
    "losses",  # the paper's equations, one pure function each
    "metrics",  # the paper's metrics (app:data): ECE, Brier, AUROC, AURC, one pure function each
    "policy",  # model, batches, THE forward, the readout
    "engine",  # vLLM and HF generation
    "verifier",  # a_i: math-verify and the code sandbox, behind one door
    "config",  # the typed Config and its loading
    "schema",  # every config key with its default and help
    "eval",  # the evaluation CLI
}
ENTRY_POINTS = ("credo", "eval")  # run, never imported
# Each folder and the layer it sits in, from the bottom: a module may import its own layer's and
# lower layers' modules, never a higher layer's. The method (the top level) is layer 1.
FOLDERS = {
    "kernels": 0,  # log-probs and packing: tensors in, tensors out
    "grading": 0,  # what the verifier runs apart from the trainer
    "adapters": 1,  # LoRA and QLoRA over the method's model, reading its Config
    "infra": 2,  # processes, checkpoints, a run's record, memory fit: the loop's machinery
    "evaluation": 3,  # reports, figures, tables, serve and ask: over checkpoints that infra/ wrote
    "dataprep": 4,  # bash run.sh prepare, which names the evaluation sets
    "worlds": 5,  # the tiny and toy worlds, which train and evaluate
}
METHOD_LAYER = 1
ENTRY_LAYER = 6  # credo and eval sit above everything they run
SPLICED = {"grading.sandbox_child"}  # its imports are replaced by text (grading/sandbox.py), never run
MAX_CHAIN = 7  # modules in the longest import chain from an entry point
# What a reader reads for one step (bench/step_lines.py): on the default path (configs/credo.yaml),
# and on the longest path of any shipped config (code.yaml with a KL term), each at most over
# STEP_FILES modules. Both bounds are today's counts, so that the step cannot grow unnoticed.
STEP_LINES, LONGEST_STEP_LINES, STEP_FILES = 800, 821, 5
# The configs the reference ships, whose paths LONGEST_STEP_LINES bounds. A fork's own config (the
# entry docs/forking.md adds) lengthens its own path by its entry, and is not held to it.
SHIPPED_CONFIGS = (
    "code credo credo_alpha0 credo_digitexp credo_gated credo_kappa0 credo_noanalysis credo_noconfadv credo_noformat "
    "credo_sampled dcpo dcpo_sw dcpo_swd grpo grpo_head math rlcr rlcr_sw rlcr_swd tiny toy"
).split()


def module_files() -> dict[str, Path]:
    """Our modules by dotted name: the top-level .py files and those of each folder."""
    found = {path.stem: path for path in ROOT.glob("*.py")}
    for folder in sorted(
        p for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name not in ("bench", "tests")
    ):
        found.update({f"{folder.name}.{path.stem}": path for path in folder.glob("*.py") if path.stem != "__init__"})
    return found


MODULES = module_files()


def layer(name: str) -> int:
    if name in ENTRY_POINTS:
        return ENTRY_LAYER
    return FOLDERS[name.split(".")[0]] if "." in name else METHOD_LAYER


def imports_of_ours(name: str) -> list[tuple[str, int, bool]]:
    """(module imported, line, inside a function?) for each import of our modules in `name`."""
    found = []

    def ours(dotted: str, names: list[str]) -> list[str]:
        if dotted in MODULES:
            return [dotted]
        # `from grading import judge, mathpool`: the modules of a folder
        return [f"{dotted}.{n}" for n in names if f"{dotted}.{n}" in MODULES]

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.extend((m, child.lineno, nested) for m in ours(alias.name, []))
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.extend((m, child.lineno, nested) for m in ours(child.module, [a.name for a in child.names]))
            visit(child, nested)

    if name not in SPLICED:
        visit(ast.parse(MODULES[name].read_text()), False)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports."""
    return {name: {imported for imported, _, _ in imports_of_ours(name)} for name in MODULES}


def reachable(graph: dict[str, set[str]], start: str, through: set[str] = frozenset()) -> set[str]:
    """Every module that importing `start` loads, not following the imports of `through`."""
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node in through and node != start:
            continue
        for nxt in graph[node] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


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


def longest_chain(graph: dict[str, set[str]], start: str) -> list[str]:
    """The longest import path from `start` (the graph has no cycle)."""
    best = [start]
    for nxt in sorted(graph[start]):
        path = [start, *longest_chain(graph, nxt)]
        if len(path) > len(best):
            best = path
    return best


def test_the_graph_helpers_by_hand():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": set(), "b": {"b"}}) == ["b", "b"]
    assert longest_chain({"a": {"b", "c"}, "b": {"c"}, "c": set()}, "a") == ["a", "b", "c"]
    assert reachable({"a": {"b"}, "b": {"c"}, "c": set()}, "a") == {"b", "c"}
    assert reachable({"a": {"b"}, "b": {"c"}, "c": set()}, "a", through={"b"}) == {"b"}


def test_the_top_level_is_the_method():
    assert {name for name in MODULES if "." not in name} == TOP_LEVEL


def test_every_folder_is_named_for_its_concern_and_says_what_it_holds():
    folders = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - {"bench", "tests"}
    assert folders == set(FOLDERS)
    stray = [p.name for p in ROOT.iterdir() if p.is_dir() and any(p.glob("*.py")) and not (p / "__init__.py").exists()]
    assert stray in ([], ["tests"])
    for folder in FOLDERS:
        doc = ast.get_docstring(ast.parse((ROOT / folder / "__init__.py").read_text()))
        assert doc, folder
        listed = {line.split()[0] for line in doc.splitlines() if line.split() and line.split()[0].endswith(".py")}
        assert listed == {p.name for p in (ROOT / folder).glob("*.py")} - {"__init__.py"}, folder


def test_every_module_opens_with_a_docstring():
    assert [name for name, path in MODULES.items() if not ast.get_docstring(ast.parse(path.read_text()))] == []


# Every import inside a function, (module, top-level name imported), and why it waits.
_ON_USE = "third-party, on use: only a download or a hub source needs it"
_PLOTS = "matplotlib (a second to import, and it picks a backend): only when a figure is drawn"
_MATH = "math-verify and sympy (seconds): in the math worker only, the trainer never loads them"
_CHILD = "spliced as text into the sandbox child's script (grading/sandbox.py), where each call imports its own"
DEFERRED_IMPORTS = {
    # config.py validates a run's file, keys and values before it reads the registries, so that
    # `import config` loads no torch and a config mistake is one line in a second (run.sh checks first)
    ("config", "methods"): "its registries import torch: config.py stays free of it (config._methods)",
    ("config", "confidence"): "its reads import torch: config.py stays free of it (config._confidence)",
    ("adapters.quant", "bitsandbytes"): "seconds to import, and only a QLoRA run (lora_quant=nf4) needs it",
    ("engine", "vllm"): "seconds to import, and only the vLLM engine needs it (engine=hf runs without)",
    ("infra.runlog", "torch"): "torch.utils.tensorboard needs the tensorboard package: only report_to=tensorboard",
    ("infra.runlog", "wandb"): "an optional logger: only report_to=wandb",
    ("infra.realparts", "huggingface_hub"): _ON_USE,
    ("problems", "huggingface_hub"): _ON_USE,
    ("dataprep.data", "huggingface_hub"): _ON_USE,
    ("dataprep.convert", "pyarrow"): "third-party, on use: only the hub's parquet files need it",
    ("evaluation.curves", "matplotlib"): _PLOTS,
    ("evaluation.figures", "matplotlib"): _PLOTS,
    ("grading.mathjudge", "math_verify"): _MATH,
    ("grading.mathjudge", "latex2sympy2_extended"): _MATH,
    ("grading.mathjudge", "sympy"): _MATH,
    ("grading.mathpool", "tqdm"): "a math worker imports grading/mathpool.py and runs on the standard library alone",
    ("grading.sandbox_child", "atexit"): _CHILD,
    ("grading.sandbox_child", "signal"): _CHILD,
    ("grading.sandbox_child", "resource"): _CHILD,
    ("grading.sandbox_lockdown", "ctypes"): _CHILD,
    ("grading.sandbox_lockdown", "resource"): _CHILD,
    ("grading.typed_json", "_json"): _CHILD,
    ("grading.typed_json", "json"): _CHILD,
    ("worlds.tiny", "tokenizers"): "only a build needs it; tiny.ensure checks the cached recipe without it",
    ("worlds.tiny", "transformers"): "only a build needs it; tiny.ensure checks the cached recipe without it",
}


def deferred_imports(name: str) -> set[tuple[str, str]]:
    """(module, top-level name) of each import inside a function of module `name`."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    found |= {(name, alias.name.split(".")[0]) for alias in inner.names}
                elif isinstance(inner, ast.ImportFrom) and inner.module and inner.level == 0:
                    found.add((name, inner.module.split(".")[0]))
    return found


def test_every_import_inside_a_function_is_named_with_its_reason():
    found = set().union(*(deferred_imports(name) for name in MODULES))
    assert found == set(DEFERRED_IMPORTS), (
        sorted(found - set(DEFERRED_IMPORTS)),
        sorted(set(DEFERRED_IMPORTS) - found),
    )
    assert all(DEFERRED_IMPORTS.values())


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_nothing_imports_the_entry_points():
    assert {
        name: sorted(imported & set(ENTRY_POINTS))
        for name, imported in import_graph().items()
        if imported & set(ENTRY_POINTS)
    } == {}


def folder_of(name: str) -> str:
    """A module's folder, or "" for the top level."""
    return name.split(".")[0] if "." in name else ""


def arrows() -> list[tuple[str, str]]:
    """(importer, imported) of every import of ours, sorted."""
    return sorted((name, imported) for name, imported_set in import_graph().items() for imported in imported_set)


def test_no_upward_import():
    assert [(name, imported) for name, imported in arrows() if layer(imported) > layer(name)] == []


def test_two_folders_of_one_layer_never_import_each_other():
    """Within a layer only the method's modules and adapters/ share arrows (adapters/ reads a
    Config; the model's modules load adapters): any other pair of one layer would be a tie in the
    house's order, where a cycle between folders can grow."""
    sideways = [
        (name, imported)
        for name, imported in arrows()
        if layer(imported) == layer(name) and folder_of(imported) != folder_of(name) and layer(name) != METHOD_LAYER
    ]
    assert sideways == []


def test_the_layers_by_hand():
    """infra/ sits below evaluation/ (which reads the checkpoints infra/ writes), and both below worlds/."""
    assert layer("infra.runlog") < layer("evaluation.report") < layer("worlds.toy")
    assert layer("metrics") == METHOD_LAYER and layer("credo") == ENTRY_LAYER


def test_the_loop_reaches_the_sandbox_only_through_the_verifier_and_never_the_converters():
    graph = import_graph()
    assert "verifier" in reachable(graph, "credo")
    beyond_the_verifier = reachable(graph, "credo", through={"verifier"})
    assert sorted(m for m in beyond_the_verifier if m.startswith(("grading.", "dataprep."))) == []
    assert sorted(m for m in reachable(graph, "credo") if m.startswith("dataprep.")) == []


def test_the_configuration_loads_no_data_engine_or_verifier():
    """Reading a config must not load the datasets, the engines or the sandbox."""
    loaded = reachable(import_graph(), "config")
    assert (
        sorted(m for m in loaded if m in ("engine", "verifier", "policy") or m.startswith(("grading.", "dataprep.")))
        == []
    )


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_import_chains_are_short(entry):
    """Importing a module loads what it imports: a long chain from an entry point is a deep house."""
    chain = longest_chain(import_graph(), entry)
    assert len(chain) <= MAX_CHAIN, " -> ".join(chain)


# The verifier's layers (docs/verifier.md): exactly what each of its files imports of ours.
@pytest.mark.parametrize(
    "name, allowed",
    [
        (
            "verifier",
            {
                "grading.judge",
                "grading.mathjudge",
                "grading.mathpool",
                "rollout",
                "grading.sandbox",
                "grading.typed_json",
            },
        ),
        ("grading.judge", {"grading.sandbox"}),
        ("grading.mathjudge", set()),  # math-verify and sympy, imported in the math worker only
        ("grading.sandbox", {"grading.sandbox_resources"}),
        ("grading.sandbox_resources", set()),
        ("grading.mathpool", set()),
        ("grading.typed_json", set()),
        ("grading.sandbox_lockdown", set()),
    ],
)
def test_the_verifier_layers(name, allowed):
    assert import_graph()[name] == allowed


def test_every_parse_of_python_source_goes_through_the_lock():
    """CPython 3.11's AST constructor is not thread-safe (gh-106905: "AST constructor recursion
    depth mismatch", seen in CI while dataset conversion ran in threads); grading and
    conversion run in thread pools, so ast.parse is called in grading.judge.parse_python only."""
    calls = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
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
    assert sorted(set(calls)) == [("grading.judge", "parse_python")]


def test_one_step_reads_short():
    """The step's functions and the project functions and classes they use, with the entries of
    every registry a path calls, stopping at the engine, the verifier, the rollout parser, the
    kernels, the adapters and the infrastructure: at most STEP_LINES lines on the default path,
    LONGEST_STEP_LINES on any other, over at most STEP_FILES modules."""
    default = step_lines.per_file(step_lines.reading_path())
    assert sum(default.values()) <= STEP_LINES and len(default) <= STEP_FILES, default
    assert {"credo", "policy", "losses", "methods"} <= set(default)  # the counter still finds the step
    every = step_lines.paths()
    assert {name.split("+")[0] for name in every} >= set(SHIPPED_CONFIGS)
    for name, cfg in every.items():
        if name.split("+")[0] not in SHIPPED_CONFIGS:
            continue
        files = step_lines.per_file(step_lines.reading_path(cfg))
        assert sum(files.values()) <= LONGEST_STEP_LINES and len(files) <= STEP_FILES, (name, files)


def test_the_step_counter_follows_each_path_s_registry_entries():
    """A KL term adds its loss term and losses.kl_k3; the trainer's credit pass adds
    policy.confidences; a baseline whose eq:sw weights are a model read (rlcr_swd) adds
    policy.slot_confidences there instead."""
    every = step_lines.paths()
    default, kl, trainer = (
        set(step_lines.reading_path(every[name])) for name in ("credo", "credo+kl", "credo+trainer")
    )
    assert kl - default == {("methods", "kl_term"), ("losses", "kl_k3")}
    assert trainer - default == {("policy", "confidences")}
    sw = set(step_lines.reading_path(every["rlcr_swd+trainer"]))
    assert ("policy", "slot_confidences") in sw and ("policy", "confidences") not in sw

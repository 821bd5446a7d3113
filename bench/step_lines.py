"""The lines a reader reads for one training step, on every path a shipped config takes:
`python bench/step_lines.py [--list] [--path NAME]`.

From the loop body of `credo.train` (the `for step` statement: one step, not the setup before
it), follow every call of a project function, and every project class its code names (not
annotations or decorators), through the method's modules; stop at what a step uses as a black
box: generation (engine), grading (verifier), segment parsing and prompts (rollout), the kernels,
the adapters and the run infrastructure (kernels/, adapters/, infra/), and the configuration's
loading (config, schema). The registries' entries a path calls are read too: the rewards, target,
calibration loss, advantage, aggregation, loss terms (those with a coefficient other than 0) and
confidence read its config names, looked up in the registries themselves; and the
ConfidencePlan the step reads (not `confidence.plan`, which builds it once before the loop). A
function reached only under another value of a config key (OTHER_VALUES) is read on the paths
where that value holds. A function counts its whole source: signature, docstring, comments, body.

The paths (`paths`): every config of configs/ (tables.yaml, a map of the paper's tables, is not
one) as shipped, and each with the trainer's credit pass (credit_confidence=trainer), with a KL
term (kl_coef=0.01) and with LoRA (lora_rank=8, whose adapters/ is a black box here).

Not here: any measurement of time; tests/test_layout.py holds the bound on the longest path.
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import confidence  # noqa: E402
import config  # noqa: E402
import methods  # noqa: E402

READ = ("credo", "methods", "losses", "policy", "confidence")  # modules a reader opens
START = [("credo", "train")]
ALWAYS = [  # what every path reads of the confidence channel
    ("confidence", "Read"),  # what a registered read declares (learner.plan.read)
    ("confidence", "ConfidencePlan"),  # what the step reads of the run's confidence channel (learner.plan)
]
# The registries of methods.py a step calls through, by config key.
REGISTRIES = {
    "target": methods.TARGETS,
    "calibration_loss": methods.CALIBRATION_LOSSES,
    "advantage": methods.ADVANTAGES,
    "loss_agg": methods.LOSS_AGGREGATIONS,
}
VARIANTS = {"": [], "trainer": ["credit_confidence=trainer"], "kl": ["kl_coef=0.01"], "lora": ["lora_rank=8"]}

# Functions reached only under some value of a config key: (module, name) -> (why, when).
OTHER_VALUES = {
    ("policy", "confidences"): (
        "credit_confidence=trainer: credit's c from a no-grad pass of the training batch",
        lambda cfg: cfg.credit_confidence == "trainer" and "model" in confidence.plan(cfg).model_reads,
    ),
    ("policy", "slot_confidences"): (
        "credit_confidence=trainer, for a baseline's eq:sw weights (tab:sw_baseline)",
        lambda cfg: cfg.credit_confidence == "trainer" and "pass" in confidence.plan(cfg).model_reads,
    ),
}


def entry(function) -> tuple[str, str]:
    """(module, name) of a registered function."""
    return function.__module__, function.__name__


def registry_entries(cfg) -> list[tuple[str, str]]:
    """(module, name) of every registry entry a step of `cfg` calls: its method's rewards, its
    target, calibration loss, advantage and aggregation, its loss terms whose coefficient is not
    0, and its confidence read's functions."""
    entries = [entry(methods.method_of(cfg.method).rewards)]
    entries += [entry(registry[getattr(cfg, key)]) for key, registry in REGISTRIES.items()]
    entries += [entry(term.loss) for term in methods.loss_terms(cfg)]
    read = confidence.read_of_config(cfg)
    entries += [entry(f) for f in (read.from_logprobs, read.from_slot, read.from_text) if f is not None]
    return entries + ALWAYS


def paths() -> dict[str, object]:
    """Every path's name (config, or config+variant) -> its Config."""
    found = {}
    for file in sorted((ROOT / "configs").glob("*.yaml")):
        if file.stem == "tables":
            continue
        for variant, overrides in VARIANTS.items():
            found[file.stem + (f"+{variant}" if variant else "")] = config.load_config(file.stem, overrides)
    return found


@functools.cache
def definitions(module: str) -> dict[str, ast.AST]:
    """Top-level functions and classes of a module, by name."""
    path = ROOT / f"{module}.py"
    if not path.exists():
        return {}
    tree = ast.parse(path.read_text())
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


@functools.cache
def aliases(module: str) -> dict[str, str]:
    """Local names of the READ modules imported by `module` (`import policy as pol` -> pol: policy)."""
    tree = ast.parse((ROOT / f"{module}.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in READ:
                    found[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in READ:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def code_nodes(node: ast.AST):
    """The nodes of a definition's code: its body (and a class's fields' defaults), without its
    decorators and annotations."""
    stack = list(node.body) if hasattr(node, "body") else [node]
    while stack:
        sub = stack.pop()
        if isinstance(sub, ast.AnnAssign):
            stack.extend([sub.value] if sub.value is not None else [])
            continue
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(sub.body)
            continue
        yield sub
        stack.extend(ast.iter_child_nodes(sub))


def reading_path(cfg=None) -> dict[tuple[str, str], int]:
    """(module, name) -> source lines of every function and class a reader reads for one step of
    `cfg` (configs/credo.yaml when None)."""
    cfg = cfg if cfg is not None else config.load_config("credo", [])
    defs = {module: definitions(module) for module in READ}
    seen: dict[tuple[str, str], int] = {}
    todo = list(START) + registry_entries(cfg)
    while todo:
        module, name = todo.pop()
        node = defs.get(module, {}).get(name)
        off = (module, name) in OTHER_VALUES and not OTHER_VALUES[(module, name)][1](cfg)
        if node is None or (module, name) in seen or off:
            continue
        if (module, name) == ("credo", "train"):  # the loop statement only
            node = next(sub for sub in ast.walk(node) if isinstance(sub, ast.For))
        seen[(module, name)] = node.end_lineno - node.lineno + 1
        local = aliases(module)
        for sub in code_nodes(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in local:
                target = local[sub.value.id]
                if "." not in target:
                    todo.append((target, sub.attr))
            elif isinstance(sub, ast.Name) and module != "config":  # config: its plan only
                if sub.id in defs[module]:
                    todo.append((module, sub.id))
                elif "." in local.get(sub.id, ""):
                    todo.append(tuple(local[sub.id].split(".")))
    return seen


def per_file(path: dict[tuple[str, str], int]) -> dict[str, int]:
    """Lines of a reading path by module."""
    files: dict[str, int] = {}
    for (module, _), lines in path.items():
        files[module] = files.get(module, 0) + lines
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="every function and class of --path, with its lines")
    parser.add_argument("--path", default="credo", help="a path's name (a config, or config+trainer/kl/lora)")
    args = parser.parse_args()
    every = paths()
    if args.path not in every:
        parser.error(f"--path {args.path!r} is not a path; choose from {', '.join(every)}")
    if args.list:
        for (module, name), lines in sorted(reading_path(every[args.path]).items()):
            print(f"{module}.{name}: {lines}")
    totals = {}
    for name, cfg in every.items():
        files = per_file(reading_path(cfg))
        totals[name] = (sum(files.values()), len(files))
        split = ", ".join(f"{module} {lines}" for module, lines in files.items())
        print(f"{name}: {totals[name][0]} lines over {totals[name][1]} files ({split})")
    longest = max(totals, key=lambda name: totals[name])
    print(f"longest: {longest}, {totals[longest][0]} lines over {totals[longest][1]} files")


if __name__ == "__main__":
    main()

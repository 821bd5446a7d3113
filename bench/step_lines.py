"""The lines a reader reads for one training step: `python bench/step_lines.py [--list]`.

From the loop body of `credo.train` (the `for step` statement: one step, not the setup before
it), follow every call of a project function, and every project class its code names (not
annotations or decorators), through the method's modules; stop at what a step uses as a black
box: generation (engine), grading (verifier), segment parsing and prompts (rollout), the kernels
and the run infrastructure (kernels/, infra/), and the configuration's loading (config, schema).
Each registry's default entries are read too (the rewards, target, calibration loss, advantage,
aggregation, loss terms and confidence read a default run calls through its registry), and the
ConfidencePlan the step reads (not `confidence.plan`, which builds it once before the loop); a
function a default run reaches only under another value of a config key (OTHER_VALUES) is not,
as a registry's other entries are not. A function counts its whole source: signature, docstring,
comments, body.

Not here: any measurement of time; tests/test_layout.py holds the bound (800 lines, 5 files).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READ = ("credo", "methods", "losses", "policy", "confidence")  # modules a reader opens
START = [("credo", "train")]
# What a default run (configs/credo.yaml) calls through a registry, by (module, function).
DEFAULT_ENTRIES = [
    ("methods", "credo"),
    ("methods", "hybrid"),
    ("methods", "squared"),
    ("methods", "grpo_advantage"),
    ("methods", "token_mean"),
    ("methods", "policy_term"),
    ("methods", "calibration_term"),
    ("confidence", "readout"),
    ("confidence", "readout_of_slot"),  # the readout's exact form from the slot's hidden state
    ("confidence", "Read"),  # what a registered read declares (learner.plan.read)
    ("confidence", "ConfidencePlan"),  # what the step reads of the run's confidence channel (learner.plan)
]


# What a default run never calls: reached only under another value of a config key.
OTHER_VALUES = {
    ("policy", "confidences"): "credit_confidence=trainer: credit's c from a no-grad pass",
    ("policy", "slot_confidences"): "credit_confidence=trainer, for a baseline's eq:sw weights (tab:sw_baseline)",
}


def definitions(module: str) -> dict[str, ast.AST]:
    """Top-level functions and classes of a module, by name."""
    path = ROOT / f"{module}.py"
    if not path.exists():
        return {}
    tree = ast.parse(path.read_text())
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


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


def reading_path() -> dict[tuple[str, str], int]:
    """(module, name) -> source lines of every function and class a reader reads for one step."""
    defs = {module: definitions(module) for module in READ}
    seen: dict[tuple[str, str], int] = {}
    todo = list(START) + DEFAULT_ENTRIES
    while todo:
        module, name = todo.pop()
        node = defs.get(module, {}).get(name)
        if node is None or (module, name) in seen or (module, name) in OTHER_VALUES:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="every function and class, with its lines")
    args = parser.parse_args()
    path = reading_path()
    per_file: dict[str, int] = {}
    for (module, name), lines in sorted(path.items()):
        per_file[module] = per_file.get(module, 0) + lines
        if args.list:
            print(f"{module}.{name}: {lines}")
    print(", ".join(f"{module} {lines}" for module, lines in sorted(per_file.items(), key=lambda kv: -kv[1])))
    print(f"total {sum(per_file.values())} lines over {len(per_file)} files")


if __name__ == "__main__":
    main()

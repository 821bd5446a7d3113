"""The paper's tables as commands (configs/tables.yaml): `bash run.sh list`, `bash run.sh table X`.

    >>> "bash run.sh credo" in table_commands("main")
    True

Holds: each table's training runs and evaluation commands, and the listing of every config
with the table rows it trains. Does not hold: the configs themselves (config.py), training
(credo.py) or evaluation (eval.py).
"""

from __future__ import annotations

import re
import shlex
import sys
import textwrap
from pathlib import Path

import yaml

from config import CONFIG_DIR, INPUT_ERRORS, ROOT, config_names, load_config, one_line, run_dir_of
from evaluation.evalsets import EVAL_SETS

TABLES_FILE = CONFIG_DIR / "tables.yaml"


def load_tables() -> dict:
    return yaml.safe_load(TABLES_FILE.read_text())


def _table_name(name: str, tables: dict) -> str:
    key = name if name.startswith("tab:") else f"tab:{name}"
    if key not in tables:
        raise KeyError(f"no table {name!r} in {TABLES_FILE.name}; known: {', '.join(tables)}")
    return key


def table_runs(name: str) -> list[dict]:
    """Every (row, domain, seed[, model]) of a table: its label, the train command (None for a
    base model) and what eval.py gets for it (a run directory or a base model id)."""
    tables = load_tables()
    spec = tables[_table_name(name, tables)]
    runs = []
    for domain in spec["domains"]:
        for model in spec.get("models", [None]):
            for row in spec["rows"]:
                label = row["label"] + (f" ({Path(model).name})" if model else "")
                if "base" in row:
                    base = model if row["base"] == "model" else row["base"]
                    runs.append(
                        {"label": label, "domain": domain, "model": model, "seed": None, "train": None, "eval": base}
                    )
                    continue
                wanted = [f"domain={domain}", *([f"model={model}"] if model else []), *row.get("set", [])]
                plain = load_config(row["config"], [f"domain={domain}"])
                # an override equal to what the config already gives names the same run: leave it out
                overrides = [
                    o
                    for o in wanted
                    if o.startswith("domain=")
                    or getattr(load_config(row["config"], [f"domain={domain}", o]), o.split("=")[0])
                    != getattr(plain, o.split("=")[0])
                ]
                for seed in spec["seeds"]:
                    cfg = load_config(row["config"], [*overrides, f"seed={seed}"])
                    command = " ".join(["bash run.sh", row["config"], *overrides, f"seed={seed}"])
                    runs.append(
                        {
                            "label": label,
                            "domain": domain,
                            "model": model,
                            "seed": seed,
                            "eval": str(run_dir_of(cfg)),
                            "train": shlex.join(command.split()),
                        }
                    )
    return runs


def table_commands(name: str) -> str:
    """The shell commands that regenerate a table: every training run, then one eval.py call
    per training domain (and model size: one engine holds one architecture) over all
    evaluation sets, in and out of domain."""
    tables = load_tables()
    key = _table_name(name, tables)
    spec, runs = tables[key], table_runs(name)
    seen, lines = (
        set(),
        [f"# {key}: {spec['title']}", "# 1. training runs (each resumable with resume=<run>/ckpt/step_N)"],
    )
    for run in runs:
        if run["train"] and run["train"] not in seen:
            seen.add(run["train"])
            lines.append(run["train"])
    lines.append("# 2. evaluation (writes tables and figures under runs/tables/)")
    sets = ",".join(EVAL_SETS)
    base_seeds = ",".join(str(s) for s in spec["seeds"])
    for domain, model in dict.fromkeys((r["domain"], r["model"]) for r in runs):
        entries = list(
            dict.fromkeys(f"{r['label']}={r['eval']}" for r in runs if (r["domain"], r["model"]) == (domain, model))
        )
        out = f"runs/tables/{key.split(':')[1]}/{domain}" + (f"-{Path(model).name}" if model else "")
        lines.append(
            shlex.join(
                [
                    ".venv/bin/python",  # runnable as printed, from the checkout, without activating .venv
                    "eval.py",
                    "--ckpt",
                    ",".join(entries),
                    "--sets",
                    sets,
                    "--base-seeds",
                    base_seeds,
                    "--config",
                    domain,
                    "--out",
                    out,
                ]
            )
        )
    return "\n".join(lines)


def description(yaml_text: str) -> str:
    """The first sentence of a config file's leading comment block (which may span lines): up to
    the first period that ends the text or is not followed by a lower-case word ("Digit-exp. emission").

    >>> description("# CREDO on code (tab:hyper): Qwen3-8B trained\\n# on DeepCoder. The rest.\\nmethod: credo")
    'CREDO on code (tab:hyper): Qwen3-8B trained on DeepCoder.'
    >>> description("# Decomposition (row 'Digit-exp. emission'): CREDO. More.")
    "Decomposition (row 'Digit-exp. emission'): CREDO."
    """
    words = []
    for line in yaml_text.splitlines():
        if not line.startswith("#"):
            break
        words += line.lstrip("#").split()
    text = " ".join(words)
    end = re.search(r"\.(?=\s+[^a-z]|$)", text)
    return text[: end.end()] if end else text


def list_configs() -> str:
    """Every config with the first sentence of its comment and the table rows it trains."""
    tables = load_tables()
    rows_of: dict[str, list[str]] = {}
    for key, spec in tables.items():
        for row in spec["rows"]:
            if "config" in row:
                extra = f" [{' '.join(row['set'])}]" if row.get("set") else ""
                rows_of.setdefault(row["config"], []).append(f"{key} '{row['label']}'{extra}")
    lines = []
    for path in (CONFIG_DIR / f"{name}.yaml" for name in config_names()):
        wrapped = textwrap.wrap(description(path.read_text()), width=100) or [""]
        lines.append(f"{path.stem:<18} {wrapped[0]}")
        lines.extend(f"{'':<18} {more}" for more in wrapped[1:])
        for where in rows_of.get(path.stem, []):
            lines.append(f"{'':<18}   -> {where}")
    lines.append(
        f"\ntables ({TABLES_FILE.relative_to(ROOT)}): {', '.join(tables)}; "
        "`bash run.sh table <name>` prints their commands"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """`python -m evaluation.tables --list` (bash run.sh list) or `--table <name>` (bash run.sh table);
    `--debug` gives the traceback of an error."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        if argv == ["--list"]:
            print(list_configs())
        elif len(argv) == 2 and argv[0] == "--table":
            print(table_commands(argv[1]))
        else:
            raise ValueError(f"usage: bash run.sh list | bash run.sh table <name>; tables: {', '.join(load_tables())}")
    except INPUT_ERRORS as error:
        if debug:
            raise
        sys.exit(f"credo: {one_line(error)}")


if __name__ == "__main__":
    main()

"""docs/design.md names only what exists: every `module.name` in backticks resolves to a module of
ours and an attribute of it, every registry it lists is a dict holding its default entry, and every
config key it names is a key of Config."""

import importlib
import re
from pathlib import Path

import pytest

from schema import Config

ROOT = Path(__file__).resolve().parent.parent
DESIGN = (ROOT / "docs" / "design.md").read_text()
NAMES = sorted(set(re.findall(r"`([a-z_]+(?:\.[A-Za-z_]+)*)`", DESIGN)))
MODULES = {p.stem for p in ROOT.glob("*.py")} | {
    f"{p.parent.name}.{p.stem}" for p in ROOT.glob("*/*.py") if (p.parent / "__init__.py").exists()
}
KEYS = {f.name for f in Config.__dataclass_fields__.values()}


def resolve(name: str):
    """The object `name` (a module of ours, then attributes) stands for; AttributeError if none."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in MODULES:
            found = importlib.import_module(module)
            for attr in parts[cut:]:
                found = getattr(found, attr)
            return found
    raise LookupError(f"{name}: no module of ours")


def registered(entry, registry: dict) -> bool:
    """Whether `entry` is a value of `registry`, or the function an entry wraps (a LossTerm's loss,
    a Method's rewards, a Read's function)."""
    wrapped = [value for entry_record in registry.values() for value in getattr(entry_record, "__dict__", {}).values()]
    return any(entry is value for value in [*registry.values(), *wrapped])


@pytest.mark.parametrize("name", [n for n in NAMES if ("." in n or n in MODULES) and not n.endswith(".py")])
def test_every_named_module_and_function_exists(name):
    if name in KEYS:
        return
    assert resolve(name) is not None


def test_every_registry_row_is_a_registry_holding_its_default():
    rows = [line for line in DESIGN.splitlines() if line.startswith("| ") and " into `" in line]
    assert len(rows) == 7
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        key = re.findall(r"`([a-z_]+)`", cells[1])[0]
        registry = resolve(re.findall(r"into `([a-z_.A-Z]+)`", cells[2])[0])
        assert key in KEYS and isinstance(registry, dict), row
        for entry in re.findall(r"`([a-z_.]+)`", cells[3]):
            assert registered(resolve(entry), registry), (row, entry)


def test_the_names_are_read_from_the_page():
    """The reader finds the page's names: a typo in a name would be a failing parameter above."""
    assert {"credo.train_step", "methods.TARGETS", "confidence.READS", "metrics"} <= set(NAMES)
    with pytest.raises(AttributeError):
        resolve("methods.no_such_registry")

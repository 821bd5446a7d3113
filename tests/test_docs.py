"""The docs name only what exists: every `bash run.sh X` is a target of run.sh or a config, every
repository path a doc names in backticks exists in the checkout, and neither a doc nor a docstring
points outside the clone (the project's own inputs from elsewhere, such as the paper, are cited by
title and label; ../shared is named only as the fixture resolver's root, infra/realparts.py). A table
a command writes is included from its file (bench/includes.py), and every include holds the file's
current content.

The research journal (docs/journal/) is a dated record of what was true then, and is not checked."""

import ast
import json
import re
from pathlib import Path

import pytest

import config
from bench import includes

ROOT = config.ROOT
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md"))]
RUN_TARGET = re.compile(r"bash run\.sh ([a-z][a-z0-9_-]*)")
# A backticked repository path: starts with a top-level file or folder of the checkout
PATH_IN_BACKTICKS = re.compile(r"`([A-Za-z0-9_.][A-Za-z0-9_./*-]*)`")
GENERATED = ("runs/", "data/", ".cache/", ".venv/", "bench/results/")  # written by commands, not committed
OUTSIDE = re.compile(r"\.\./shared/(?!fixtures|realdata)|shared/(paper|gpu|design|peer|hooks)/")


def run_targets() -> set[str]:
    """The case labels of run.sh's dispatch, and every config name (`bash run.sh <config>`)."""
    labels = set()
    for line in (ROOT / "run.sh").read_text().splitlines():
        match = re.match(r"^  ([a-z|-]+)\)$", line)
        if match:
            labels.update(match.group(1).split("|"))
    return labels | set(config.config_names())


def test_the_target_reader_by_hand():
    assert {"test", "toy", "ask", "serve", "tiny", "credo"} <= run_targets()


def written_by_the_reader(text: str) -> set[str]:
    """What a doc tells its reader to write ("and write `configs/credo_brier.yaml`"): named before it exists."""
    return set(re.findall(r"write `([^`]+)`", text))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_run_sh_target_a_doc_names_exists(doc):
    text = doc.read_text()
    written = {Path(path).stem for path in written_by_the_reader(text) if path.startswith("configs/")}
    missing = sorted(set(RUN_TARGET.findall(text)) - run_targets() - written)
    assert missing == [], f"{doc.name} names bash run.sh targets that do not exist: {missing}"


def repository_paths(text: str) -> list[str]:
    """The backticked tokens of `text` that name something under a top-level entry of the checkout."""
    tops = {p.name for p in ROOT.iterdir()} - {".git"}
    found = []
    for token in PATH_IN_BACKTICKS.findall(text):
        head = token.split("/")[0]
        if "/" in token and head in tops and not token.startswith(GENERATED):
            found.append(token)
        elif "/" not in token and token in tops:
            found.append(token)
    return found


def test_the_path_reader_by_hand():
    assert repository_paths("see `credo.py`, `worlds/toy.py`, `runs/x/ckpt`, `x.py`, `losses.py:12`") == [
        "credo.py",
        "worlds/toy.py",
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_repository_path_a_doc_names_exists(doc):
    text = doc.read_text()
    written = written_by_the_reader(text)
    missing = [t for t in repository_paths(text) if t not in written and not list(ROOT.glob(t.rstrip("/")))]
    assert missing == [], f"{doc.name} names paths that are not in the checkout: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_a_doc_makes_resolves(doc):
    """A Markdown link to a file or folder of the checkout ([journal/](journal/)) points at one
    that exists: a file removed from the tree takes its links with it."""
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()) if not re.match(r"[a-z]+:|#", t)]
    missing = [t for t in targets if not (doc.parent / t.split("#")[0]).exists()]
    assert missing == [], f"{doc.name} links to what is not in the checkout: {missing}"


def python_files() -> list[Path]:
    skip = (".venv", ".cache", ".git", "runs", "data")
    return [p for p in ROOT.rglob("*.py") if not set(p.relative_to(ROOT).parts) & set(skip)]


def test_no_doc_or_docstring_points_outside_the_clone():
    pointing = [doc.name for doc in DOCS if OUTSIDE.search(doc.read_text())]
    for path in python_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                if OUTSIDE.search(doc):
                    pointing.append(f"{path.relative_to(ROOT)}:{getattr(node, 'name', 'module')}")
    assert pointing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_include_holds_its_files_current_content(doc):
    text, name = doc.read_text(), str(doc.relative_to(ROOT))
    for block in includes.blocks(text, name):
        assert (ROOT / block.path).is_file(), f"{name}:{block.line} includes {block.path}, which does not exist"
    stale = includes.stale(text, name)
    assert stale == [], f"{name} includes stale copies of {stale}: .venv/bin/python bench/includes.py {name}"


def test_the_results_include_the_benchmark_summary():
    paths = [block.path for block in includes.blocks((ROOT / "docs/results.md").read_text(), "results.md")]
    assert "bench/results/summary.md" in paths


def test_includes_by_hand(tmp_path):
    (tmp_path / "t.md").write_text("| a |\n|---|\n")
    doc = "x\n<!-- include: t.md -->\nold\n<!-- end include -->\ny\n<!-- include: t.md -->\n<!-- end include -->\n"
    assert includes.stale(doc, "d.md", tmp_path) == ["t.md", "t.md"]
    fresh = includes.refresh(doc, "d.md", tmp_path)
    assert fresh == (
        "x\n<!-- include: t.md -->\n| a |\n|---|\n<!-- end include -->\n"
        "y\n<!-- include: t.md -->\n| a |\n|---|\n<!-- end include -->\n"
    )
    assert includes.stale(fresh, "d.md", tmp_path) == []
    assert includes.refresh(fresh, "d.md", tmp_path) == fresh


@pytest.mark.parametrize(
    "doc, message",
    [
        ("a\n<!-- include: t.md -->\nb\n", "d.md:2: <!-- include: t.md --> has no <!-- end include --> after it"),
        ("a\n\n<!-- end include -->\n", "d.md:3: <!-- end include --> without an include before it"),
        (
            "<!-- include: t.md -->\n<!-- include: t.md -->\n<!-- end include -->\n",
            "d.md:2: an include opens inside the one of line 1, never closed",
        ),
        (
            "<!-- include:t.md -->\n",
            "d.md:1: malformed include marker '<!-- include:t.md -->'; write <!-- include: <path> -->",
        ),
        ("<!-- end include-->\n", "d.md:1: malformed end marker '<!-- end include-->'; write <!-- end include -->"),
        ("<!-- include: gone.md -->\n<!-- end include -->\n", "d.md:1: includes gone.md, which does not exist"),
    ],
)
def test_a_malformed_include_names_the_doc_and_line(tmp_path, doc, message):
    (tmp_path / "t.md").write_text("t\n")
    with pytest.raises(includes.IncludeError) as error:
        includes.refresh(doc, "d.md", tmp_path)
    assert str(error.value) == message


def test_the_readmes_before_row_is_the_documented_one():
    """The README states the shipped warm start's figures; they are those worlds/toy_expected.json
    documents, which `bash run.sh toy` compares its own with."""
    before = json.loads((ROOT / "worlds" / "toy_expected.json").read_text())["before"]
    readme = " ".join((ROOT / "README.md").read_text().split())  # as read, whatever the line breaks
    credo, rlcr = before["CREDO"], before["RLCR"]
    stated = (
        f"CREDO's readout accuracy {credo['acc']:.3f}, AUROC {credo['auroc']:.3f}, ECE {credo['ece']:.3f}; "
        f"RLCR's numeral accuracy {rlcr['acc']:.3f}, AUROC {rlcr['auroc']:.3f}, ECE {rlcr['ece']:.3f}"
    )
    assert stated in readme

"""Real third-party parts for the tests: one resolver that finds them, one command that fetches them.

    python -m infra.realparts fetch [--only a,b] [--root DIR]  # `bash run.sh fixtures`: download, check, install
    python -m infra.realparts where                            # each part and where it resolves (or was looked for)

A *part* is a folder of files the project does not own and never commits: Qwen3's real tokenizer
(`qwen3-tokenizer`) and real dataset records laid out as the Hugging Face hub serves them
(`math500`, `aime24`, `aime25`, `amc`, `deepscaler`, `humanevalplus`), plus one LiveCodeBench record
(`lcb`). Every root holds them in one layout, that of `../shared`: `fixtures/qwen3-tokenizer/`,
`realdata/<name>/`. `resolve(name)` looks, in order, in

1. the directory named by `$CREDO_FIXTURES` (a user's own copy),
2. `../shared` beside the checkout, where it exists (the project's CI),
3. `.cache/shared/` in the checkout (what `fetch` writes),

and returns the first folder where every file pattern of the part matches, or None.

`fetch` downloads each part from its public source at a pinned revision (the hub through
huggingface_hub, which honours `HF_ENDPOINT`; GitHub's raw files for the LiveCodeBench record,
`$CREDO_GITHUB_RAW` for a mirror), checks each file's sha256 against the pinned checksum where one is
known, else against the one recorded at its first download (`<root>/fixtures.lock.json`), and only then
moves the part into place. Any failure is one line naming the part, the file and what to do.

Not here: how the tests use the parts (tests/conftest.py: the `real_part` fixture, the `real_parts`
marker, skips with a reason, failures under CI=true); converting records (dataprep/data.py, dataprep/convert.py).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from grading.judge import parse_python

ROOT = Path(__file__).resolve().parent.parent
CACHE_ROOT = ROOT / ".cache" / "shared"  # laid out as ../shared is: fixtures/, realdata/
ENV_ROOT = "CREDO_FIXTURES"
GITHUB_RAW = "https://raw.githubusercontent.com"
LOCK_NAME = "fixtures.lock.json"
FETCH_HINT = "bash run.sh fixtures"


class FixtureError(RuntimeError):
    """A part could not be fetched or does not check out; the message is one line saying what to do."""


@dataclass(frozen=True)
class Part:
    """One real part: where it lies in a root, which files make it whole, and where it comes from.

    ``source`` is ``hf-model``, ``hf-dataset`` or ``github``; ``repo`` and ``revision`` (a commit) pin it.
    ``patterns`` are the files (fnmatch, relative to the part's folder) that must all be present.
    ``pinned`` maps a file to its known sha256; a file without one is checked against the sha256 recorded
    at its first download. ``build`` turns a fetched GitHub file into the part's files (name -> bytes).
    """

    name: str
    where: str
    patterns: tuple[str, ...]
    source: str
    repo: str
    revision: str
    pinned: dict[str, str] = field(default_factory=dict)
    github_path: str = ""
    build: Callable[[bytes], dict[str, bytes]] | None = None
    note: str = ""


def lcb_record_from_source(source: bytes) -> dict[str, bytes]:
    """The LiveCodeBench record 1873_A as one JSONL line, read from the Python file that embeds it
    (a dict literal assigned to ``question``), with ``public_test_cases`` serialised by ``json.dumps``
    as the hub stores it; read with ``ast.literal_eval``, never executed."""
    tree = parse_python(source.decode("utf-8"))
    literal = next(
        (
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "question" for t in node.targets)
        ),
        None,
    )
    if literal is None:
        raise FixtureError("the LiveCodeBench source file has no `question = {...}` literal")
    record = ast.literal_eval(literal)
    if not isinstance(record.get("public_test_cases"), list):
        raise FixtureError("the LiveCodeBench record's public_test_cases is not a list in its source file")
    record["public_test_cases"] = json.dumps(record["public_test_cases"])
    return {"kaggle_1873_A.jsonl": (json.dumps(record) + "\n").encode("utf-8")}


# Revisions: Qwen3-4B, MATH-500, AIME 2024, AMC and DeepScaleR are the hub's `main` as public code pinned
# it (docs/fixtures.md names where); AIME 2025 and HumanEval+ as ../shared's PROVENANCE files record them.
PARTS: dict[str, Part] = {
    part.name: part
    for part in [
        Part(
            "qwen3-tokenizer",
            "fixtures/qwen3-tokenizer",
            ("tokenizer.json", "tokenizer_config.json"),
            "hf-model",
            "Qwen/Qwen3-4B",
            "74d4bd2bd4bff9cafc9345221320bffb08b406a3",
            pinned={"tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"},
            note="every Qwen3 size shares tokenizer.json, byte for byte",
        ),
        Part(
            "math500",
            "realdata/math500",
            ("test.jsonl",),
            "hf-dataset",
            "HuggingFaceH4/MATH-500",
            "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be",
        ),
        Part(
            "aime24",
            "realdata/aime24",
            ("data/train-*.parquet",),
            "hf-dataset",
            "HuggingFaceH4/aime_2024",
            "2fe88a2f1091d5048c0f36abc874fb997b3dd99a",
        ),
        Part(
            "aime25",
            "realdata/aime25",
            ("data/train-*.parquet",),
            "hf-dataset",
            "MathArena/aime_2025",
            "c94da77eb22bbd6439e62a323bec18493a421302",
        ),
        Part(
            "amc",
            "realdata/amc",
            ("data/train-*.parquet",),
            "hf-dataset",
            "AI-MO/aimo-validation-amc",
            "69d78a4a2c840e82d69af6bc742bda09005f6316",
            pinned={
                "data/train-00000-of-00001.parquet": "4de056fd006062cee46e3900727dd5d00094b8592ed0bfd6b5dfae2267f72dd7"
            },
        ),
        Part(
            "deepscaler",
            "realdata/deepscaler",
            ("deepscaler.json",),
            "hf-dataset",
            "agentica-org/DeepScaleR-Preview-Dataset",
            "b6ae8c60f5c1f2b594e2140b91c49c9ad0949e29",
        ),
        Part(
            "humanevalplus",
            "realdata/humanevalplus",
            ("data/test-*.parquet",),
            "hf-dataset",
            "evalplus/humanevalplus",
            "d32357cf319e50e9c8d8dab5ea876c72b0fd321b",
        ),
        Part(
            "lcb",
            "realdata/lcb",
            ("kaggle_1873_A.jsonl",),
            "github",
            "Kaggle/kaggle-benchmarks",
            "0d759286b5dcb83878e27840fcb42b559062abf3",
            github_path="documentation/examples/code_generation.py",
            build=lcb_record_from_source,
            note="LiveCodeBench 1873_A as a dict in Kaggle's example",
        ),
    ]
}


# --- resolving ----------------------------------------------------------------------------------


def roots() -> list[Path]:
    """The roots looked in, in order: $CREDO_FIXTURES (an error if it names no directory), ../shared
    where it exists, .cache/shared."""
    found = []
    named = os.environ.get(ENV_ROOT)
    if named:
        if not Path(named).is_dir():
            raise FixtureError(
                f"${ENV_ROOT}={named} is not a directory (it should hold fixtures/ and realdata/ "
                f"as ../shared does); unset it or point it at such a directory"
            )
        found.append(Path(named))
    if (ROOT.parent / "shared").is_dir():
        found.append(ROOT.parent / "shared")
    found.append(CACHE_ROOT)
    return found


def is_whole(folder: Path, part: Part) -> bool:
    """Every pattern of ``part`` matches a file under ``folder``."""
    if not folder.is_dir():
        return False
    files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    return all(any(fnmatch(f, pattern) for f in files) for pattern in part.patterns)


def resolve(name: str) -> Path | None:
    """The folder of part ``name`` in the first root that holds it whole, or None."""
    part = PARTS[name]
    return next((root / part.where for root in roots() if is_whole(root / part.where, part)), None)


def missing_reason(name: str) -> str:
    """One line for a test that needs part ``name`` and cannot find it."""
    looked = ", ".join(str(root / PARTS[name].where) for root in roots())
    return f"real part '{name}' not found (looked in {looked}): run `{FETCH_HINT}` to fetch it"


# --- fetching -----------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def answers(url: str) -> str | None:
    """None if a server answers at ``url`` (any HTTP status; proxies from the environment honoured), else why not.
    huggingface_hub retries a refused connection for ~25 s a file; this asks once."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=20):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as error:
        return f"{type(error).__name__}: {_first_line(error)}"


def download_hub(part: Part, into: Path) -> None:
    """The files of ``part``'s patterns at its pinned revision, through huggingface_hub (HF_ENDPOINT honoured)."""
    import huggingface_hub  # third-party, on use: only a download needs it, not the resolver the tests import
    from huggingface_hub import constants

    endpoint = constants.ENDPOINT
    unreachable = answers(endpoint)
    if unreachable:
        raise FixtureError(
            f"could not reach the hub at {endpoint} ({unreachable}) for {part.repo}; check the network "
            f"or HF_ENDPOINT, or copy the part to {CACHE_ROOT / part.where}"
        )
    repo_type = "model" if part.source == "hf-model" else "dataset"
    try:
        huggingface_hub.snapshot_download(
            repo_id=part.repo,
            repo_type=repo_type,
            revision=part.revision,
            allow_patterns=list(part.patterns),
            local_dir=into,
        )
    except Exception as error:
        raise FixtureError(
            f"could not download {part.repo}@{part.revision[:12]} ({', '.join(part.patterns)}) "
            f"from {endpoint} ({type(error).__name__}: {_first_line(error)}); check the network or "
            f"HF_ENDPOINT, or copy the part to {CACHE_ROOT / part.where}"
        ) from error
    shutil.rmtree(into / ".cache", ignore_errors=True)  # huggingface_hub's own bookkeeping


def download_github(part: Part, into: Path) -> None:
    """The pinned GitHub file of ``part`` (from $CREDO_GITHUB_RAW or raw.githubusercontent.com), built
    into the part's files; the source file is kept beside them so that its checksum is checked too."""
    url = f"{os.environ.get('CREDO_GITHUB_RAW', GITHUB_RAW).rstrip('/')}/{part.repo}/{part.revision}/{part.github_path}"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            source = response.read()
    except Exception as error:
        raise FixtureError(
            f"could not download {url} ({type(error).__name__}: {_first_line(error)}); check the "
            f"network or CREDO_GITHUB_RAW, or copy the part to {CACHE_ROOT / part.where}"
        ) from error
    into.mkdir(parents=True, exist_ok=True)
    (into / "source" / Path(part.github_path).name).parent.mkdir(parents=True, exist_ok=True)
    (into / "source" / Path(part.github_path).name).write_bytes(source)
    for name, payload in part.build(source).items():
        (into / name).write_bytes(payload)


def check_files(part: Part, folder: Path, recorded: dict[str, str]) -> dict[str, str]:
    """sha256 of every file of ``folder``: each must equal its pinned checksum, else the one recorded at its
    first download; returns them all (what the lock records)."""
    sums = {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    if not is_whole(folder, part):
        raise FixtureError(
            f"the download of {part.repo}@{part.revision[:12]} lacks {', '.join(part.patterns)}; "
            f"it got {sorted(sums) or 'no file'}"
        )
    for name, digest in sums.items():
        expected, why = (
            (part.pinned[name], "pinned")
            if name in part.pinned
            else (recorded.get(name), "recorded at its first download")
        )
        if expected is not None and digest != expected:
            raise FixtureError(
                f"{part.where}/{name}: sha256 {digest[:16]}... but {expected[:16]}... is {why}: "
                f"the download is corrupt or the source changed at a pinned revision; "
                f"run `{FETCH_HINT}` again, and if it persists report it"
            )
    return sums


def fetch_part(part: Part, root: Path, lock: dict) -> str:
    """Download ``part`` into ``root``'s staging area, check it, move it into place; one line of what was written."""
    staging = root / ".staging" / part.name
    shutil.rmtree(staging, ignore_errors=True)
    (download_github if part.source == "github" else download_hub)(part, staging)
    recorded = (
        lock.get(part.name, {}).get("files", {}) if lock.get(part.name, {}).get("revision") == part.revision else {}
    )
    sums = check_files(part, staging, recorded)
    final = root / part.where
    shutil.rmtree(final, ignore_errors=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(final)
    lock[part.name] = {"source": f"{part.source}:{part.repo}", "revision": part.revision, "files": sums}
    size = sum((final / name).stat().st_size for name in sums)
    pinned = sum(name in part.pinned for name in sums)
    how = (f"{pinned} pinned, " if pinned else "") + (
        f"{len(sums) - pinned} recorded at first download" if not recorded else f"{len(sums) - pinned} as recorded"
    )
    return f"{part.name}: {final} ({len(sums)} files, {size / 1e6:.1f} MB; sha256: {how})"


def fetch(names: list[str], root: Path = CACHE_ROOT, log: Callable[[str], None] = print) -> list[str]:
    """Fetch every part of ``names`` into ``root``; returns the failures (one line each), after trying all."""
    root.mkdir(parents=True, exist_ok=True)
    lock_path = root / LOCK_NAME
    lock = json.loads(lock_path.read_text()) if lock_path.exists() else {}
    failures = []
    for name in names:
        try:
            log(f"[fixtures] {fetch_part(PARTS[name], root, lock)}")
        except FixtureError as error:
            failures.append(f"{name}: {error}")
        lock_path.write_text(json.dumps(lock, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(root / ".staging", ignore_errors=True)
    return failures


def _first_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _names(only: str | None) -> list[str]:
    names = only.split(",") if only else list(PARTS)
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise FixtureError(f"--only {only}: unknown part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Real third-party parts for the tests (see the module docstring).")
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="download the parts at their pinned revisions and check their sha256")
    get.add_argument("--only", default=None, help=f"comma-separated parts (default: all of {', '.join(PARTS)})")
    get.add_argument("--root", default=str(CACHE_ROOT), help="where to write them (default: .cache/shared)")
    sub.add_parser("where", help="where each part resolves")
    args = parser.parse_args(argv)
    try:
        if args.command == "where":
            for name in PARTS:
                found = resolve(name)
                print(f"{name}: {found}" if found else f"{name}: - ({missing_reason(name)})")
            return 0
        failures = fetch(_names(args.only), Path(args.root))
    except FixtureError as error:
        print(f"fixtures: {error}", file=sys.stderr)
        return 2
    for line in failures:
        print(f"fixtures: {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

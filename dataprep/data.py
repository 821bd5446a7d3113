"""Dataset preparation: the sets of tab:data as normalized JSONL files.

``python -m dataprep.data prepare [--only name,...] [--out data] [--local name=path.jsonl]
[--snapshot source=dir] [--strict]`` downloads each source from the Hugging Face hub
(``huggingface_hub.snapshot_download``) or reads a local folder laid out like the hub
snapshot (``--snapshot``), converts every raw record to the normalized schema, makes
the fixed seeded splits, checks every count against tab:data, and writes

* ``<out>/math/<set>.jsonl``: ``{"id", "problem", "answer"}`` (answer a string);
* ``<out>/code/<set>.jsonl``: ``{"id", "problem", "tests"}``, ``tests`` in the schema of
  ``verifier.verify_code`` (``stdio`` or ``call``);
* ``<out>/manifest.json``: per set the source, requested and resolved revision, count
  beside the expected count, records excluded (by reason) and the sha256 of the file.

A count that differs from tab:data is a warning naming both counts; with ``--strict`` it
raises ``CountMismatchError`` and nothing is written.  A record a converter cannot express
faithfully or read is excluded with a reason counted in the manifest, never silently and
never aborting its source (``docs/data.md``: each set's source and conversion).

Not here: reading a prepared file for training or evaluation (``problems.load_rows``, so
that the loop never loads the converters); tab:data's evaluation sets (``evaluation/evalsets.py``);
the converters of raw records and LiveCodeBench's pickled tests (``dataprep/convert.py``);
sampling, verifying or scoring the rows (``rollout.py``, ``verifier.py``, ``eval.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import config
import problems
from dataprep import convert
from evaluation.evalsets import EVAL_SETS, SET_TITLES  # noqa: F401 (data.EVAL_SETS: read with the sets it describes)

logger = logging.getLogger(__name__)

DEFAULT_SEED, DEFAULT_OUT = 1234, "data"


class CountMismatchError(ValueError):
    """A prepared set does not have the number of problems tab:data gives."""


# ---------------------------------------------------------------------------
# The registry of tab:data
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One hub dataset: where it is and how one raw record becomes a row.

    ``convert(record, origin)`` gets the raw record and the file it came from (relative
    to the snapshot) and returns a normalized row, or raises ``convert.Excluded``.
    ``repo_id=None`` means no verified public source: the set must come from
    ``--local``.
    """

    repo_id: str | None
    revision: str
    patterns: tuple[str, ...]
    convert: Callable[[dict, str], dict] | None
    note: str = ""


@dataclass(frozen=True)
class OutputSet:
    """One written file of tab:data: its domain, source, expected count and selection.

    ``split`` is ``"train"`` or ``"test"`` for the seeded splits of a pooled source;
    ``keep(row)`` selects rows of a shared source (a year, a date window).
    """

    domain: str
    source: str
    count: int
    split: str | None = None
    keep: Callable[[dict], bool] | None = field(default=None, compare=False)


SOURCES: dict[str, Source] = {
    "deepscaler": Source(
        "agentica-org/DeepScaleR-Preview-Dataset",
        "main",
        ("deepscaler.json",),
        convert.convert_deepscaler,
        "revision not pinned (no commit found offline)",
    ),
    "math500": Source(
        "HuggingFaceH4/MATH-500", "main", ("test.jsonl",), convert.convert_math500, "revision not pinned"
    ),
    "aime24": Source(
        "HuggingFaceH4/aime_2024", "main", ("data/train-*.parquet",), convert.convert_h4_aime, "revision not pinned"
    ),
    "aime25": Source(
        "MathArena/aime_2025",
        "main",
        ("data/train-*.parquet",),
        convert.matharena_converter("aime25"),
        "revision not pinned",
    ),
    "aime26": Source(
        "MathArena/aime_2026",
        "main",
        ("data/train-*.parquet",),
        convert.matharena_converter("aime26"),
        "revision not pinned",
    ),
    "amc": Source(
        "AI-MO/aimo-validation-amc",
        "main",
        ("data/train-*.parquet",),
        convert.convert_aimo_amc,
        "AMC 12 2022-2023 with integer answers; revision not pinned",
    ),
    "amc24": Source(
        None, "", (), None, "no public hub dataset of AMC 2024 (45 problems) could be identified; pass --local"
    ),
    "deepcoder": Source(
        "agentica-org/DeepCoder-Preview-Dataset",
        "main",
        ("primeintellect/train-*.parquet", "taco/train-*.parquet", "lcbv5/train-*.parquet"),
        convert.convert_deepcoder,
        "revision not pinned",
    ),
    "humanevalplus": Source(
        "evalplus/humanevalplus",
        "d32357cf319e50e9c8d8dab5ea876c72b0fd321b",
        ("data/test-*.parquet",),
        convert.convert_humanevalplus,
    ),
    "lcb": Source(
        "livecodebench/code_generation_lite",
        "main",
        ("test4.jsonl", "test5.jsonl", "test6.jsonl"),
        convert.convert_lcb,
        "release files covering 2024-07 .. 2025-04; revision not pinned",
    ),
}


def _year(year: str) -> Callable[[dict], bool]:
    """Selects rows of one contest year."""
    return lambda row: row["year"] == year


def _window(start: str, end: str) -> Callable[[dict], bool]:
    """Selects rows with ``start <= date < end`` (ISO dates)."""
    return lambda row: start <= row["date"] < end


OUTPUTS: dict[str, OutputSet] = {
    "deepscaler_train": OutputSet("math", "deepscaler", 9500, split="train"),
    "deepscaler_test": OutputSet("math", "deepscaler", 500, split="test"),
    "math500": OutputSet("math", "math500", 500),
    "aime24": OutputSet("math", "aime24", 30),
    "aime25": OutputSet("math", "aime25", 30),
    "aime26": OutputSet("math", "aime26", 30),
    "amc23": OutputSet("math", "amc", 46, keep=_year("2023")),
    "amc24": OutputSet("math", "amc24", 45),
    "deepcoder_train": OutputSet("code", "deepcoder", 9500, split="train"),
    "deepcoder_test": OutputSet("code", "deepcoder", 500, split="test"),
    "humanevalplus": OutputSet("code", "humanevalplus", 163),
    # LiveCodeBench windows as published: v5 2024-08-01..2025-02-01, v6 2025-02-01..2025-05-01.
    "lcb_v5": OutputSet("code", "lcb", 279, keep=_window("2024-08-01", "2025-02-01")),
    "lcb_v6": OutputSet("code", "lcb", 131, keep=_window("2025-02-01", "2025-05-01")),
}


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def download(source: Source) -> Path:
    """Snapshot of ``source`` on disk (``huggingface_hub.snapshot_download``)."""
    import huggingface_hub  # third-party, on use: only a download needs it, not training or evaluation

    try:
        return Path(
            huggingface_hub.snapshot_download(
                repo_id=source.repo_id,
                repo_type="dataset",
                revision=source.revision,
                allow_patterns=list(source.patterns),
            )
        )
    except Exception as error:
        name = next(key for key, value in SOURCES.items() if value is source)
        raise RuntimeError(
            f"could not download the dataset {source.repo_id!r} from the Hugging Face hub "
            f"({type(error).__name__}: {' '.join(str(error).split())}); "
            f"with a copy of its files laid out as on the hub, run `bash run.sh prepare --snapshot {name}=DIR`"
        ) from error


def resolved_revision(snapshot: Path) -> str:
    """The commit of a hub snapshot directory (``.../snapshots/<commit>``), else ``unknown``."""
    return snapshot.name if snapshot.parent.name == "snapshots" else "unknown"


# ---------------------------------------------------------------------------
# Splits, checks, writing
# ---------------------------------------------------------------------------


def dedupe_by_problem(rows: list[dict]) -> tuple[list[dict], int]:
    """Rows with the first of each identical (whitespace-normalized) problem, by id order."""
    seen, kept = set(), []
    for row in sorted(rows, key=lambda r: r["id"]):
        key = " ".join(row["problem"].split())
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept, len(rows) - len(kept)


def seeded_split(rows: list[dict], n_train: int, n_test: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Disjoint train/test samples of a pool, fixed by ``seed`` (the pool is ordered by id
    first, so the result does not depend on file order).  The first ``n_test`` of the
    sample are the test set, the rest the training set; a pool smaller than
    ``n_train + n_test`` is all sampled, so the training set comes out short (and the
    count check reports it)."""
    pool = sorted(rows, key=lambda r: r["id"])
    chosen = random.Random(seed).sample(pool, min(len(pool), n_train + n_test))
    return chosen[n_test:], chosen[:n_test]


def check_unique_ids(sets: dict[str, list[dict]]) -> None:
    """Raise ``ValueError`` naming a set that holds an id twice."""
    for name, rows in sets.items():
        repeated = [key for key, n in Counter(row["id"] for row in rows).items() if n > 1]
        if repeated:
            raise ValueError(f"set {name!r}: id(s) {repeated[:5]} occur more than once")


def count_mismatches(sets: dict[str, list[dict]], expected: dict[str, int]) -> list[str]:
    """One line per set whose size differs from ``expected``, naming both counts.

    >>> count_mismatches({"aime24": [{}]}, {"aime24": 30})
    ['aime24: expected 30 problems (tab:data), got 1']
    """
    return [
        f"{name}: expected {expected[name]} problems (tab:data), got {len(rows)}"
        for name, rows in sets.items()
        if len(rows) != expected[name]
    ]


def normalized(row: dict, domain: str) -> dict:
    """Only the schema fields of a row, in schema order."""
    return {key: row[key] for key in problems.ROW_FIELDS[domain]}


def write_jsonl(path: Path, rows: list[dict]) -> str:
    """Write rows as JSONL (sorted by id); return the file's sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in sorted(rows, key=lambda r: r["id"]))
    path.write_text(text, encoding="utf-8")
    return sha256_file(path)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------
# prepare
# ---------------------------------------------------------------------------


def _select_names(only: list[str] | str | None) -> list[str]:
    """Output set names to prepare (all by default); unknown names raise."""
    if only is None:
        return list(OUTPUTS)
    names = [n.strip() for n in (only.split(",") if isinstance(only, str) else only) if n.strip()]
    unknown = [n for n in names if n not in OUTPUTS]
    if unknown:
        raise ValueError(f"unknown set(s) {unknown}; known: {', '.join(OUTPUTS)}")
    return names


def load_source(name: str, domain: str, local: dict[str, str], snapshots: dict[str, str]) -> tuple[list[dict], dict]:
    """Converted rows of one source and its provenance (from ``local``, a local
    snapshot folder in ``snapshots``, or the hub)."""
    if name in local:
        if not Path(local[name]).is_file():
            raise FileNotFoundError(f"--local {name}={local[name]}: no such file (a JSONL file of normalized rows)")
        return problems.load_rows(local[name], domain), {
            "source": str(local[name]),
            "revision": "local",
            "resolved_revision": "local",
            "excluded": {},
        }
    source = SOURCES[name]
    if source.repo_id is None:
        raise ValueError(f"source {name!r} has no hub dataset ({source.note}): pass --local {name}=path.jsonl")
    if name in snapshots:
        snapshot, revision = Path(snapshots[name]), "local snapshot"
        if not snapshot.is_dir():
            raise ValueError(f"--snapshot {name}={snapshot}: not a directory")
    else:
        snapshot, revision = download(source), source.revision
    rows, excluded = convert.convert_snapshot(snapshot, source.patterns, source.convert)
    provenance = {
        "source": source.repo_id,
        "revision": revision,
        "resolved_revision": resolved_revision(snapshot),
        "excluded": dict(excluded),
    }
    if name in snapshots:
        provenance["snapshot"] = str(snapshot)
    return rows, provenance


def build_sets(
    names: list[str], seed: int, local: dict[str, str], expected: dict[str, int], snapshots: dict[str, str]
) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Rows and provenance of each requested output set (splits and selections applied)."""
    unknown = sorted(set(snapshots) - set(SOURCES))
    if unknown:
        raise ValueError(f"--snapshot names unknown source(s) {unknown}; known: {', '.join(SOURCES)}")
    sets, info, cache = {}, {}, {}
    for name in names:
        spec = OUTPUTS[name]
        local_name = name if name in local else spec.source
        if spec.keep is not None and local_name in local and local_name == spec.source:
            raise ValueError(
                f"--local {local_name}: set {name!r} selects rows of source {local_name!r} by year or "
                f"date, which normalized rows do not carry; pass --local {name}=path.jsonl instead"
            )
        if local_name not in cache:
            cache[local_name] = load_source(local_name, spec.domain, local, snapshots)
        rows, provenance = cache[local_name]
        provenance = dict(provenance)
        if spec.split is not None and local_name == spec.source:
            pool, duplicates = dedupe_by_problem(rows)
            provenance["excluded"] = {**provenance["excluded"], "duplicate problem": duplicates}
            train_name, test_name = (f"{spec.source}_train", f"{spec.source}_test")
            train, test = seeded_split(pool, expected[train_name], expected[test_name], seed)
            rows = train if spec.split == "train" else test
        elif spec.keep is not None and local_name == spec.source:
            rows = [row for row in rows if spec.keep(row)]
        sets[name] = [normalized(row, spec.domain) for row in rows]
        info[name] = provenance
    return sets, info


def prepare(
    out_dir: str | Path = DEFAULT_OUT,
    only: list[str] | str | None = None,
    seed: int = DEFAULT_SEED,
    local: dict[str, str] | None = None,
    expected: dict[str, int] | None = None,
    snapshots: dict[str, str] | None = None,
    strict: bool = False,
) -> dict:
    """Download, convert, split, check and write the sets of tab:data; return the manifest.

    The manifest on disk is merged with an existing one (entries of sets not prepared
    this time are kept; each entry records its own seed).

    ``only`` limits the output sets; ``local`` maps a source or output-set name to a
    normalized JSONL file used instead of the hub; ``snapshots`` maps a source name to
    a local folder laid out like its hub snapshot (raw records, converted as if
    downloaded); ``expected`` overrides tab:data's counts (tests).  A count that
    differs from tab:data is logged as a warning naming the set and both counts, and
    the manifest records ``count`` beside ``expected``; with ``strict`` it raises
    ``CountMismatchError`` before any file is written.
    """
    names = _select_names(only)
    expected = {name: spec.count for name, spec in OUTPUTS.items()} | (expected or {})
    sets, info = build_sets(names, seed, dict(local or {}), expected, dict(snapshots or {}))
    check_unique_ids(sets)
    mismatches = count_mismatches(sets, expected)
    if mismatches and strict:
        raise CountMismatchError("count mismatch: " + "; ".join(mismatches))
    for line in mismatches:
        logger.warning("count mismatch: %s", line)
    out_dir = Path(out_dir)
    manifest = {"sets": {}}
    for name, rows in sets.items():
        spec = OUTPUTS[name]
        path = out_dir / spec.domain / f"{name}.jsonl"
        digest = write_jsonl(path, rows)
        manifest["sets"][name] = {
            **info[name],
            "domain": spec.domain,
            "seed": seed,
            "path": path.relative_to(out_dir).as_posix(),
            "count": len(rows),
            "expected": expected[name],
            "sha256": digest,
        }
    manifest_path = out_dir / "manifest.json"
    previous = json.loads(manifest_path.read_text())["sets"] if manifest_path.exists() else {}
    manifest["sets"] = {**previous, **manifest["sets"]}
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def output_set_of(path: str | Path) -> str | None:
    """The output set that ``prepare`` writes at ``path`` (``<out>/<domain>/<name>.jsonl``), or None.

    >>> output_set_of("data/math/deepscaler_train.jsonl"), output_set_of("data/code/deepscaler_train.jsonl")
    ('deepscaler_train', None)
    """
    parts = Path(path).parts
    if len(parts) < 2 or not parts[-1].endswith(".jsonl"):
        return None
    name = parts[-1].removesuffix(".jsonl")
    return name if name in OUTPUTS and OUTPUTS[name].domain == parts[-2] else None


def prepare_on_first_use(path: str | Path, snapshots: dict[str, str] | None = None) -> bool:
    """Write ``path`` now when it is a set ``prepare`` writes and it does not exist yet (the
    download, the seeded split, the manifest), saying so; True when it did. A training run
    on a fresh machine (``bash run.sh math``) needs no separate ``prepare`` step."""
    name = output_set_of(path)
    if name is None or Path(path).exists():
        return False
    out_dir = Path(path).parent.parent
    source = SOURCES[OUTPUTS[name].source]
    origin = (snapshots or {}).get(OUTPUTS[name].source) or source.repo_id or "--local only"
    print(
        f"[data] {path} does not exist yet: preparing {name} from {origin} into {out_dir}/ "
        f"(first use only; `bash run.sh prepare` writes every set of tab:data)",
        flush=True,
    )
    entry = prepare(out_dir, only=[name], snapshots=snapshots)["sets"][name]
    print(
        f"[data] wrote {entry['count']} problems to {path} (sha256 {entry['sha256'][:12]}, {out_dir}/manifest.json)",
        flush=True,
    )
    return True


def prepare_training_split(run_args: list[str]) -> bool:
    """prepare_on_first_use for the train_data of credo.py's arguments (run_config); nothing is
    prepared for a `--dry-run`."""
    cfg = config.run_config(run_args)
    if cfg is None or "--dry-run" in run_args or not cfg.train_data:
        return False
    return prepare_on_first_use(cfg.train_data)


def first_use(run_args: list[str], builds: str | None = None) -> int:
    """`first-use`, which run.sh runs before credo.py: the arguments are checked first
    (config.check_run_arguments; `builds`: the directory run.sh builds next), and a mistake in them
    is reported as credo.py would (`credo: ...` in one line, exit 1; a traceback with --debug)
    before torch, transformers and vLLM load; then prepare_training_split."""
    config.exit_on_bad_run_arguments(run_args, builds)
    prepare_training_split(run_args)
    return 0


def _parse_pairs(items: list[str], option: str) -> dict[str, str]:
    """``name=path`` pairs from the command line."""
    pairs = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"{option} expects name=path, got {item!r}")
        pairs[name] = path
    return pairs


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m dataprep.data prepare [--only a,b] [--out data] [--seed N] [--local name=path]
    [--snapshot source=dir] [--strict]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="download, convert and write the sets of tab:data")
    prep.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(OUTPUTS)}")
    prep.add_argument("--out", default=DEFAULT_OUT)
    prep.add_argument("--seed", type=int, default=DEFAULT_SEED)
    prep.add_argument("--local", action="append", default=[], help="name=path.jsonl (normalized rows)")
    prep.add_argument(
        "--snapshot",
        action="append",
        default=[],
        help=f"source=dir: raw records in the hub's layout instead of a download ({', '.join(SOURCES)})",
    )
    prep.add_argument("--strict", action="store_true", help="a count that differs from tab:data is fatal")
    prep.add_argument("--debug", action="store_true", help="a traceback instead of one line for an error")
    first = sub.add_parser(
        "first-use",
        help="prepare the training split a run config names when it does not exist yet (run.sh, before training)",
    )
    first.add_argument("--builds", default=None, help="a directory run.sh builds next: a model under it is not checked")
    first.add_argument("run", nargs=argparse.REMAINDER, help="<config> [key=value ...], as given to credo.py")
    args = parser.parse_args(argv)
    try:
        if args.command == "first-use":
            return first_use(args.run, args.builds)
        manifest = prepare(
            args.out,
            args.only,
            args.seed,
            _parse_pairs(args.local, "--local"),
            snapshots=_parse_pairs(args.snapshot, "--snapshot"),
            strict=args.strict,
        )
    except (ValueError, KeyError, FileNotFoundError, RuntimeError) as error:  # bad input, or no hub: one line
        if getattr(args, "debug", False) or "--debug" in getattr(args, "run", ()):
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        sys.exit(f"data: {message} (--debug shows the traceback)")
    for name, entry in manifest["sets"].items():
        print(f"{name:18s} {entry['count']:6d} of {entry['expected']:6d}  {entry['path']}  {entry['sha256'][:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

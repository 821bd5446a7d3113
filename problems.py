"""The problems a run trains or evaluates on: `load_rows`, the one reader of a prepared JSONL
file (`bash run.sh prepare` writes them under data/) or of a hub math dataset id.

    rows = load_rows("data/math/deepscaler_train.jsonl", "math")   # [{"id", "problem", "answer"}, ...]

Math rows are `{"id", "problem", "answer"}` (strings); code rows `{"id", "problem", "tests"}`,
`tests` in the schema of verifier.verify_code. Only the schema's fields are kept.

`training_problems` keeps those whose prompt fits the budget, with their prompt ids, and
`QuestionStream` is the deterministic order in which a run draws them (its cursor is checkpointed).

Not here: downloading, splitting and converting the paper's datasets (dataprep/, which the
loop never imports).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import rollout as ro
from schema import Config

# The normalized row of each domain: what dataprep/data.py writes and load_rows reads.
ROW_FIELDS = {"math": ("id", "problem", "answer"), "code": ("id", "problem", "tests")}


def load_rows(source: str, domain: str) -> list[dict]:
    """Problems of a domain, from a JSONL file with every field of ROW_FIELDS[domain] (code
    ``tests`` a dict with a "kind", as prepare writes them), or from a Hugging Face math
    dataset id (downloaded; its rows get ids by index)."""
    if domain not in ROW_FIELDS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {tuple(ROW_FIELDS)}")
    path = Path(source)
    if path.exists():
        return read_row_file(path, domain)
    if source.count("/") != 1 or source.startswith((".", "/")):
        raise FileNotFoundError(
            f"train_data {source!r} is neither an existing file nor a Hugging Face dataset id "
            f"(`bash run.sh prepare` writes the paper's sets under data/)"
        )
    if domain == "code":
        raise ValueError(
            f"train_data {source!r}: code problems are read from the JSONL that `bash run.sh prepare` "
            f"writes (their tests need converting to verifier.py's schema), not from a hub id"
        )
    return _load_hub_math_rows(source)


def read_row_file(path: Path, domain: str) -> list[dict]:
    """The rows of a JSONL file in the normalized schema of ``domain``, only the schema's fields
    (id, problem and a math answer as strings); a missing or empty field names file and line."""
    fields, rows = ROW_FIELDS[domain], []
    for line_no, row in jsonl_lines(path):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{line_no}: not a JSON object ({domain} rows are objects with {fields})")
        for key in fields:
            if key not in row or row[key] in (None, ""):
                raise ValueError(f"{path}:{line_no}: missing field {key!r} ({domain} rows need {fields})")
        if domain == "code":
            if not isinstance(row["tests"], dict) or "kind" not in row["tests"]:
                raise ValueError(
                    f"{path}:{line_no}: field 'tests' must be a dict with a 'kind' "
                    f"(verifier.verify_code's schema), got {str(row['tests'])[:80]!r}"
                )
            rows.append({"id": str(row["id"]), "problem": str(row["problem"]), "tests": row["tests"]})
        else:
            rows.append({k: str(row[k]) for k in fields})
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def _load_hub_math_rows(repo_id: str) -> list[dict]:
    """Math rows of every .json/.jsonl file of a hub dataset; ids ``<file stem>-<index>``
    where a record has none."""
    import huggingface_hub  # third-party, on use: only a download needs it, not reading a prepared file

    try:
        local = Path(
            huggingface_hub.snapshot_download(repo_id, repo_type="dataset", allow_patterns=["*.json", "*.jsonl"])
        )
    except Exception as e:
        raise RuntimeError(
            f"could not fetch the dataset {repo_id!r} from the Hugging Face hub "
            f"(pass train_data=<local JSONL> to train offline): {e}"
        ) from e
    rows = []
    for file in sorted(local.rglob("*.json*")):
        for i, rec in enumerate(_json_records(file)):
            for key in ("problem", "answer"):
                if rec.get(key) in (None, ""):
                    raise ValueError(f"{repo_id}/{file.name} record {i}: missing field {key!r}")
            rows.append(
                {"id": str(rec.get("id", f"{file.stem}-{i}")), "problem": rec["problem"], "answer": str(rec["answer"])}
            )
    if not rows:
        raise ValueError(f"dataset {repo_id} has no json/jsonl rows")
    return rows


def jsonl_lines(path: Path) -> Iterator[tuple[int, object]]:
    """``(line number, value)`` of each non-blank line of a JSONL file; bad JSON names the line."""
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield line_no, json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None


def _json_records(path: Path) -> Iterator[dict]:
    """The records of a ``.jsonl`` file or of a ``.json`` list."""
    if path.suffix == ".jsonl":
        yield from (record for _, record in jsonl_lines(path))
        return
    items = json.loads(path.read_text())
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a JSON list of records")
    yield from items


def training_problems(
    rows: list[dict], cfg: Config, prompt: str, tokenizer, announce: bool = True
) -> tuple[list[dict], list[list[int]]]:
    """The training problems (`rows`, as load_rows reads them) and their prompt ids on the app:model
    prompt `prompt`; problems whose prompt exceeds max_prompt_tokens are skipped, and counted on
    stderr (where `announce`)."""
    prompts = [ro.build_prompt_ids(tokenizer, r["problem"], prompt, cfg.domain, cfg.enable_thinking) for r in rows]
    keep = [i for i, p in enumerate(prompts) if len(p) <= cfg.max_prompt_tokens]
    if len(keep) < len(rows) and announce:
        print(
            f"[credo] {len(rows) - len(keep)} of {len(rows)} problems exceed max_prompt_tokens="
            f"{cfg.max_prompt_tokens} and are skipped",
            file=sys.stderr,
        )
    return [rows[i] for i in keep], [prompts[i] for i in keep]


@dataclass
class QuestionStream:
    """An endless, deterministic stream of question indices: epoch e is a permutation of
    range(n) seeded by (seed, e). Its whole state is `cursor`, so resuming is exact."""

    n: int
    seed: int
    cursor: int = 0

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, count: int) -> list[int]:
        out = []
        for c in range(self.cursor, self.cursor + count):
            out.append(self._permutation(c // self.n)[c % self.n])
        self.cursor += count
        return out

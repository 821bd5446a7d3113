"""Test helpers for dataprep/data.py and dataprep/convert.py: a stand-in for the Hugging Face hub built from
tests/fixtures/hub_records.json, and a program wrapped as a model's answer.  (The real records
are real parts: the `real_part` fixture in conftest.py finds them.)  The `hub` fixture that
installs the fake is in conftest.py."""

from __future__ import annotations

import json
from fnmatch import fnmatch
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "hub_records.json"
FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Stands in for ``snapshot_download``: records each request, writes the fixture files
    that match ``allow_patterns`` under ``<root>/<repo>/snapshots/<commit>/``."""

    def __init__(self, root: Path):
        self.root = root
        self.calls: list[dict] = []
        self.records = json.loads(FIXTURES.read_text())

    def __call__(self, repo_id, *, repo_type, revision, allow_patterns):
        self.calls.append(
            {"repo_id": repo_id, "repo_type": repo_type, "revision": revision, "allow_patterns": list(allow_patterns)}
        )
        snapshot = self.root / repo_id.replace("/", "--") / "snapshots" / FAKE_COMMIT
        for relative, records in self.records[repo_id].items():
            if any(fnmatch(relative, pattern) for pattern in allow_patterns):
                write_fixture_file(snapshot / relative, records)
        return str(snapshot)


def write_fixture_file(path: Path, records: list[dict]) -> None:
    """Write records in the format the file name says (.parquet, .jsonl, .json list)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa  # third-party, on use: conftest imports this module in every session, pyarrow takes 0.25 s
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path.write_text(json.dumps(records))


def as_answer(code: str) -> str:
    """A program as a model's answer: one fenced Python block."""
    return f"```python\n{code}\n```"

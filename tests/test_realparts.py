"""Tests for infra/realparts.py: the resolver's order, and `fetch` run as `bash run.sh fixtures` runs it (a
process with the real huggingface_hub client and urllib) against a hub and GitHub stand-in on loopback
(tests/hubstandin.py): what it writes, the checksums it pins or records, and the one line it prints
for a wrong checksum, an unknown part and an unreachable hub."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hubstandin import HubStandIn
from transformers import AutoTokenizer

from infra import realparts

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = realparts.PARTS["qwen3-tokenizer"]
MATH500 = realparts.PARTS["math500"]
LCB = realparts.PARTS["lcb"]


def run_fetch(args: list[str], tmp_path: Path, endpoint: str) -> subprocess.CompletedProcess:
    """`python -m infra.realparts fetch ARGS` in its own process, the hub and GitHub at `endpoint`, a fresh HF cache."""
    env = dict(
        os.environ,
        HF_ENDPOINT=endpoint,
        CREDO_GITHUB_RAW=endpoint,
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_OFFLINE="0",
    )
    return subprocess.run(
        [sys.executable, "-m", "infra.realparts", "fetch", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def hub_files(part: realparts.Part, files: dict[str, bytes]) -> dict:
    kind = {"hf-model": "model", "hf-dataset": "dataset", "github": "github"}[part.source]
    return {(kind, part.repo, part.revision): files}


def lcb_source(record: dict) -> bytes:
    """A Python file that embeds `record` as Kaggle's example does (public_test_cases as a list)."""
    literal = dict(record, public_test_cases=json.loads(record["public_test_cases"]))
    return f"from x import y\n\nquestion = {literal!r}\n\n\ndef task():\n    pass\n".encode()


# --- resolving ----------------------------------------------------------------------------------


def test_the_resolver_looks_in_the_named_root_then_shared_then_the_cache(tmp_path, monkeypatch):
    checkout, shared, mine = tmp_path / "checkout", tmp_path / "shared", tmp_path / "mine"
    monkeypatch.setattr(realparts, "ROOT", checkout)
    monkeypatch.setattr(realparts, "CACHE_ROOT", checkout / ".cache" / "shared")
    monkeypatch.delenv(realparts.ENV_ROOT, raising=False)
    checkout.mkdir()
    assert realparts.resolve("math500") is None
    assert "run `bash run.sh fixtures`" in realparts.missing_reason("math500")
    for root in (checkout / ".cache" / "shared", shared, mine):
        (root / "realdata" / "math500").mkdir(parents=True)
        (root / "realdata" / "math500" / "test.jsonl").write_text("{}\n")
    assert realparts.resolve("math500") == shared / "realdata" / "math500"
    monkeypatch.setenv(realparts.ENV_ROOT, str(mine))
    assert realparts.resolve("math500") == mine / "realdata" / "math500"
    (mine / "realdata" / "math500" / "test.jsonl").unlink()  # not whole there: the next root
    assert realparts.resolve("math500") == shared / "realdata" / "math500"
    monkeypatch.setenv(realparts.ENV_ROOT, str(tmp_path / "nowhere"))
    with pytest.raises(realparts.FixtureError, match=r"CREDO_FIXTURES=.*nowhere is not a directory"):
        realparts.resolve("math500")


def test_a_part_is_whole_only_when_every_pattern_matches(tmp_path):
    part = realparts.PARTS["humanevalplus"]
    assert not realparts.is_whole(tmp_path, part)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train-00000.parquet").write_bytes(b"x")
    assert not realparts.is_whole(tmp_path, part)
    (tmp_path / "data" / "test-00000-of-00001-abc.parquet").write_bytes(b"x")
    assert realparts.is_whole(tmp_path, part)


def test_the_lcb_record_is_read_from_its_source_file_without_running_it():
    record = {
        "question_id": "1873_A",
        "public_test_cases": json.dumps([{"input": "1\n", "output": "YES\n"}]),
        "contest_date": "2023-08-21T00:00:00",
    }
    built = realparts.lcb_record_from_source(lcb_source(record))
    assert built == {"kaggle_1873_A.jsonl": (json.dumps(record) + "\n").encode()}
    with pytest.raises(realparts.FixtureError, match="no `question = {...}` literal"):
        realparts.lcb_record_from_source(b"answer = {}\n")
    with pytest.raises(ValueError):  # a call is not a literal: never run
        realparts.lcb_record_from_source(b"question = __import__('os').system('false')\n")


# --- fetching through the real clients --------------------------------------------------------


def test_fetch_writes_each_part_checks_pinned_and_records_other_checksums(tmp_path):
    tokenizer = {"tokenizer.json": b'{"not": "the real tokenizer"}', "tokenizer_config.json": b"{}"}
    first = b'{"problem": "1+1", "answer": "2"}\n'
    files = {**hub_files(TOKENIZER, tokenizer), **hub_files(MATH500, {"test.jsonl": first, "README.md": b"card"})}
    root = tmp_path / "root"
    with HubStandIn(files) as hub:
        done = run_fetch(["--only", "math500", "--root", str(root)], tmp_path, hub.url)
        assert done.returncode == 0, done.stderr[-2000:]
        assert (root / "realdata/math500/test.jsonl").read_bytes() == first
        assert not (root / "realdata/math500/README.md").exists()  # only the part's patterns
        assert (
            f"math500: {root / 'realdata/math500'} (1 files" in done.stdout
            and "recorded at first download" in done.stdout
        )
        lock = json.loads((root / realparts.LOCK_NAME).read_text())
        assert lock["math500"]["revision"] == MATH500.revision
        assert lock["math500"]["files"] == {"test.jsonl": realparts.sha256_file(root / "realdata/math500/test.jsonl")}
        assert ("HEAD", f"/datasets/{MATH500.repo}/resolve/{MATH500.revision}/test.jsonl") in hub.requests

        # a pinned checksum that does not match: one line naming the file, nothing installed
        bad = run_fetch(["--only", "qwen3-tokenizer", "--root", str(root)], tmp_path, hub.url)
        assert bad.returncode == 1
        lines = [line for line in bad.stderr.splitlines() if line.startswith("fixtures:")]
        assert len(lines) == 1 and "fixtures/qwen3-tokenizer/tokenizer.json: sha256" in lines[0]
        assert "is pinned" in lines[0] and "run `bash run.sh fixtures` again" in lines[0]
        assert not (root / "fixtures/qwen3-tokenizer").exists() and not (root / ".staging").exists()

        # the source changes under the pinned revision: the recorded checksum refuses it, the old copy stays
        files[("dataset", MATH500.repo, MATH500.revision)]["test.jsonl"] = b'{"problem": "1+1", "answer": "3"}\n'
        changed = run_fetch(["--only", "math500", "--root", str(root)], tmp_path / "again", hub.url)
        assert changed.returncode == 1
        assert (
            "realdata/math500/test.jsonl: sha256" in changed.stderr
            and "recorded at its first download" in changed.stderr
        )
        assert (root / "realdata/math500/test.jsonl").read_bytes() == first


def test_fetch_of_the_github_part_builds_the_record(tmp_path):
    record = {"question_id": "1873_A", "public_test_cases": json.dumps([{"input": "1\nabc\n", "output": "YES\n"}])}
    with HubStandIn({("github", LCB.repo, LCB.revision): {LCB.github_path: lcb_source(record)}}) as hub:
        done = run_fetch(["--only", "lcb", "--root", str(tmp_path / "root")], tmp_path, hub.url)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "root" / "realdata" / "lcb"
    assert json.loads((folder / "kaggle_1873_A.jsonl").read_text()) == record
    assert realparts.is_whole(folder, LCB)


def test_an_unreachable_hub_and_an_unknown_part_are_one_line_each(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = run_fetch(["--only", "math500,lcb", "--root", str(tmp_path / "root")], tmp_path, closed)
    lines = [line for line in down.stderr.splitlines() if line.startswith("fixtures:")]
    assert down.returncode == 1 and len(lines) == 2
    assert lines[0].startswith(f"fixtures: math500: could not reach the hub at {closed} (")
    assert f"for {MATH500.repo}; check the network or HF_ENDPOINT" in lines[0]
    assert lines[1].startswith("fixtures: lcb: could not download") and "CREDO_GITHUB_RAW" in lines[1]
    unknown = run_fetch(["--only", "math500,qwen4"], tmp_path, closed)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "fixtures: --only math500,qwen4: unknown part(s) qwen4; the parts are " + ", ".join(realparts.PARTS)
    )


def test_fetching_the_real_parts_gives_what_the_resolver_finds(real_part, tmp_path):
    """Every part but AMC served with its real bytes (the pinned tokenizer.json is the hub's); the fetched
    root resolves every part and loads Qwen3's tokenizer. (AMC's copy beside the checkout was rewritten
    to parquet here, so its pinned hub checksum refuses it, as it must.)"""
    files = {}
    for name, part in realparts.PARTS.items():
        folder = real_part(name)
        payload = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        if part.source == "github":
            record = json.loads(payload["kaggle_1873_A.jsonl"])
            payload = {part.github_path: lcb_source(record)}
        files.update(hub_files(part, payload))
    root = tmp_path / "root"
    with HubStandIn(files) as hub:
        done = run_fetch(["--root", str(root)], tmp_path, hub.url)
    failures = [line for line in done.stderr.splitlines() if line.startswith("fixtures:")]
    assert done.returncode == 1 and len(failures) == 1 and failures[0].startswith("fixtures: amc: realdata/amc/")
    for name, part in realparts.PARTS.items():
        if name != "amc":
            assert realparts.is_whole(root / part.where, part), name
    assert (root / "realdata/lcb/kaggle_1873_A.jsonl").read_bytes() == (
        real_part("lcb") / "kaggle_1873_A.jsonl"
    ).read_bytes()
    assert len(AutoTokenizer.from_pretrained(root / TOKENIZER.where)) == 151669


def test_the_skip_message_names_each_place_looked_in_once():
    reason = realparts.missing_reason("qwen3-tokenizer")
    assert str(realparts.ROOT / ".cache" / "shared" / "fixtures" / "qwen3-tokenizer") in reason
    assert "fixtures/fixtures" not in reason and reason.endswith("run `bash run.sh fixtures` to fetch it")

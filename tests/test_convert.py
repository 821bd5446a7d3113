"""Tests for dataprep/convert.py: each source's raw records, shaped like the hub's, become rows in the
normalized schema (through dataprep/data.py's fake download and snapshot reading), LiveCodeBench's
pickled tests decode without unpickling, HumanEval+ outputs come from the canonical
solution where evalplus records none, and the converted code tests judge programs in the
verifier's sandbox.  The hub is never contacted: the `hub` fixture (conftest.py) fakes it
from tests/fixtures/hub_records.json."""

from __future__ import annotations

import doctest
import json
import pickle

import pytest
from fakehub import as_answer

import verifier
from dataprep import convert, data


def converted(hub, name: str) -> tuple[list[dict], dict]:
    """Rows and exclusion reasons of one source, through the fake download."""
    source = data.SOURCES[name]
    rows, excluded = convert.convert_snapshot(data.download(source), source.patterns, source.convert)
    return rows, dict(excluded)


# --- conversion of each source ---------------------------------------------------------


def test_math_sources_convert_to_id_problem_answer(hub):
    rows, _ = converted(hub, "deepscaler")
    assert rows[0] == {"id": "deepscaler-00000", "problem": "What is $1+1$?", "answer": "2"}
    assert converted(hub, "math500")[0][0] == {
        "id": "test/prealgebra/1.json",
        "problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.",
        "answer": "\\frac{3}{4}",
    }
    assert converted(hub, "aime24")[0][0]["answer"] == "024"  # kept as the string the source gives
    assert converted(hub, "aime25")[0][0] == {"id": "aime25-1", "problem": "Find $7 \\cdot 11$.", "answer": "77"}
    amc, _ = converted(hub, "amc")
    assert [(r["answer"], r["year"]) for r in amc] == [("25", "2023"), ("36", "2023"), ("16", "2022")]


def test_deepcoder_tests_per_subset_and_exclusions(hub):
    rows, excluded = converted(hub, "deepcoder")
    by_problem = {r["problem"].split("\n")[0]: r["tests"] for r in rows}
    assert by_problem["Read an integer n and print 2n."] == {
        "kind": "stdio",
        "inputs": ["3\n", "10\n"],
        "outputs": ["6\n", "20\n"],
    }
    assert by_problem["Read two integers and print their sum."]["kind"] == "stdio"
    assert by_problem["Return the maximum of nums."] == {
        "kind": "call",
        "fn_name": "maxValue",
        "inputs": [[[1, 5, 2]], [[-3]]],
        "outputs": [5, -3],
    }
    assert excluded == {
        "primeintellect test types ['function_call'] (only stdin_stdout is converted)": 1,
        "taco call-based tests (fn_name) are not converted": 1,
    }
    assert all(r["id"].startswith("deepcoder-") for r in rows)


def test_humanevalplus_results_reference_outputs_and_root_property(hub):
    rows, excluded = converted(hub, "humanevalplus")
    by_id = {r["id"]: r["tests"] for r in rows}
    assert by_id["HumanEval/0"] == {
        "kind": "call",
        "fn_name": "add",
        "inputs": [[1, 2], [0, 0], [-5, 3]],
        "outputs": [3, 0, -2],
    }
    # no `results` literal: the canonical solution ran in the sandbox
    assert by_id["HumanEval/14"] == {
        "kind": "call",
        "fn_name": "all_prefixes",
        "inputs": [[""], ["abc"], ["xy"]],
        "outputs": [[], ["a", "ab", "abc"], ["x", "xy"]],
    }
    # `assert _poly(...) <= 0.0001`: any root passes, the recorded results are not used
    assert by_id["HumanEval/32"] == {
        "kind": "call",
        "fn_name": "find_zero",
        "inputs": [[[0, 1]], [[-2, 1]]],
        "property": {"name": "polynomial_root", "atol": 0.0001},
    }
    assert excluded == {}


def test_reference_outputs_drop_what_cannot_be_written(monkeypatch):
    program = "def f(n):\n    return 1 / n if n else 10 ** 5000\n"
    assert convert.reference_outputs(program, "f", [[2], [0], [4]]) == (
        [[2], [4]],
        [0.5, 0.25],
        {"canonical solution failed or its value cannot be sent, e.g. an int over 4300 digits (inputs)": 1},
    )
    monkeypatch.setattr(convert, "MAX_EXPECTED_OUTPUT_BYTES", 3)
    assert convert.reference_outputs(program, "f", [[2], [4]]) == (
        [[2]],
        [0.5],
        {"expected output over 3 bytes (inputs)": 1},
    )  # "0.25" is 4 bytes


def test_livecodebench_decodes_private_tests_and_keeps_dates(hub):
    rows, _ = converted(hub, "lcb")
    by_id = {r["id"]: r for r in rows}
    assert by_id["abc370_a"]["tests"] == {"kind": "stdio", "inputs": ["2\n", "5\n"], "outputs": ["6\n", "15\n"]}
    assert by_id["3500"]["tests"] == {
        "kind": "call",
        "fn_name": "product",
        "inputs": [[2, 3], [0, 9]],
        "outputs": [6, 0],
    }
    assert by_id["3400"]["date"] == "2025-01-11"
    assert "class Solution" in by_id["3400"]["problem"]


def test_pickle_with_anything_but_a_string_is_refused():
    assert convert.unpickle_string(pickle.dumps("[]"), "x") == "[]"
    with pytest.raises(ValueError, match="opcode"):
        convert.unpickle_string(pickle.dumps(print), "file.jsonl#3")
    with pytest.raises(ValueError, match="2 strings"):
        convert.unpickle_string(pickle.dumps(("a", "b")).replace(b"\x86", b""), "x")


def test_lcbv5_function_name_from_record_or_test_metadata():
    case = {"input": "[1, 5]", "output": "5", "testtype": "functional"}
    expected = {"kind": "call", "fn_name": "maxValue", "inputs": [[[1, 5]]], "outputs": [5]}
    for metadata in ({"func_name": "maxValue"}, '{"func_name": "maxValue"}'):  # rllm's loaders: record metadata
        record = {"problem": "p", "tests": json.dumps([case]), "metadata": metadata}
        assert convert.convert_deepcoder(record, "lcbv5/train-0.parquet#3")["tests"] == expected
    in_case = {**case, "metadata": {"func_name": "maxValue"}}  # copied into each test
    assert (
        convert.convert_deepcoder({"problem": "p", "tests": json.dumps([in_case])}, "lcbv5/t.parquet#0")["tests"]
        == expected
    )
    both = {"problem": "p", "tests": json.dumps([in_case]), "metadata": {"func_name": "other"}}
    with pytest.raises(ValueError, match="different functions"):
        convert.convert_deepcoder(both, "lcbv5/t.parquet#0")


# --- converted code tests run in verifier's sandbox ---------------------------------------


@pytest.mark.parametrize(
    ("source", "pick", "right", "wrong"),
    [
        ("deepcoder", "Read an integer n and print 2n.", "print(int(input()) * 2)", "print(int(input()) + 2)"),
        (
            "lcb",
            "3500",
            "class Solution:\n    def product(self, a, b):\n        return a * b",
            "class Solution:\n    def product(self, a, b):\n        return a + b",
        ),
        ("humanevalplus", "HumanEval/0", "def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"),
    ],
)
def test_converted_code_tests_pass_right_and_fail_wrong_solutions(hub, source, pick, right, wrong):
    rows, _ = converted(hub, source)
    row = next(r for r in rows if r["id"] == pick or r["problem"].startswith(pick))
    assert verifier.verify_code(as_answer(right), row["tests"]) is True
    assert verifier.verify_code(as_answer(wrong), row["tests"]) is False


def test_livecodebench_record_right_and_wrong_programs(real_part):
    record = json.loads((real_part("lcb") / "kaggle_1873_A.jsonl").read_text())
    row = convert.convert_lcb(record, "kaggle_1873_A.jsonl#0")
    assert row["id"] == "1873_A" and row["date"] == "2023-08-21" and row["tests"]["kind"] == "stdio"
    assert len(row["tests"]["inputs"]) > 1  # public case + the decoded private ones
    right = (
        "for _ in range(int(input())):\n    s = input().strip()\n"
        "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) in (0, 2) else 'NO')"
    )
    wrong = "for _ in range(int(input())):\n    print('YES' if input().strip() == 'abc' else 'NO')"
    assert verifier.verify_code(as_answer(right), row["tests"]) is True
    assert verifier.verify_code(as_answer(wrong), row["tests"]) is False


def test_doctests():
    assert doctest.testmod(convert).failed == 0

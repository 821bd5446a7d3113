"""Per-dataset record converters: one raw hub record of a tab:data source -> one normalized row.

Each ``convert_*(record, where)`` takes a raw record and ``where`` (``<file>#<index>``
inside the snapshot) and returns a row in the schema ``dataprep/data.py`` writes:

* math ``{"id", "problem", "answer"}`` (answer a string);
* code ``{"id", "problem", "tests"}``, ``tests`` in the schema of ``verifier.verify_code``
  (``stdio``, ``call``, or ``call`` with a ``property``);

plus, for some sources, the field a set selects on (``year``, ``date``) and the test
inputs a converter dropped (``dropped``, counted in the manifest).  A record that cannot
be expressed faithfully raises ``Excluded`` with a counted reason; one that cannot be read
raises ``ValueError`` naming ``where``.

Also here: reading a snapshot's raw files (``.json``, ``.jsonl``, ``.parquet``) and converting
every record of a source (``convert_snapshot``), each refusal counted as a reason.

Not here: the registry of sources and sets, downloading, splitting, counting and writing
(all in ``dataprep/data.py``), and reading rows for training or evaluation (``problems.load_rows``).

Untrusted input: LiveCodeBench stores private tests as base64(zlib(pickle(str))).
They are decoded by reading the pickle opcodes with ``pickletools.genops`` (which
executes nothing) and accepting only a stream that builds one string; ``pickle.loads``
is never called.  The only programs run are HumanEval+ canonical solutions of the six
tasks without recorded results, and they run in the verifier's sandbox.
"""

from __future__ import annotations

import ast
import base64
import json
import logging
import os
import pickletools
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from fnmatch import fnmatch
from pathlib import Path

import problems
import verifier
from grading.judge import parse_python

logger = logging.getLogger(__name__)

# HumanEval+ expected outputs computed at prepare time larger than this (JSON bytes)
# are dropped: evalplus leaves six tasks without results because some run to 12 MB
# per input (147 MB for all of HumanEval/15), too much for a JSONL row.
MAX_EXPECTED_OUTPUT_BYTES = 1 << 20
# Per-input time limit of a canonical solution run at prepare time (trusted code; a
# generous limit so that a loaded machine does not change which inputs are kept).
REFERENCE_TIMEOUT_S = 30.0


class Excluded(Exception):  # noqa: N818 (a record-level outcome, not an error of the program)
    """Raised by a converter for a record it cannot express faithfully; ``reason`` is
    counted in the manifest."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------
# Math converters
# ---------------------------------------------------------------------------


def _text(record: dict, key: str, where: str) -> str:
    """A non-empty string field of a raw record, or a ValueError naming it."""
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
    return value


def _answer_text(value: object, where: str) -> str:
    """A math answer as a string: integers (also integral floats) without a decimal point.

    >>> _answer_text(4.0, "x"), _answer_text(17, "x"), _answer_text("\\\\frac{1}{2}", "x")
    ('4', '17', '\\\\frac{1}{2}')
    """
    if isinstance(value, bool):
        raise ValueError(f"{where}: answer must be a number or string, got {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{where}: answer {value!r} is not an integer")
        return str(int(value))
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ValueError(f"{where}: answer must be a number or non-empty string, got {value!r}")


def convert_deepscaler(record: dict, where: str) -> dict:
    """DeepScaleR ``deepscaler.json`` item ``{"problem", "answer", "solution"}``; the id is
    the item's index in the file (``where`` ends with ``#<index>``)."""
    index = where.rsplit("#", 1)[1]
    return {
        "id": f"deepscaler-{int(index):05d}",
        "problem": _text(record, "problem", where),
        "answer": _answer_text(record.get("answer"), where),
    }


def convert_math500(record: dict, where: str) -> dict:
    """MATH-500 ``test.jsonl`` line ``{"problem", "solution", "answer", "subject", "level",
    "unique_id"}``; ``unique_id`` (e.g. ``test/algebra/1.json``) is the id."""
    return {
        "id": _text(record, "unique_id", where),
        "problem": _text(record, "problem", where),
        "answer": _answer_text(record.get("answer"), where),
    }


def convert_h4_aime(record: dict, where: str) -> dict:
    """HuggingFaceH4/aime_2024 row ``{"id", "problem", "solution", "answer", "url", "year"}``."""
    if not isinstance(record.get("id"), int):
        raise ValueError(f"{where}: field 'id' must be an int, got {record.get('id')!r}")
    return {
        "id": f"aime24-{record['id']}",
        "problem": _text(record, "problem", where),
        "answer": _answer_text(record.get("answer"), where),
    }


def matharena_converter(prefix: str) -> Callable[[dict, str], dict]:
    """Converter for a MathArena competition row ``{"problem_idx", "problem", "answer"}``."""

    def convert(record: dict, where: str) -> dict:
        index = record.get("problem_idx")
        if not isinstance(index, int):
            raise ValueError(f"{where}: field 'problem_idx' must be an int, got {index!r}")
        return {
            "id": f"{prefix}-{index}",
            "problem": _text(record, "problem", where),
            "answer": _answer_text(record.get("answer"), where),
        }

    convert.__doc__ = f"MathArena row -> ``{{'id': '{prefix}-<problem_idx>', ...}}``."
    return convert


def convert_aimo_amc(record: dict, where: str) -> dict:
    """AI-MO/aimo-validation-amc row ``{"id", "problem", "answer" (float), "url"}``; the
    AoPS ``url`` names the contest and year (kept as ``year`` for the per-year sets)."""
    url = _text(record, "url", where)
    year = next((y for y in ("2022", "2023", "2024") if f"/{y}_AMC" in url), None)
    if year is None:
        raise ValueError(f"{where}: cannot read the contest year from url {url!r}")
    return {
        "id": f"amc-{record.get('id')}",
        "problem": _text(record, "problem", where),
        "answer": _answer_text(record.get("answer"), where),
        "year": year,
    }


# ---------------------------------------------------------------------------
# Code converters
# ---------------------------------------------------------------------------

_PICKLE_STRING_OPS = {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE"}
_PICKLE_FRAMING_OPS = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT", "STOP"}


def unpickle_string(payload: bytes, where: str) -> str:
    """The single string a pickle stream builds, read without executing it.

    ``pickletools.genops`` only disassembles; a stream with any opcode other than
    protocol/framing/memo opcodes and exactly one string opcode is refused.

    >>> import pickle
    >>> unpickle_string(pickle.dumps("[1, 2]", protocol=4), "x")
    '[1, 2]'
    """
    strings = []
    for opcode, arg, _ in pickletools.genops(payload):
        if opcode.name in _PICKLE_STRING_OPS:
            strings.append(arg)
        elif opcode.name not in _PICKLE_FRAMING_OPS:
            raise ValueError(
                f"{where}: pickle stream uses opcode {opcode.name}; only a plain "
                "string is accepted (nothing is unpickled)"
            )
    if len(strings) != 1:
        raise ValueError(f"{where}: pickle stream builds {len(strings)} strings, expected 1")
    return strings[0]


def decode_lcb_tests(value: str, where: str) -> list[dict]:
    """LiveCodeBench test cases: a JSON list, or base64(zlib(pickle(JSON string)))."""
    if value.lstrip().startswith("["):
        cases = json.loads(value)
    else:
        try:
            packed = zlib.decompress(base64.b64decode(value, validate=True))
        except (ValueError, zlib.error) as e:
            raise ValueError(f"{where}: private tests are neither JSON nor base64+zlib ({e})") from None
        cases = json.loads(unpickle_string(packed, where))
    if not isinstance(cases, list):
        raise ValueError(f"{where}: test cases must be a JSON list, got {type(cases).__name__}")
    return cases


def lcb_case_tests(cases: list[dict], fn_name: str | None, where: str) -> dict:
    """LiveCodeBench-format cases ``{"input", "output", "testtype"}`` as one test dict.

    ``stdin`` cases become ``stdio``; ``functional`` cases become ``call``: the input
    holds one JSON value per line (the arguments), the output one JSON value.
    """
    kinds = {case.get("testtype") for case in cases}
    if not cases:
        raise Excluded("no test cases")
    if kinds == {"stdin"}:
        return {
            "kind": "stdio",
            "inputs": [_case_str(c, "input", where) for c in cases],
            "outputs": [_case_str(c, "output", where) for c in cases],
        }
    if kinds == {"functional"}:
        if not fn_name:
            raise ValueError(f"{where}: functional tests without a function name")
        inputs, outputs = [], []
        for case in cases:
            text = _case_str(case, "input", where)
            inputs.append([json.loads(line) for line in text.split("\n") if line.strip()])
            outputs.append(json.loads(_case_str(case, "output", where)))
        return {"kind": "call", "fn_name": fn_name, "inputs": inputs, "outputs": outputs}
    raise ValueError(f"{where}: test types {sorted(map(str, kinds))}; expected all 'stdin' or all 'functional'")


def _case_str(case: dict, key: str, where: str) -> str:
    """A test case's string field."""
    value = case.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{where}: test case field {key!r} must be a string, got {type(value).__name__}")
    return value


def _with_starter(problem: str, starter_code: str | None) -> str:
    """The problem statement, followed by the starter code when there is one."""
    if starter_code and starter_code.strip():
        return f"{problem.rstrip()}\n\nStarter code:\n```python\n{starter_code.rstrip()}\n```"
    return problem


def convert_lcb(record: dict, where: str) -> dict:
    """LiveCodeBench ``code_generation_lite`` line: ``question_id``, ``question_content``,
    ``starter_code``, ``contest_date``, ``public_test_cases`` (JSON) and
    ``private_test_cases`` (JSON or compressed); ``metadata`` JSON holds ``func_name``.
    ``contest_date`` is kept (as ``date``) for the v5/v6 windows."""
    metadata = json.loads(record.get("metadata") or "{}")
    cases = decode_lcb_tests(_text(record, "public_test_cases", where), where + " public_test_cases")
    private = record.get("private_test_cases")
    if private:
        cases += decode_lcb_tests(private, where + " private_test_cases")
    tests = lcb_case_tests(cases, metadata.get("func_name"), where)
    date = datetime.fromisoformat(_text(record, "contest_date", where)).date().isoformat()
    return {
        "id": _text(record, "question_id", where),
        "problem": _with_starter(_text(record, "question_content", where), record.get("starter_code")),
        "tests": tests,
        "date": date,
    }


def convert_deepcoder(record: dict, where: str) -> dict:
    """DeepCoder-Preview row ``{"problem", "tests" (JSON string), ...}``; the test format
    depends on the subset (the file's top folder):

    * ``lcbv5``: LiveCodeBench cases (``stdin`` or ``functional``, the function
      name in the record's ``metadata`` or in each case's);
    * ``primeintellect``: ``[{"type": "stdin_stdout", "input", "output"}, ...]``;
      ``function_call`` records are excluded (argument/return wrapping is ambiguous);
    * ``taco``: ``{"inputs": [str], "outputs": [str]}``; records with ``fn_name`` or
      non-string inputs are excluded (APPS wraps return values inconsistently).
    """
    subset = where.split("/", 1)[0]
    tests_raw = json.loads(_text(record, "tests", where))
    if subset == "lcbv5":
        tests = lcb_case_tests(tests_raw, _lcbv5_func_name(record, tests_raw, where), where)
    elif subset == "primeintellect":
        tests = _primeintellect_tests(tests_raw, where)
    elif subset == "taco":
        tests = _taco_tests(tests_raw, where)
    else:
        raise ValueError(f"{where}: unknown DeepCoder subset {subset!r}")
    index = where.rsplit("#", 1)[1]
    file_stem = Path(where.rsplit("#", 1)[0]).stem
    return {
        "id": f"deepcoder-{subset}-{file_stem}-{int(index):05d}",
        "problem": _with_starter(_text(record, "problem", where), record.get("starter_code")),
        "tests": tests,
    }


def _lcbv5_func_name(record: dict, cases: list, where: str) -> str | None:
    """The function name of a DeepCoder ``lcbv5`` row: from the record's ``metadata``
    (a dict or JSON text, where rllm's loaders read it) or from the cases' own
    ``metadata`` (where those loaders copy it); two different names raise."""
    metadata = record.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: field 'metadata' is not JSON") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: field 'metadata' must be an object, got {type(metadata).__name__}")
    if not isinstance(cases, list):
        raise ValueError(f"{where}: lcbv5 tests must be a JSON list")
    names = {metadata.get("func_name")} | {
        c["metadata"].get("func_name") for c in cases if isinstance(c, dict) and isinstance(c.get("metadata"), dict)
    }
    names.discard(None)
    if len(names) > 1:
        raise ValueError(f"{where}: record and test metadata name different functions {sorted(map(str, names))}")
    return names.pop() if names else None


def _primeintellect_tests(cases: list, where: str) -> dict:
    """PrimeIntellect cases as one ``stdio`` test dict (``function_call`` is excluded)."""
    if not isinstance(cases, list) or not cases:
        raise Excluded("no test cases")
    types = {case.get("type") for case in cases}
    if types != {"stdin_stdout"}:
        raise Excluded(f"primeintellect test types {sorted(map(str, types))} (only stdin_stdout is converted)")
    return {
        "kind": "stdio",
        "inputs": [_case_str(c, "input", where) for c in cases],
        "outputs": [_case_str(c, "output", where) for c in cases],
    }


def _taco_tests(tests: dict, where: str) -> dict:
    """TACO ``{"inputs", "outputs"}`` as one ``stdio`` test dict."""
    if not isinstance(tests, dict):
        raise ValueError(f"{where}: taco tests must be a JSON object")
    if tests.get("fn_name"):
        raise Excluded("taco call-based tests (fn_name) are not converted")
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not inputs or not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise Excluded("taco inputs/outputs missing or of different lengths")
    if not all(isinstance(x, str) for x in inputs + outputs):
        raise Excluded("taco inputs/outputs are not all strings")
    return {"kind": "stdio", "inputs": inputs, "outputs": outputs}


def convert_humanevalplus(record: dict, where: str) -> dict:
    """evalplus/humanevalplus row ``{"task_id", "prompt", "canonical_solution",
    "entry_point", "test"}`` as a ``call`` test.

    ``test`` defines ``check(candidate)`` with a literal list ``inputs`` (base + plus
    inputs), parsed with ``ast`` and read with ``ast.literal_eval``.  Expected outputs:

    * the literal ``results`` when the check assigns one (158 of 164 tasks);
    * else (the check compares with ``ref_func(*inp)``: tasks 14, 15, 83, 100, 130,
      139) the canonical solution's return values, computed here by running it in
      the verifier's sandbox, as evalplus computes them.  An input whose output
      cannot be written (the call fails, the value cannot be sent, or its JSON is
      over ``MAX_EXPECTED_OUTPUT_BYTES``) is dropped and counted in ``"dropped"``;
    * a check that asserts ``_poly(...) <= atol`` (HumanEval/32 ``find_zero``) is a
      property: any root is right, so the test names ``polynomial_root`` with that
      ``atol`` instead of outputs.
    """
    test = _text(record, "test", where)
    fn_name = _text(record, "entry_point", where)
    check = _check_function(test, where)
    literals = _check_literals(check, where)
    inputs, dropped = [list(args) for args in literals["inputs"]], Counter()
    atol = _polynomial_root_tolerance(check)
    if atol is not None:
        tests = {
            "kind": "call",
            "fn_name": fn_name,
            "inputs": inputs,
            "property": {"name": "polynomial_root", "atol": atol},
        }
    elif "results" in literals:
        if len(inputs) != len(literals["results"]):
            raise ValueError(f"{where}: {len(inputs)} inputs but {len(literals['results'])} results")
        tests = {"kind": "call", "fn_name": fn_name, "inputs": inputs, "outputs": list(literals["results"])}
    else:
        program = _text(record, "prompt", where) + _text(record, "canonical_solution", where)
        inputs, outputs, dropped = reference_outputs(program, fn_name, inputs)
        tests = {"kind": "call", "fn_name": fn_name, "inputs": inputs, "outputs": outputs}
    try:
        tests = json.loads(json.dumps(tests, allow_nan=False))
    except (TypeError, ValueError):
        raise Excluded("humanevalplus inputs/results are not JSON values") from None
    return {
        "id": _text(record, "task_id", where),
        "problem": _text(record, "prompt", where),
        "tests": tests,
        "dropped": dropped,
    }


def reference_outputs(program: str, fn_name: str, inputs: list[list]) -> tuple[list, list, Counter]:
    """The inputs a reference program answers, its outputs, and the dropped inputs by reason.

    ``verifier.call_outputs`` stops at the first failing input; that input is dropped
    and the run resumes after it (one sandbox per failure).
    """
    kept_inputs, outputs, dropped = [], [], Counter()
    start = 0
    while start < len(inputs):
        values = verifier.call_outputs(program, fn_name, inputs[start:], timeout_s=REFERENCE_TIMEOUT_S)
        for args, (value, size) in zip(inputs[start:], values):
            if size > MAX_EXPECTED_OUTPUT_BYTES:
                dropped[f"expected output over {MAX_EXPECTED_OUTPUT_BYTES} bytes (inputs)"] += 1
            else:
                kept_inputs.append(args)
                outputs.append(value)
        start += len(values)
        if start < len(inputs):
            dropped["canonical solution failed or its value cannot be sent, e.g. an int over 4300 digits (inputs)"] += 1
            start += 1
    return kept_inputs, outputs, dropped


def _check_function(test: str, where: str) -> ast.FunctionDef:
    """The ``def check`` of evalplus's test code."""
    try:
        module = parse_python(test)
    except SyntaxError as e:
        raise ValueError(f"{where}: test code does not parse ({e.msg})") from None
    check = next((node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "check"), None)
    if check is None:
        raise ValueError(f"{where}: test code defines no check(candidate)")
    return check


def _check_literals(check: ast.FunctionDef, where: str) -> dict:
    """The ``inputs``/``results`` literal assignments inside ``def check``."""
    found = {}
    for node in check.body:  # evalplus puts the literals inside check()
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("inputs", "results"):
                try:
                    found[name] = ast.literal_eval(node.value)
                except ValueError:
                    raise Excluded(f"humanevalplus {name} is not a plain literal") from None
    if "inputs" not in found:
        raise ValueError(f"{where}: check() assigns no literal 'inputs'")
    return found


def _polynomial_root_tolerance(check: ast.FunctionDef) -> float | None:
    """``atol`` of an ``assert _poly(...) <= atol`` in ``check`` (HumanEval/32), else None."""
    for node in ast.walk(check):
        if (
            isinstance(node, ast.Assert)
            and isinstance(node.test, ast.Compare)
            and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.LtE)
            and any(
                isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_poly"
                for call in ast.walk(node.test.left)
            )
        ):
            return float(ast.literal_eval(node.test.comparators[0]))
    return None


# ---------------------------------------------------------------------------
# A snapshot's raw files, every record converted
# ---------------------------------------------------------------------------


def snapshot_files(root: Path, patterns: tuple[str, ...]) -> list[Path]:
    """Files under ``root`` matching ``patterns``, sorted; each pattern must match."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    chosen = []
    for pattern in patterns:
        matched = [p for p in files if fnmatch(p.relative_to(root).as_posix(), pattern)]
        if not matched:
            raise FileNotFoundError(f"{root}: no file matches {pattern!r}")
        chosen += matched
    return chosen


def read_records(path: Path) -> Iterator[dict]:
    """Raw records of a ``.json`` (list), ``.jsonl`` or ``.parquet`` file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # third-party, on use: only the hub's parquet files need it

        yield from pq.read_table(path).to_pylist()
    elif path.suffix == ".jsonl":
        yield from (record for _, record in problems.jsonl_lines(path))
    elif path.suffix == ".json":
        items = json.loads(path.read_text())
        if not isinstance(items, list):
            raise ValueError(f"{path}: expected a JSON list of records")
        yield from items
    else:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}")


def convert_snapshot(
    root: Path, patterns: tuple[str, ...], converter: Callable[[dict, str], dict]
) -> tuple[list[dict], Counter]:
    """Every record of a snapshot converted; returns the rows and the exclusion reasons.

    A record the converter refuses is excluded (its reason counted, the first one
    logged with its file and index); one bad record never aborts the source.  Test
    inputs a converter drops (``row["dropped"]``) are counted the same way.  Records
    are converted by ``os.cpu_count()`` threads: HumanEval+'s converter runs
    reference programs in sandbox processes, which then run side by side.
    """
    rows, excluded, malformed = [], Counter(), []
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for path in snapshot_files(root, patterns):
            relative = path.relative_to(root).as_posix()
            items = [(f"{relative}#{index}", record) for index, record in enumerate(read_records(path))]
            for where, outcome in zip(
                (w for w, _ in items), pool.map(lambda item: _convert_one(converter, *item), items)
            ):
                if isinstance(outcome, dict):
                    excluded.update(outcome.pop("dropped", {}))
                    rows.append(outcome)
                elif isinstance(outcome, Excluded):
                    excluded[outcome.reason] += 1
                else:
                    excluded[_malformed_reason(outcome, where)] += 1
                    malformed.append(f"{where}: {_without_location(outcome, where)}")
    if malformed:
        logger.warning("%s: %d malformed record(s) excluded, first: %s", root, len(malformed), malformed[0])
    return rows, excluded


def _convert_one(converter: Callable[[dict, str], dict], where: str, record: object) -> dict | Exception:
    """A record's row, or the exception that excludes it (``Excluded``: a counted
    reason; any other: a malformed record)."""
    if not isinstance(record, dict):
        return ValueError(f"{where}: record is not an object")
    try:
        return converter(record, where)
    except (Excluded, ValueError, TypeError, KeyError, AttributeError) as e:
        return e


def _without_location(error: Exception, where: str) -> str:
    """An error's message without the ``<file>#<index>`` it starts with."""
    message = str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
    return message.removeprefix(where).lstrip(": ")


def _malformed_reason(error: Exception, where: str) -> str:
    """The counted exclusion reason of a record a converter refused (at most 160 characters).

    >>> _malformed_reason(ValueError("a.jsonl#3: field 'id' must be an int, got None"), "a.jsonl#3")
    "malformed record: field 'id' must be an int, got None"
    """
    return ("malformed record: " + _without_location(error, where))[:160]

"""Test schemas and output comparisons: how the parent judges what a sandbox sends.

``parse_tests`` validates a ``tests`` dict (the schema ``verifier.verify_code``
documents: ``stdio``, ``call`` with expected outputs or a ``property``,
``assert``) and builds its ``sandbox.TestSpec``: the request the child gets
(program inputs, never expected outputs) and the judge of each frame it
sends back.  The judges compare in the parent, with bounds fixed before
anything is built from the child's bytes: stdout in time linear in its
length, splitting off only as many lines and tokens as the expectation has
(``_stdio_output_matches``); a returned value at most 8 times the length and
4 times the element count of the expectation's JSON (plus constants),
decoded in one pass of the C JSON decoder without hashing a number
(``_returned_value_matches``); properties by trusted code
(``polynomial_root``) on a payload bounded by the property's own size,
decoded the same way.  Stdout that is not valid UTF-8 never matches.

Not here: running the sandbox (``grading/sandbox.py``), extracting the program from a
completion and the public entry points (``verifier.py``).
"""

from __future__ import annotations

import ast
import codecs
import json
import marshal
import math
import re
import threading
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from grading.sandbox import TestSpec

# Possessive quantifiers: a match never backtracks, so it is linear in the token.
_NUMBER_TOKEN = re.compile(r"[+-]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][+-]?+\d++)?+")
_TOKEN = re.compile(r"\S+")


# ---------------------------------------------------------------------------
# Test schemas
# ---------------------------------------------------------------------------


def parse_tests(tests: dict) -> TestSpec:
    """Validate ``tests`` (see ``verify_code``) and build its ``TestSpec``."""
    if not isinstance(tests, dict):
        raise ValueError(f"tests must be a dict, got {type(tests).__name__}")  # noqa: TRY004 (bad input is a ValueError)
    parsers = {"stdio": _parse_stdio_tests, "call": parse_call_tests, "assert": _parse_assert_tests}
    kind = tests.get("kind")
    if kind not in parsers:
        raise ValueError(f"unknown test kind {kind!r}; expected one of {sorted(parsers)}")
    return parsers[kind](tests)


def _require(tests: dict, key: str, kind: type) -> Any:
    """``tests[key]``, which must exist and be a ``kind``."""
    if key not in tests:
        raise ValueError(f"{tests['kind']} tests are missing the key {key!r}")
    value = tests[key]
    if not isinstance(value, kind):
        raise ValueError(f"tests[{key!r}] must be a {kind.__name__}, got {type(value).__name__}")  # noqa: TRY004 (bad input is a ValueError)
    return value


def _paired_lists(tests: dict) -> tuple[list, list]:
    """``tests["inputs"]`` and ``tests["outputs"]``: lists of equal length."""
    inputs, outputs = _require(tests, "inputs", list), _require(tests, "outputs", list)
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    return inputs, outputs


def _parse_stdio_tests(tests: dict) -> TestSpec:
    inputs, outputs = _paired_lists(tests)
    for name, values in (("inputs", inputs), ("outputs", outputs)):
        if not all(isinstance(value, str) for value in values):
            raise ValueError(f"stdio {name} must all be str")
    expected = list(outputs)

    def judge(index: int, tag: bytes, payload: bytes) -> bool:
        return tag == b"O" and _stdout_matches(expected[index], payload)

    request = {"kind": "stdio", "inputs": [value.encode() for value in inputs]}
    return TestSpec(request, len(inputs), 0, judge)


def _stdout_matches(expected: str, payload: bytes) -> bool:
    """Whether stdout bytes match; output that is not valid UTF-8 never does (the
    expectation is text, and decoding with replacement characters would build a
    string several times the frame's size)."""
    actual = _strict_utf8(payload)
    return actual is not None and _stdio_output_matches(expected, actual)


def _strict_utf8(payload: bytes, chunk: int = 1 << 20) -> str | None:
    """``payload`` decoded as UTF-8, or None if it is not valid UTF-8; invalid
    input costs at most one chunk's decoding (a failed decode of the whole
    payload would copy all of it into the exception).

    >>> _strict_utf8(bytes([104, 195, 169])), _strict_utf8(bytes([104, 255]))
    ('hé', None)
    """
    if payload.isascii():
        return payload.decode("ascii")
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = []
    try:
        for start in range(0, len(payload), chunk):
            parts.append(decoder.decode(payload[start : start + chunk]))
        parts.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError:
        return None
    return "".join(parts)


def parse_call_tests(tests: dict) -> TestSpec:
    fn_name = _require(tests, "fn_name", str)
    if not fn_name.isidentifier():
        raise ValueError(f"fn_name {fn_name!r} is not an identifier")
    if "property" in tests:
        inputs = _require(tests, "inputs", list)
        if "outputs" in tests:
            raise ValueError("call tests with a 'property' take no 'outputs'")
        holds = _property_judge(_require(tests, "property", dict))
    else:
        inputs, outputs = _paired_lists(tests)
    if not all(isinstance(args, list) for args in inputs):
        raise ValueError("call inputs must be lists of positional arguments")
    try:
        arg_blobs = [marshal.dumps(args) for args in inputs]
        if "property" not in tests:
            expected = [json_normalize(value) for value in outputs]
    except (TypeError, ValueError) as error:
        raise ValueError(f"call inputs/outputs must be plain JSON data: {error}") from None

    def judge(index: int, tag: bytes, payload: bytes) -> bool:
        if index == 0:
            return tag == b"L"
        if tag != b"V":
            return False
        if "property" in tests:
            return holds(inputs[index - 1], payload)
        return _returned_value_matches(expected[index - 1], payload)

    request = {"kind": "call", "fn_name": fn_name, "inputs": arg_blobs}
    return TestSpec(request, 1 + len(inputs), 1, judge)


def _property_judge(spec: dict) -> Callable[[list, bytes], bool]:
    """The judge of a returned value's payload by the trusted check a
    ``property`` names, with its parameters bound.

    >>> _property_judge({"name": "polynomial_root", "atol": 1e-4})([[-6, 11, -6, 1]], b"3.0")
    True
    """
    name = spec.get("name")
    if name not in _PROPERTIES:
        raise ValueError(f"unknown call property {name!r}; known: {sorted(_PROPERTIES)}")
    check, parameters, max_bytes = _PROPERTIES[name]
    given = set(spec) - {"name"}
    if given != parameters:
        raise ValueError(f"property {name!r} takes parameters {sorted(parameters)}, got {sorted(given)}")
    for key in parameters:
        if not _is_number(spec[key]) or not spec[key] >= 0:
            raise ValueError(f"property {name!r}: {key} must be a non-negative number, got {spec[key]!r}")
    bound = {key: spec[key] for key in parameters}
    return lambda args, payload: _returned_value_has(check, bound, max_bytes, args, payload)


def _returned_value_has(
    check: Callable[..., bool], parameters: dict, max_bytes: int, args: list, payload: bytes
) -> bool:
    """Whether a child's typed-JSON value has the property, judged here in the parent.

    The payload is bounded by the property's size (``_PROPERTIES``) before it is
    decoded, and decoded as expectations are compared: one pass of the C JSON
    decoder, no number hashed (``_normalize_typed_object``).
    """
    if len(payload) > max_bytes:
        return False
    try:
        value = json.loads(payload.decode("utf-8"), object_pairs_hook=_normalize_typed_object)
        return check(args, value, **parameters) is True
    except (ValueError, TypeError, OverflowError, RecursionError, UnicodeDecodeError):
        return False


def _is_polynomial_root(args: list, value: Any, atol: float) -> bool:
    """HumanEval/32 ``find_zero(xs)``: any ``x`` with ``|sum_i xs[i] * x**i| <= atol``
    (evalplus's oracle; the recorded root is one of many right answers).

    >>> _is_polynomial_root([[1, 2]], -0.5, 1e-4), _is_polynomial_root([[1, 2]], -0.4, 1e-4)
    (True, False)
    >>> _is_polynomial_root([[1, 2]], True, 1e-4), _is_polynomial_root([[1, 2]], float("nan"), 1e-4)
    (False, False)
    """
    if not _is_number(value) or len(args) != 1 or not isinstance(args[0], list):
        return False
    coefficients = args[0]
    if not all(_is_number(c) for c in coefficients):
        return False
    total = sum(c * math.pow(value, i) for i, c in enumerate(coefficients))
    return abs(total) <= atol


# Properties a ``call`` test may name instead of expected outputs: trusted
# checks of (arguments, returned value), run in the parent, with their parameters
# and the largest payload a value with the property can have (a number: 64 bytes).
_PROPERTIES: dict[str, tuple[Callable[..., bool], set[str], int]] = {
    "polynomial_root": (_is_polynomial_root, {"atol"}, 64)
}


def _parse_assert_tests(tests: dict) -> TestSpec:
    entry_point = _require(tests, "entry_point", str)
    if not entry_point.isidentifier():
        raise ValueError(f"entry_point {entry_point!r} is not an identifier")
    test = _require(tests, "test", str)
    _check_defines_check(test)
    prelude = _require(tests, "prelude", str) if "prelude" in tests else ""
    try:
        compile(prelude, "<prelude>", "exec")
    except SyntaxError as error:
        raise ValueError(f"assert prelude does not parse: {error}") from None

    def judge(index: int, tag: bytes, payload: bytes) -> bool:
        return tag == b"P"

    request = {"kind": "assert", "entry_point": entry_point, "test": test, "prelude": prelude}
    return TestSpec(request, 1, 0, judge)


# CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state, so two
# threads parsing at once can fail with "SystemError: AST constructor recursion depth mismatch"
# (gh-106905). Programs are graded from a thread pool (verifier.grade) and records converted
# from one (dataprep/data.py): every ast.parse of ours goes through this one lock.
_AST_LOCK = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """ast.parse, one thread at a time (see _AST_LOCK)."""
    with _AST_LOCK:
        return ast.parse(source)


def _check_defines_check(test: str) -> None:
    """Raise ValueError unless ``test`` parses and defines ``check``."""
    try:
        tree = parse_python(test)
    except SyntaxError as error:
        raise ValueError(f"assert test code does not parse: {error}") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body):
        raise ValueError("assert test code must define a top-level function check(candidate)")


# ---------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------


def _stdio_output_matches(expected: str, actual: str) -> bool:
    """LiveCodeBench-style stdout comparison, linear in the output's length.

    Only as many lines and tokens as ``expected`` has are ever split off
    ``actual``, so a flood of short lines or tokens costs one scan, not one
    object each.

    >>> _stdio_output_matches("1 2\\n3.0\\n", "  1 2 \\n3\\n\\n")
    True
    >>> _stdio_output_matches("1 2", "1  3")
    False
    """
    expected_lines = [line.strip() for line in expected.strip().split("\n")]
    actual = actual.strip()
    if actual.count("\n") + 1 != len(expected_lines):
        return False
    start = 0
    for want in expected_lines:
        end = actual.find("\n", start)
        got = actual[start : len(actual) if end < 0 else end].strip()
        start = end + 1
        if want != got and not _tokens_numerically_equal(want, got):
            return False
    return True


def _tokens_numerically_equal(expected_line: str, actual_line: str) -> bool:
    """Whether two lines have the same tokens, numbers compared as Decimals.

    Only plain decimal or scientific notation counts as a number (not
    ``inf``, ``nan``, ``1_000`` or ``0x10``); other tokens must be equal.
    Tokens of ``actual_line`` are taken one at a time, at most one more than
    ``expected_line`` has.

    >>> _tokens_numerically_equal("1.50 x", "1.5 x"), _tokens_numerically_equal("1", "1.01")
    (True, False)
    >>> _tokens_numerically_equal("1e3", "1000"), _tokens_numerically_equal("1_000", "1000")
    (True, False)
    """
    expected_tokens = expected_line.split()
    actual_tokens = _TOKEN.finditer(actual_line)
    for want in expected_tokens:
        got = next(actual_tokens, None)
        if got is None or not _tokens_equal(want, got.group()):
            return False
    return next(actual_tokens, None) is None


def _tokens_equal(want: str, got: str) -> bool:
    """Equal strings, or both plain numbers with the same Decimal value."""
    if want == got:
        return True
    if not (_NUMBER_TOKEN.fullmatch(want) and _NUMBER_TOKEN.fullmatch(got)):
        return False
    try:
        return Decimal(want) == Decimal(got)
    except InvalidOperation:
        return False


def json_normalize(value: Any) -> Any:
    """The value as JSON would give it back: tuples become lists, keys strings.

    >>> json_normalize({1: (2, 3.5)})
    {'1': [2, 3.5]}
    """
    return json.loads(json.dumps(value))


def _returned_value_matches(expected: Any, payload: bytes) -> bool:
    """Whether a child's typed-JSON value equals the (normalized) expectation.

    The payload is bounded before anything is built from it: its length and
    an upper estimate of its element count may exceed those of the
    expectation's JSON only by constant factors (``_within_bounds``).  It is
    then decoded in one pass of the C JSON decoder (nesting limited by the
    interpreter's recursion limit), whose object hook normalizes the typed
    wrappers without hashing any number (``_normalize_typed_object``).
    """
    if not _within_bounds(json.dumps(expected).encode(), payload):
        return False
    try:
        actual = json.loads(payload.decode("utf-8"), object_pairs_hook=_normalize_typed_object)
        return _values_match(expected, actual)
    except (ValueError, TypeError, OverflowError, RecursionError, UnicodeDecodeError):
        return False  # e.g. an int too large for a float against a float expectation


def _within_bounds(expected_json: bytes, payload: bytes) -> bool:
    """Whether ``payload`` is small enough to be an encoding of the expectation.

    The child's encoding of an equal value is longer than ``json.dumps`` of
    the expectation only by its wrappers (``{"tuple": [...]}``, dict pairs as
    ``[key, value]``) and longer float spellings: less than 8 times the
    length and 4 times the count of brackets and commas (which bounds the
    number of values), plus constants.

    >>> _within_bounds(b"[1, 2]", b'{"tuple": [1, 2.0000000000000004]}')
    True
    >>> _within_bounds(b"[1, 2]", b"[" + b"[], " * 4096 + b"]")
    False
    """

    def elements(text: bytes) -> int:
        return text.count(b"[") + text.count(b"{") + text.count(b",")

    return len(payload) <= 8 * len(expected_json) + 4096 and elements(payload) <= 4 * elements(expected_json) + 64


def _normalize_typed_object(pairs: list[tuple[str, Any]]) -> Any:
    """JSON-decoder object hook: a typed wrapper as ``json_normalize`` gives it.

    Tuples become lists and dict keys their JSON strings, so no number is
    ever hashed (a set or dict of integers that all hash alike would take
    quadratic time to build).  Values JSON cannot hold (sets, bytes,
    complex, non-scalar keys) raise TypeError: they never equal an
    expectation.
    """
    if len(pairs) != 1:
        raise ValueError("a typed object must have exactly one key")
    ((tag, body),) = pairs
    if tag not in ("tuple", "dict") or type(body) is not list:
        raise TypeError(f"a {tag!r} value never equals a JSON expectation")
    if tag == "tuple":
        return body
    normalized = {}
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise ValueError("malformed dict item")
        normalized[_json_key(pair[0])] = pair[1]
    return normalized


def _json_key(key: Any) -> str:
    """The string ``json.dumps`` makes of a dict key; TypeError if it has none.

    >>> [_json_key(key) for key in ("a", 1, 2.5, True, None)]
    ['a', '1', '2.5', 'true', 'null']
    """
    if type(key) is str:
        return key
    if type(key) in (bool, int, float) or key is None:
        return json.dumps(key)
    raise TypeError("dict key of a type JSON cannot hold")


def _values_match(expected: Any, actual: Any) -> bool:
    """Compare JSON-normalized values.

    An integer expectation is matched exactly: by an equal ``int`` or a
    ``float`` of exactly the same value (``2.0`` for ``2``, never
    ``2500002.0`` for ``2500000``).  A float expectation ``e`` is matched by
    an int or float ``a`` with ``|a - e| <= max(1e-6 * max(|a|, |e|), 1e-6)``
    (``math.isclose``; NaN matches nothing).  Everything else must have the
    same type and value (``True`` never equals ``1``).

    >>> _values_match([1, 2.0], [1, 2.0000001]), _values_match(1, True), _values_match(2, 2.0)
    (True, False, True)
    >>> _values_match(2500000, 2500002.0), _values_match(10**18, 1e18), _values_match(10**18 + 1, 1e18)
    (False, True, False)
    """
    if _is_number(expected) and _is_number(actual):
        if type(expected) is int:
            return expected == actual  # int == float is exact in Python
        return math.isclose(expected, actual, rel_tol=1e-6, abs_tol=1e-6)
    if type(expected) is not type(actual):
        return False
    if type(expected) is list:
        return len(expected) == len(actual) and all(map(_values_match, expected, actual))
    if type(expected) is dict:
        return expected.keys() == actual.keys() and all(_values_match(expected[key], actual[key]) for key in expected)
    return expected == actual


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)

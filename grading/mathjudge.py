"""How a math worker judges a boxed answer against its gold: math-verify's parser and its
structural comparisons (sets, intervals, relations, matrices), with every numeric verdict
replaced by one that says True only with a proof of equality.

``grade(answers, gold, seconds)`` returns the status of one item (``correct``, ``wrong``,
``no_answer``, ``gold_unparsed`` or ``error``); ``verifier._verify_math_inprocess`` calls it in a
math worker's main thread, where math-verify's alarms work.

Parsing. Gold and answer are read the same way: a trailing unit written as words is dropped
(``strip_unit``: ``9\\text{ inches}`` and ``10 feet`` are 9 and 10, and only when what is left
holds no letter, so ``4t``, ``2\\pi r h`` and a piecewise gold keep every symbol), then both are
parsed as LaTeX with math-verify's normalization minus its unit stripping (``CONFIG``; its
stripping dropped everything from the first ``\\text`` to the end, mathematics included).
Primes are kept (``'`` and ``"`` become ``^{\\prime}``; math-verify deletes quotes).

The proof obligations (``install`` puts ``numeric_eq`` and ``symbolic_eq`` in the place of
math-verify's two numeric steps, which every comparison calls by name; docs/verifier.md lists
every path that returns True). Both sides are first made exact (``exact``): a decimal is the
exact decimal it is written as and ``x\\%`` is the number x (a percent sign is a unit mark,
never a factor of 1/100). Then:

* *rational gold* (an integer, ``\\frac{7}{3}``, ``18.90``, or a gold sympy simplifies to one):
  the answer must evaluate exactly to that rational. ``\\lfloor 10^{200}\\pi\\rfloor``,
  ``\\sqrt{9+10^{-300}}`` and ``0.3333333`` never answer 42, 3 and ``\\frac13``.
* *any other gold* (``\\pi``, ``2\\sqrt3``): an exact answer needs a difference that ``simplify``
  makes exactly 0 (``symbolic_eq``); an answer written as a decimal matches when the distance is
  certified below ``REL_TOL`` times the gold (plus ``ABS_FLOOR``): the gold is evaluated to
  ``DIGITS`` digits by sympy's strict evaluation, which raises rather than return fewer, and the
  comparison is made in exact rationals with the error bound of those digits (``_certified_close``).
* *anything else is False*: an exception, an exhausted precision, an alarm, a difference sympy
  cannot decide. No path reads "cannot tell it from zero" as equal.

Not here: extracting the boxed answers (``verifier.py``), the worker processes
(``grading/mathpool.py``). Imports nothing of ours; math-verify and sympy are imported on first
use, in the worker only (the trainer never loads them).
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from importlib.metadata import version
from typing import Any

MATH_VERIFY_VERSION = "0.9.0"  # install() replaces two of its functions: checked before it does
REL_TOL = "1e-6"  # a decimal answer's relative distance from a gold that is not rational
ABS_FLOOR = "1e-30"  # ... plus this absolute distance
DIGITS = 40  # the digits an irrational gold is evaluated to (strictly) for that comparison
_PRIMES = re.compile(r"(?<!\\)(?:'|\")+")
# A unit written as words at the end: \text{...}/\mbox{...} of letters (or a plain word of _UNIT_WORDS,
# tried only where a word starts), an optional ^2 or ^3 and a full stop. Searched, not matched with
# a lazy prefix: every start position costs at most the unit's own length, so a long answer is linear.
_TEXT_UNIT = re.compile(
    r"(?:\\(?:text|mbox|textrm|mathrm)\s*\{\s*(?P<word>[A-Za-z][A-Za-z .]*)\}"
    r"|(?<=[\s}0-9])(?<![A-Za-z])(?P<plain>[A-Za-z]{3,}))"
    r"(?:\s*\^\s*(?:[23]|\{\s*[23]\s*\}))?\s*\.?\s*\Z"
)
# Plain words taken for a unit (after a space): math-verify's unit list, minus what a formula could be.
_UNIT_WORDS = frozenset(
    "feet foot inch inches mile miles meter meters metre metres centimeter centimeters "
    "kilometer kilometers yard yards degree degrees cent cents dollar dollars pound pounds "
    "second seconds minute minutes hour hours day days week weeks month months year years "
    "unit units square squares gallon gallons liter liters litre litres acre acres hectare hectares "
    "point points digit digits student students apple apples coin coins tile tiles edge edges "
    "mph kmph kmh".split()
)
_NOT_UNITS = frozenset("and or if for when where with otherwise else is are".split())
_LETTER_OUTSIDE_COMMANDS = re.compile(r"(?<![\\A-Za-z])[A-Za-z]")
_CONFIG: dict[str, Any] = {}


def grade(answers: list[str], gold: str, seconds: int) -> str:
    """The status of the boxed ``answers`` (several boxes are one set) against ``gold``;
    each parse and each comparison is bounded by math-verify's ``seconds``-second alarm."""
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    config = _config()
    prediction = ", ".join("\\boxed{" + read_form(answer) + "}" for answer in answers)
    try:
        gold_parsed = parse("\\boxed{" + read_form(gold) + "}", [config], parsing_timeout=seconds)
        if not gold_parsed:
            return "gold_unparsed"
        predicted = parse(prediction, [config], parsing_timeout=seconds)
        if not predicted:
            return "no_answer"
        equal = verify(gold_parsed, predicted, timeout_seconds=seconds)
    except (Exception, TimeoutException):  # noqa: BLE001 (any failure grades False)
        return "error"
    return "correct" if equal is True else "wrong"


def read_form(text: str) -> str:
    """What is parsed of a gold or an answer: its trailing word unit dropped, primes kept.

    >>> read_form(r"9 \\text{ inches}"), read_form("4t"), read_form("f'(x)")
    ('9', '4t', 'f^{\\\\prime}(x)')
    """
    return _keep_primes(strip_unit(text))


def strip_unit(text: str) -> str:
    """``text`` without a trailing unit written as words (``\\text{ cm}``, ``\\mbox{ inches}^2``,
    `` feet``), when what is left is a value with no letter outside a LaTeX command; else unchanged.

    >>> strip_unit(r"5\\text{ cm}"), strip_unit(r"864 \\mbox{ inches}^2"), strip_unit("10 feet")
    ('5', '864', '10')
    >>> strip_unit(r"5\\text{ apples}+3\\text{ apples}"), strip_unit(r"2\\pi r \\text{ cm}"), strip_unit("2 abc")
    ('5\\\\text{ apples}+3\\\\text{ apples}', '2\\\\pi r \\\\text{ cm}', '2 abc')
    """
    match = _TEXT_UNIT.search(text)
    if match is None:
        return text
    value = text[: _end_before_spaces(text, match.start())].strip()
    word = (match.group("word") or match.group("plain")).strip()
    words = set(word.lower().replace(".", " ").split())
    plain_ok = match.group("plain") is None or word.lower() in _UNIT_WORDS
    if not value or words & _NOT_UNITS or not plain_ok or _LETTER_OUTSIDE_COMMANDS.search(value):
        return text
    if "\\text" in value or "\\mbox" in value or value.endswith(("\\", "^", "_", "{")):
        return text
    return value


def _end_before_spaces(text: str, end: int) -> int:
    """Where ``text[:end]`` ends without its trailing spaces: whitespace, ``~`` and the LaTeX spaces
    ``\\,`` ``\\;`` ``\\:`` ``\\!`` ``\\ `` (walked back one at a time: linear).

    >>> _end_before_spaces("5 \\, ~x", 6), _end_before_spaces("a\\ ", 3)
    (1, 1)
    """
    while end > 0:
        if end >= 2 and text[end - 2] == "\\" and text[end - 1] in ",;:! " and (end < 3 or text[end - 3] != "\\"):
            end -= 2
        elif text[end - 1].isspace() or text[end - 1] == "~":
            end -= 1
        else:
            break
    return end


def _keep_primes(text: str) -> str:
    """Primes as ``^{\\prime}`` (math-verify's clean-up deletes quotes: ``f'(x)`` would be ``f(x)``).

    >>> _keep_primes("f'(x) + 16''"), _keep_primes("\\\\'")
    ('f^{\\\\prime}(x) + 16^{\\\\prime\\\\prime}', "\\\\'")
    """
    return _PRIMES.sub(lambda match: "^{" + "\\prime" * (len(match.group()) + match.group().count('"')) + "}", text)


def _config() -> Any:
    """The extraction config of gold and answer, built once math-verify's comparisons are ours."""
    if not _CONFIG:
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import LatexExtractionConfig

        install()
        normalization = NormalizationConfig(
            basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False
        )
        if LatexExtractionConfig().normalization_config != replace(normalization, units=True):
            raise RuntimeError("math-verify's default normalization changed: CONFIG must be it minus units")
        _CONFIG["config"] = LatexExtractionConfig(boxed_match_priority=0, normalization_config=normalization)
    return _CONFIG["config"]


def install() -> None:
    """Make math-verify compare numbers as this module's docstring says: its ``sympy_numeric_eq``
    and ``sympy_symbolic_eq``, which every comparison (sets, intervals, relations, matrices)
    calls by name, become ``numeric_eq`` and ``symbolic_eq``. Raises RuntimeError on another
    math-verify version than the one these replacements were written for."""
    from math_verify import grader

    installed = version("math-verify")
    if installed != MATH_VERIFY_VERSION:
        raise RuntimeError(
            f"grading/mathjudge.py replaces functions of math-verify {MATH_VERIFY_VERSION}, "
            f"but {installed} is installed (requirements/common.txt pins it)"
        )
    grader.sympy_numeric_eq = numeric_eq
    grader.sympy_symbolic_eq = symbolic_eq


def numeric_eq(gold: Any, answer: Any, float_rounding: int = 6, numeric_precision: int = 15) -> bool:
    """math-verify's numeric step (its signature; the rounding arguments are unused), with a proof.

    Matrices compare element by element. Otherwise, both made exact (``exact``): equal trees; a
    rational gold (``rational_value``) and an answer that is exactly that rational; or a gold that is
    not rational and an answer written with a decimal, certified close (``_certified_close``).
    """
    from sympy import MatrixBase, MatrixExpr

    try:
        if isinstance(gold, (MatrixBase, MatrixExpr)) or isinstance(answer, (MatrixBase, MatrixExpr)):
            return _matrices_equal(gold, answer, numeric_eq)
        exact_gold, exact_answer = exact(gold), exact(answer)
        if exact_gold == exact_answer:
            return True
        if not (exact_gold.is_number and exact_answer.is_number):
            return False
        rational_gold = rational_value(exact_gold)
        if rational_gold is not None:
            return exact_answer.is_Rational is True and exact_answer == rational_gold
        return (
            _written_as_decimal(answer)
            and exact_answer.is_Rational is True
            and _certified_close(exact_gold, exact_answer)
        )
    except Exception:  # noqa: BLE001 (a failure is no proof)
        return False


def symbolic_eq(gold: Any, answer: Any) -> bool:
    """math-verify's symbolic step, with a proof: the exact difference simplifies to exactly 0
    (for matrices, every entry does). ``is_zero`` is not asked: only the zero it returns is read."""
    from sympy import Integer, MatrixBase, MatrixExpr, simplify

    try:
        if isinstance(gold, (MatrixBase, MatrixExpr)) or isinstance(answer, (MatrixBase, MatrixExpr)):
            return _matrices_equal(gold, answer, symbolic_eq)
        exact_gold, exact_answer = exact(gold), exact(answer)
        if exact_gold.is_number and rational_value(exact_gold) is not None:
            return False  # a rational gold is answered only by that rational (numeric_eq)
        return simplify(exact_gold - exact_answer) == Integer(0)
    except Exception:  # noqa: BLE001 (a failure is no proof)
        return False


def _matrices_equal(gold: Any, answer: Any, equal: Any) -> bool:
    """Two matrices of one shape whose entries are ``equal``; anything else is False."""
    from math_verify.grader import safe_sympy_doit
    from sympy import MatrixBase

    gold, answer = safe_sympy_doit(gold), safe_sympy_doit(answer)
    if not (isinstance(gold, MatrixBase) and isinstance(answer, MatrixBase) and gold.shape == answer.shape):
        return False
    return all(equal(g, a) for g, a in zip(gold.flat(), answer.flat(), strict=True))


def exact(value: Any) -> Any:
    """``value`` with every finite float replaced by the exact decimal it prints as at its own
    precision (``0.1`` is 1/10, ``1.0\\times10^{20}`` is 10**20) and every percentage ``x\\%`` by x,
    then evaluated (``doit``).

    >>> from sympy import Float, Integer, Mul, Pow, Rational, UnevaluatedExpr
    >>> exact(Float("0.1")), exact(Mul(Float("1.0"), Pow(10, 20, evaluate=False), evaluate=False)) == 10**20
    (1/10, True)
    >>> exact(Mul(Integer(50), UnevaluatedExpr(Rational(1, 100)), evaluate=False))
    50
    """
    from math_verify.grader import safe_sympy_doit
    from sympy import Float, Mul, Rational, UnevaluatedExpr

    percent = UnevaluatedExpr(Rational(1, 100))
    marked = {
        term: Mul(*[factor for factor in term.args if factor != percent])
        for term in value.atoms(Mul)
        if percent in term.args
    }
    if marked:
        value = value.xreplace(marked)
    floats = {number: Rational(str(number)) for number in value.atoms(Float) if number.is_finite}
    return safe_sympy_doit(value.xreplace(floats) if floats else value)


@functools.lru_cache(maxsize=1024)  # the gold's, asked by both steps of every comparison with it
def rational_value(value: Any) -> Any:
    """The rational a number is, when sympy's evaluation or ``simplify`` gives one exactly; else None.

    >>> from sympy import Integer, log, pi, sin, cos
    >>> rational_value(Integer(7)), rational_value(sin(1) ** 2 + cos(1) ** 2), rational_value(pi)
    (7, 1, None)
    """
    from sympy import simplify

    if value.is_Rational:
        return value
    simplified = simplify(value)
    return simplified if simplified.is_Rational else None


def _written_as_decimal(value: Any) -> bool:
    """Whether the answer as parsed holds a decimal (a Float): only such an answer approximates."""
    from sympy import Basic, Float

    return isinstance(value, Basic) and value.has(Float)


def _certified_close(gold: Any, answer: Any) -> bool:
    """Whether ``|gold - answer| <= REL_TOL * |gold| + ABS_FLOOR`` holds for certain: ``gold`` (a
    real number) evaluated to ``DIGITS`` digits by sympy's strict evalf (PrecisionExhausted, not
    fewer digits), ``answer`` an exact rational, the bound checked in rationals with the evaluation's
    error (a relative 10^-(DIGITS-2), wider than the digits promise) on the unfavourable side.

    >>> from sympy import Rational, pi, sqrt
    >>> _certified_close(pi, Rational("3.14159265")), _certified_close(pi, Rational("3.1416"))
    (True, False)
    >>> _certified_close(sqrt(2) * 10**200, Rational(10**200))
    False
    """
    from sympy import Float, Rational

    approximation = gold.evalf(DIGITS, strict=True)
    if not isinstance(approximation, Float) or not approximation.is_finite:
        return False  # complex, infinite or not a number
    center = Rational(approximation)  # the exact binary value sympy computed
    error = abs(center) * Rational(1, 10 ** (DIGITS - 2))
    distance_at_most = abs(center - answer) + error
    size_at_least = abs(center) - error
    return bool(distance_at_most <= Rational(REL_TOL) * size_at_least + Rational(ABS_FLOOR))

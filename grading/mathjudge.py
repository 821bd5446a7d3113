"""How a math worker judges a boxed answer against its gold: math-verify, configured so that
the gold (the trusted reference) is never widened.

``grade(answers, gold, seconds)`` returns the status of one item (``correct``, ``wrong``,
``no_answer``, ``gold_unparsed`` or ``error``); ``verifier._verify_math_inprocess`` calls it in a
math worker's main thread, where math-verify's alarms work.

The gold is parsed as LaTeX with math-verify's normalization minus its unit stripping
(``GOLD``): no unit, no trailing ``\\text{...}`` and no letter math-verify takes for a unit is
dropped (``4t`` stays ``4t``; the default turns it into ``4``), and primes are kept (``'`` and
``"`` become ``^{\\prime}``; the default deletes them). What the gold keeps of math-verify's
clean-up only reformats: ``\\left``/``\\right``, ``\\dfrac``, ``\\displaystyle``, ``$`` and
``\\$``, ``\\!``, malformed ``\\frac12`` or ``\\sqrt2``, a leading ``.5``, ``0.5`` as
``\\frac{1}{2}``, the words "and"/"or" as commas, ``^\\circ``.

The answer is parsed twice, as math-verify parses it by default (``ANSWER``: units and a
trailing ``\\text{...}`` dropped, so ``5\\text{ cm}`` answers 5) and as the gold is (so
``5\\text{ cm}`` also answers ``5\\text{ cm}``); it is correct when either parse equals the gold.
The leniencies are the answer's, never the gold's (docs/verifier.md lists them).

Numbers (``install`` replaces math-verify's two numeric steps, ``sympy_numeric_eq`` and
``sympy_symbolic_eq``, which round to 6 decimals and compare at 15 significant digits): a
decimal is the exact decimal it is written as, and no side is ever rounded.
* A gold whose exact value has a finite decimal expansion (an integer, ``\\frac{1}{8}``,
  ``3\\times10^{-7}``, ``18.90``) is matched by exactly that value: ``1.0\\times10^{20}`` never
  answers ``10^{20}+1``, ``0.0`` never answers ``\\frac{1}{2^{30}}``.
* Any other gold (``\\frac{1}{3}``, ``\\pi``, ``\\sqrt{2}``): an answer written with a decimal
  matches within a relative ``REL_TOL`` (plus ``ABS_FLOOR``): ``0.3333333`` answers
  ``\\frac{1}{3}``, ``0.33`` does not; an exact answer must be exactly equal (sympy proves
  the difference zero, or cannot tell it from zero at about 100 digits): ``\\pi + 10^{-20}``
  never answers ``\\pi``.

Not here: extracting the boxed answers (``verifier.py``), the worker processes
(``grading/mathpool.py``). Imports nothing of ours; math-verify and sympy are imported on first
use, in the worker only (the trainer never loads them).
"""

from __future__ import annotations

import re
from dataclasses import replace
from importlib.metadata import version
from typing import Any

MATH_VERIFY_VERSION = "0.9.0"  # install() replaces two of its functions: checked before it does
REL_TOL = "1e-6"  # an inexact answer's relative distance from a gold without a finite decimal
ABS_FLOOR = "1e-30"  # ... plus this absolute distance (a gold that sympy evaluates near 0)
_PRIMES = re.compile(r"(?<!\\)(?:'|\")+")
_CONFIGS: dict[str, Any] = {}


def grade(answers: list[str], gold: str, seconds: int) -> str:
    """The status of the boxed ``answers`` (several boxes are one set) against ``gold``;
    each parse and each comparison is bounded by math-verify's ``seconds``-second alarm."""
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    gold_config, answer_config = _configs()
    prediction = ", ".join("\\boxed{" + _keep_primes(answer) + "}" for answer in answers)
    try:
        gold_parsed = parse("\\boxed{" + _keep_primes(gold) + "}", [gold_config], parsing_timeout=seconds)
        if not gold_parsed:
            return "gold_unparsed"
        predicted = parse(prediction, [answer_config], parsing_timeout=seconds)
        as_gold = parse(prediction, [gold_config], parsing_timeout=seconds)
        if as_gold != predicted:
            predicted += as_gold
        if not predicted:
            return "no_answer"
        equal = verify(gold_parsed, predicted, timeout_seconds=seconds)
    except (Exception, TimeoutException):  # noqa: BLE001 (any failure grades False)
        return "error"
    return "correct" if equal is True else "wrong"


def _keep_primes(text: str) -> str:
    """Primes as ``^{\\prime}`` (math-verify's clean-up deletes quotes: ``f'(x)`` would be ``f(x)``).

    >>> _keep_primes("f'(x) + 16''"), _keep_primes("\\\\'")
    ('f^{\\\\prime}(x) + 16^{\\\\prime\\\\prime}', "\\\\'")
    """
    return _PRIMES.sub(lambda match: "^{" + "\\prime" * (len(match.group()) + match.group().count('"')) + "}", text)


def _configs() -> tuple[Any, Any]:
    """(gold config, answer config), built once math-verify's comparisons are ours (``install``)."""
    if not _CONFIGS:
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import LatexExtractionConfig

        install()
        gold = NormalizationConfig(
            basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False
        )
        _CONFIGS["gold"] = LatexExtractionConfig(boxed_match_priority=0, normalization_config=gold)
        _CONFIGS["answer"] = LatexExtractionConfig(boxed_match_priority=0)
        if _CONFIGS["answer"].normalization_config != replace(gold, units=True):
            raise RuntimeError("math-verify's default normalization changed: GOLD must be it minus units")
    return _CONFIGS["gold"], _CONFIGS["answer"]


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
    """math-verify's numeric step (its signature; the rounding arguments are unused), exact.

    Matrices compare element by element; an integer and an integer percentage compare by
    their numbers (``50\\%`` answers 50, math-verify's leniency); otherwise the two values,
    each decimal read as the exact decimal it is, must be equal, except that an answer with a
    decimal approximates a gold without a finite decimal expansion within ``REL_TOL``.
    """
    from math_verify.grader import get_pct_val, is_atomic_or_pct_atomic, safe_sympy_doit
    from sympy import Float, Integer, MatrixBase, MatrixExpr

    if isinstance(gold, (MatrixBase, MatrixExpr)) and isinstance(answer, (MatrixBase, MatrixExpr)):
        gold, answer = safe_sympy_doit(gold), safe_sympy_doit(answer)
        if isinstance(gold, MatrixBase) and isinstance(answer, MatrixBase) and gold.shape == answer.shape:
            return all(numeric_eq(g, a) for g, a in zip(gold.flat(), answer.flat(), strict=True))
        return False
    if is_atomic_or_pct_atomic(gold, Integer) and is_atomic_or_pct_atomic(answer, Integer):
        return get_pct_val(gold, gold) == get_pct_val(answer, answer)
    try:
        exact_gold = exact(gold)
        difference = exact_gold - exact(answer)
        if difference == 0:
            return True
        if not difference.is_number:
            return False
        if not (gold.has(Float) or answer.has(Float)):
            return _indistinguishable_from_zero(difference)
        return not _has_finite_decimal(exact_gold) and _within_tolerance(difference, exact_gold)
    except Exception:  # noqa: BLE001 (values sympy cannot subtract or evaluate are unequal)
        return False


def symbolic_eq(gold: Any, answer: Any) -> bool:
    """math-verify's symbolic step (``simplify`` of the difference is zero), on exact values:
    a decimal is its exact decimal, so ``10^{20}+1 - 1.0\\times10^{20}`` is 1, not a float 0."""
    from sympy import Basic, MatrixBase, simplify

    try:
        difference = simplify(exact(gold) - exact(answer))
        if isinstance(difference, MatrixBase):
            return bool(difference.is_zero_matrix)
        return isinstance(difference, Basic) and difference.is_zero is True
    except Exception:  # noqa: BLE001 (as math-verify: a failure is unequal)
        return False


def exact(value: Any) -> Any:
    """``value`` with every finite float replaced by the exact decimal it prints as at its own
    precision (``0.1`` is 1/10, ``1.0\\times10^{20}`` is 10**20), then evaluated (``doit``).

    >>> from sympy import Float, Integer, Mul, Pow
    >>> exact(Float("0.1")), exact(Mul(Float("1.0"), Pow(10, 20, evaluate=False), evaluate=False)) == 10**20
    (1/10, True)
    """
    from math_verify.grader import safe_sympy_doit
    from sympy import Float, Rational

    floats = {number: Rational(str(number)) for number in value.atoms(Float) if number.is_finite}
    return safe_sympy_doit(value.xreplace(floats) if floats else value)


def _has_finite_decimal(value: Any) -> bool:
    """Whether ``value`` is a rational whose denominator has no prime factor but 2 and 5.

    >>> from sympy import Rational, pi
    >>> [_has_finite_decimal(v) for v in (Rational(7), Rational(1, 8), Rational(3, 10**7), Rational(1, 3), pi)]
    [True, True, True, False, False]
    """
    if not value.is_Rational:
        return False
    denominator = int(value.q)
    denominator >>= (denominator & -denominator).bit_length() - 1
    while denominator % 5 == 0:
        denominator //= 5
    return denominator == 1


def _within_tolerance(difference: Any, gold: Any) -> bool:
    """``|difference| <= REL_TOL * |gold| + ABS_FLOOR``, both evaluated to 30 digits."""
    from sympy import Float

    distance, size = abs(difference).evalf(30), abs(gold).evalf(30)
    if not (distance.is_Number and size.is_Number):
        return False
    return bool(distance <= Float(REL_TOL, 30) * size + Float(ABS_FLOOR, 30))


def _indistinguishable_from_zero(difference: Any) -> bool:
    """Whether sympy cannot tell an exact difference from zero: it evaluates to 0, or its
    adaptive evaluation finds no significant digit (at up to about 100 digits)."""
    from sympy.core.evalf import PrecisionExhausted

    try:
        value = difference.evalf(15, strict=True)
    except PrecisionExhausted:
        return True
    return value == 0

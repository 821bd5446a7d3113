"""The math judge (grading/mathjudge.py) under attack: a verdict of True only with a proof.

The adversary's answers (tests/math_attacks.py) are graded through the real pool
(verifier.verify_math_batch), against the synthetic golds (always) and the real golds of MATH-500,
AIME 2024/2025, AMC and DeepScaleR through the fixture resolver (`real_parts`). Two tiers: what
runs in the suite, and `exhaustive` (deselected by default; `bash run.sh test -m exhaustive
tests/test_mathjudge.py`): every attack against every real gold.
"""

import doctest
import itertools
import time

import pytest
from math_attacks import (
    NEAR_DECIMALS,
    SEVERAL_BOXES,
    SLOW_ATTACKS,
    SYNTHETIC_GOLDS,
    UNIVERSAL_ATTACKS,
    boxed,
    gold_class,
    perturbations,
    real_golds,
    several_boxes,
)

import verifier
from grading import mathjudge

pytestmark = pytest.mark.usefixtures("close_math_pool")

# Synthetic golds that are one number (perturbations() builds wrong answers from these).
NUMERIC_GOLDS = [
    gold
    for gold, _ in SYNTHETIC_GOLDS
    if not any(mark in gold for mark in ("\\{", "(", "pmatrix", "x", "t", "%", "$", "text"))
]


def grade(pairs: list[tuple[str, str]]) -> list[bool]:
    return verifier.verify_math_batch(pairs, workers=2, timeout_s=3 * verifier.DEFAULT_MATH_TIMEOUT_S)


def passed(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (answer, gold) pairs graded True."""
    return [pair for pair, verdict in zip(pairs, grade(pairs)) if verdict]


def test_the_judges_examples_hold():
    assert doctest.testmod(mathjudge, raise_on_error=False).failed == 0


def test_no_universal_attack_passes_any_gold():
    """The key (floor(10^200 pi)) and its family, alone and wrapped, against every synthetic gold:
    before, the key alone passed 22 of these 32 golds (all but the decimals, the unit, the sets,
    intervals and matrix, and the expressions), and the family 272 pairs."""
    completions = [boxed(answer) for answer in UNIVERSAL_ATTACKS] + [several_boxes(b) for b in SEVERAL_BOXES]
    pairs = [(completion, gold) for completion in completions for gold, _ in SYNTHETIC_GOLDS]
    assert passed(pairs) == []


def test_an_answer_that_runs_into_the_alarm_is_wrong():
    """A comparison sympy cannot finish within math-verify's alarm is False (never "no difference")."""
    pairs = [(boxed(answer), gold) for answer in SLOW_ATTACKS for gold in ("42", r"\pi")]
    assert passed(pairs) == []


def test_each_gold_answers_exactly_the_golds_of_its_value():
    """Every synthetic gold, written as the answer, against every other: True exactly where the two
    are one value (a percent sign, a trailing unit or a form apart), so no answer passes two values."""
    pairs = [(boxed(answer), gold) for (answer, _), (gold, _) in itertools.product(SYNTHETIC_GOLDS, repeat=2)]
    verdicts = grade(pairs)
    expected = [gold_class(gold) == gold_class(answer[len("\\boxed{") : -1]) for answer, gold in pairs]
    assert [pair for pair, got, want in zip(pairs, verdicts, expected) if got != want] == []


def test_perturbations_of_a_gold_are_wrong():
    """Off by one, by 10^-300, by a factor 1 + 10^-50, by a cancellation no float resolves, by a
    nudged square root: each wrong against the gold it was made from."""
    pairs = [(boxed(answer), gold) for gold in NUMERIC_GOLDS for answer in perturbations(gold)]
    assert len(pairs) > 100
    assert passed(pairs) == []


def test_a_rational_gold_is_answered_only_by_itself():
    """A decimal within a relative 10^-6 of a rational gold is not it (before: 0.3333333 answered
    1/3 and 1.0000005 the gold sin^2 1 + cos^2 1); a decimal close to an irrational gold is
    wrong outside the tolerance."""
    pairs = [(boxed(answer), gold) for gold, answer in NEAR_DECIMALS]
    pairs += [(boxed("0.3333333"), r"\frac13"), (boxed("1.0000005"), r"\sin^2 1+\cos^2 1"), (boxed("0.5"), r"50\%")]
    assert passed(pairs) == []


LENIENCIES = [
    # (answer, gold): the leniencies docs/verifier.md keeps, each within one value
    (r"5\text{ cm}", "5"),
    ("10 feet", "10"),
    (r"18\text{ m}^2", "18"),
    ("9", r"9 \text{ inches}"),
    (r"50\%", "50"),
    ("50", r"50\%"),
    ("x=5", "5"),
    ("5", "x=5"),
    ("3.14159265", r"\pi"),
    ("1.41421356", r"\sqrt2"),
    ("0.5", r"\frac12"),
    ("2.0", "2"),
    (r"\sqrt{3+2\sqrt{2}}", r"1+\sqrt{2}"),
    ("1", r"\sin^2 1+\cos^2 1"),
    (r"\frac{\pi r^2 h}{3}", r"\frac{1}{3}\pi r^2 h"),
]


def test_the_leniencies_that_remain_still_hold():
    pairs = [(boxed(answer), gold) for answer, gold in LENIENCIES]
    assert [pair for pair, verdict in zip(pairs, grade(pairs)) if not verdict] == []


def test_reading_a_long_answer_is_linear():
    """The unit strip runs before math-verify's alarms: it must not backtrack. Before, an answer of
    '1', 30,000 spaces and 'x' took 80 s (a lazy prefix before an anchored unit); each of these
    takes milliseconds, so 20 of them together stay far below a second on any machine we run."""
    n = 30_000
    answers = ["1" + " " * n + "x", "a " * n, r"\text{a" + " " * n, "5" + r"\," * n + r"\text{ cm}", "1 " + "ab" * n]
    started = time.process_time()
    for _ in range(4):
        stripped = [mathjudge.strip_unit(answer) for answer in answers]
    assert time.process_time() - started < 5.0  # quadratic would be minutes
    assert stripped == answers[:3] + ["5", answers[4]]


def test_the_proofs_are_the_only_paths_to_true():
    """The replaced steps on sympy values: what PrecisionExhausted or an undecided difference used
    to make True is False, and each obligation's own case is True."""
    from sympy import Float, Integer, Rational, cos, floor, pi, sin, sqrt

    mathjudge.install()
    key = floor(10**200 * pi)
    for gold in (Integer(42), Rational(7, 3), pi, 2 * sqrt(3), Integer(10**20 + 1)):
        assert mathjudge.numeric_eq(gold, key) is False
        assert mathjudge.symbolic_eq(gold, key) is False
    assert mathjudge.numeric_eq(Integer(1), sin(10**200) ** 2 + cos(10**200) ** 2 - 10**-300) is False
    assert mathjudge.numeric_eq(Integer(3), sqrt(9 + Rational(1, 10**300))) is False
    assert mathjudge.numeric_eq(Rational(1, 3), Float("0.3333333")) is False
    assert mathjudge.numeric_eq(Rational(1, 2), Float("0.5")) is True  # exact rational equality
    assert mathjudge.symbolic_eq(1 + sqrt(2), sqrt(3 + 2 * sqrt(2))) is True  # simplifies to 0
    assert mathjudge.numeric_eq(pi, Float("3.14159265")) is True  # certified within 1e-6
    assert mathjudge.numeric_eq(pi, Float("3.1416")) is False


@pytest.mark.slow
def test_the_key_attack_passes_no_real_gold(real_part):
    """floor(10^200 pi), the key, against every real gold: before, it passed 1,221 of the 1,403
    (all but the golds written with a decimal point and a few sets and tuples)."""
    golds = real_golds(real_part)
    assert len(golds) == 1403
    pairs = [(boxed(r"\lfloor 10^{200}\pi\rfloor"), gold) for _, gold in golds]
    assert passed(pairs) == []


@pytest.mark.exhaustive
def test_every_attack_against_every_real_gold(real_part):
    """The whole harness on the real golds: every universal attack (and several boxes) against
    every gold, every perturbation of each gold that is one number against it; and each gold
    against itself is True."""
    golds = real_golds(real_part)
    completions = [boxed(answer) for answer in UNIVERSAL_ATTACKS] + [several_boxes(b) for b in SEVERAL_BOXES]
    pairs = [(completion, gold) for completion in completions for _, gold in golds]
    numeric = [gold for _, gold in golds if _is_one_number(gold)]
    pairs += [(boxed(answer), gold) for gold in numeric for answer in perturbations(gold)]
    assert passed(pairs) == []
    assert all(grade([(boxed(gold), gold) for _, gold in golds]))


def _is_one_number(gold: str) -> bool:
    """Whether a gold is written as one number (no letters but LaTeX commands, no list)."""
    return not any(
        c.isalpha() for c in gold.replace("\\frac", "").replace("\\sqrt", "").replace("\\pi", "")
    ) and not any(sep in gold for sep in (",", "(", "[", "\\{", "=", "<", ">"))

"""The math adversary: wrong answers of many shapes, built as a policy searching for reward would
build them, and the golds they are tried against (tests/test_mathjudge.py grades them).

* `SYNTHETIC_GOLDS`: golds of every kind the data has (integers, huge and tiny rationals,
  decimals, irrationals, percentages, units, sets, intervals, tuples, matrices, expressions), each
  with the class of golds it equals (`gold_class`: ``50\\%`` and ``50`` are one value).
* `UNIVERSAL_ATTACKS`: answers that know no gold, each a value no gold here has: huge and tiny
  magnitudes, floors and ceilings of irrationals, cancellations, trigonometric identities at huge
  arguments, each also wrapped (a set, a comma list, several boxes, a matrix, ``x=``, a unit, a
  percentage).
* `real_golds(real_part)`: the real golds, through the fixture resolver.
* `perturbations(gold)`: wrong answers made from one gold: off by one, by a factor, by an amount
  below any float's resolution, its decimal to a few digits, its square root of a nudged square,
  and the same cancellations added to it.

Every answer here is wrong against every gold it is not declared equal to; a grader that says
True to one has been beaten. Not here: the grading (tests/test_mathjudge.py), the code sandbox's
attacks (tests/sandbox_cases.py).
"""

from __future__ import annotations

from dataprep import convert, data

REAL_MATH_SOURCES = ("math500", "aime24", "aime25", "amc", "deepscaler")

# (gold, class): golds of one class are one value (a unit, a percent sign or a form apart).
SYNTHETIC_GOLDS = [
    ("42", "42"),
    ("2025", "2025"),
    ("-17", "-17"),
    ("0", "0"),
    ("1", "1"),
    (r"10^{20}+1", "1e20+1"),
    (r"10^{20}", "1e20"),
    (r"\frac{7}{3}", "7/3"),
    (r"\frac{1}{2^{30}}", "2^-30"),
    (r"\frac{1}{2}", "1/2"),
    ("0.5", "1/2"),
    ("27.0", "27"),
    ("27", "27"),
    (r"\$18.90", "18.9"),
    (r"50\%", "50"),
    ("50", "50"),
    (r"12.5\%", "12.5"),
    (r"9 \text{ inches}", "9"),
    ("9", "9"),
    (r"\pi", "pi"),
    (r"\frac{\pi}{3}", "pi/3"),
    (r"2\sqrt{3}", "2sqrt3"),
    (r"\sqrt{12}", "2sqrt3"),
    (r"1+\sqrt{2}", "1+sqrt2"),
    ("e", "e"),
    (r"\ln 2", "ln2"),
    (r"\{1, 2\}", "{1,2}"),
    ("(0, 1]", "(0,1]"),
    ("(1, 2)", "{1,2}"),  # math-verify reads (1, 2) as an open interval or a pair: {1, 2} answers it
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "[1;2]"),
    ("x^2+1", "x^2+1"),
    ("4t", "4t"),
]

_FLOOR_PI = r"\lfloor 10^{200}\pi\rfloor"
_CANCEL = r"\lfloor 10^{150}\pi\rfloor-10^{150}\pi"  # in (-1, 0): no float tells it from 0
_CORES = [
    _FLOOR_PI,
    r"\lceil 10^{200}e\rceil",
    r"\lfloor 10^{200}\sqrt{2}\rfloor",
    _CANCEL,
    r"\sin^2(10^{200})+\cos^2(10^{200})",
    r"\sin(10^{200})",
    r"\frac{\lfloor 10^{200}\pi\rfloor}{10^{200}}",
    r"10^{-300}",
    r"10^{300}",
    r"\frac{1}{10^{400}}",
    r"2^{2^{20}}",
    r"(10^{-300})!",
    r"\sqrt{10^{-300}}",
    r"10^{200}\pi-\lfloor 10^{200}\pi\rfloor",
]
# Answers whose comparison runs into math-verify's alarm (seconds each): graded False on time.
SLOW_ATTACKS = [r"\lceil 10^{300}\ln 2\rceil - 10^{300}\ln 2"]
# Each core alone, and in the wrappers a policy would try around it.
UNIVERSAL_ATTACKS = _CORES + [
    rf"\{{{_FLOOR_PI}\}}",
    rf"{_FLOOR_PI}, {_FLOOR_PI}",
    rf"\begin{{pmatrix}} {_FLOOR_PI} \\ {_FLOOR_PI} \end{{pmatrix}}",
    rf"x={_FLOOR_PI}",
    rf"{_FLOOR_PI}\text{{ cm}}",
    rf"{_FLOOR_PI}\%",
    rf"({_FLOOR_PI}, {_FLOOR_PI}]",
    rf"5\text{{ apples}}+{_FLOOR_PI}\text{{ apples}}",
    rf"\{{{_CANCEL}\}}",
    rf"\{{1, 2+{_CANCEL}\}}",
    rf"(0, 1+{_CANCEL}]",
    rf"\begin{{pmatrix}} 1 \\ 2+{_CANCEL} \end{{pmatrix}}",
    rf"x^2+1+{_CANCEL}",
    rf"4t+{_CANCEL}",
]
# Several boxes are one answer: the completion for these is each box in turn.
SEVERAL_BOXES = [[_FLOOR_PI, r"\lceil 10^{200}e\rceil"], [_FLOOR_PI] * 3]


def boxed(answer: str) -> str:
    return rf"\boxed{{{answer}}}"


def several_boxes(answers: list[str]) -> str:
    return ", ".join(boxed(answer) for answer in answers)


def perturbations(gold: str) -> list[str]:
    """Wrong answers made from ``gold``, a number written in LaTeX: each differs from it by an
    amount from 1 down to far below any float's resolution, or approximates an exact value."""
    g = "{(" + gold + ")}"
    scaled = (
        []
        if gold.strip() == "0"
        else [  # a multiple of 0 is 0: right, not wrong
            rf"{g}\cdot(1+10^{{-50}})",
            rf"{g}\cdot\frac{{\lfloor 10^{{200}}\pi\rfloor}}{{10^{{200}}\pi}}",
        ]
    )
    return scaled + [
        rf"{g}+1",
        rf"{g}-1",
        rf"{g}+10^{{-300}}",
        rf"{g}+\lfloor 10^{{150}}\pi\rfloor-10^{{150}}\pi",
        rf"{g}+\sin(10^{{200}})^2+\cos(10^{{200}})^2-1+10^{{-100}}",
        rf"\sqrt{{{g}^2+10^{{-300}}}}",
    ]


# Each synthetic gold that is a single number, with a decimal within REL_TOL of it that is still
# wrong, because the gold is rational (a rational gold is answered only by itself).
NEAR_DECIMALS = [
    ("42", "42.0000001"),
    ("42", "41.99999999999999999999999"),
    (r"\frac{7}{3}", "2.3333333"),
    (r"\frac{7}{3}", "2.333333333333333333333333333"),
    (r"\frac{1}{2^{30}}", "0.0"),
    (r"\frac{1}{2^{30}}", r"9.3132257\times10^{-10}"),
    (r"10^{20}+1", r"1.0\times10^{20}"),
    ("1", "0.99999999999999999999"),
    (r"\pi", "3.1416"),
    (r"\frac{\pi}{3}", "1.047"),
    (r"2\sqrt{3}", "3.464"),
]


def gold_class(gold: str) -> str:
    return dict(SYNTHETIC_GOLDS)[gold]


def real_golds(real_part) -> list[tuple[str, str]]:
    """(id, gold) of every real math record (MATH-500, AIME 2024/2025, AMC, DeepScaleR) as dataprep
    converts them, read through the fixture resolver (``real_part``, tests/conftest.py)."""
    golds = []
    for name in REAL_MATH_SOURCES:
        source = data.SOURCES[name]
        rows, excluded = convert.convert_snapshot(real_part(name), source.patterns, source.convert)
        assert not excluded
        golds += [(row["id"], row["answer"]) for row in rows]
    return golds

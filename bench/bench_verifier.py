"""Benchmark of verifier.py: math items/s and the code sandbox's overhead.

Usage (from the repository root):

    .venv/bin/python bench/bench_verifier.py [--math-items 600] [--workers 1 2] [--repeats 40]

Math: for each pool size in ``--workers``, a fresh pool (started and warmed
on other items, start-up excluded) grades ``--math-items`` distinct synthetic
completions (integers, fractions, radicals, sets, polynomials; half correct in
an equivalent form, half wrong).

Code: wall time of one ``verify_code`` call on trivial programs, process start
included (median of ``--repeats``), for a 1-test stdio, call and assert run;
and the marginal cost of one more stdio test, from a 1-test and a 50-test run.

Prints one final JSON line and writes it to bench/results/verifier.json.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import verifier  # noqa: E402


def math_items(count: int, first: int = 2) -> list[tuple[str, str, bool]]:
    """``(completion, gold, expected)`` triples in several answer styles, all distinct."""
    items = []
    for index in range(count):
        n = first + index
        style = index % 5
        gold, same, other = {
            0: (str(n), f"{n}.0", str(n + 1)),
            1: (rf"\frac{{{n}}}{{{n + 1}}}", rf"\dfrac{{{2 * n}}}{{{2 * n + 2}}}", rf"\frac{{{n + 1}}}{{{n}}}"),
            2: (rf"{n}\sqrt{{2}}", rf"\sqrt{{{2 * n * n}}}", rf"{n}\sqrt{{3}}"),
            3: (rf"\{{{n}, {n + 1}\}}", rf"\{{{n + 1}, {n}\}}", rf"\{{{n}, {n + 2}\}}"),
            4: (rf"x^2 + {n}x", rf"x(x + {n})", rf"x^2 + {n + 1}x"),
        }[style]
        correct = index % 2 == 0
        answer = same if correct else other
        text = (
            f"Let me work through it step by step. After simplifying, the result is "
            rf"\boxed{{{answer}}}. <analysis>Checked twice.</analysis> <confidence>0.8</confidence>"
        )
        items.append((text, gold, correct))
    return items


def bench_math(count: int, worker_counts: list[int]) -> dict:
    items = math_items(count)
    pairs = [(text, gold) for text, gold, _ in items]
    expected = [correct for _, _, correct in items]
    warm_up = [(text, gold) for text, gold, _ in math_items(20, first=count + 1000)]
    results = {}
    for workers in worker_counts:
        verifier.close()  # fresh workers: no sympy cache carried over from another run
        verifier.verify_math_batch(warm_up * workers, workers=workers)  # start-up excluded
        start = time.perf_counter()
        verdicts = verifier.verify_math_batch(pairs, workers=workers, progress=False)
        elapsed = time.perf_counter() - start
        accuracy = sum(v == e for v, e in zip(verdicts, expected)) / len(items)
        results[str(workers)] = {
            "items_per_s": round(len(items) / elapsed, 1),
            "seconds": round(elapsed, 2),
            "agreement": round(accuracy, 3),
        }
    verifier.close()
    return results


def median_ms(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 1)


def code_block(source: str) -> str:
    return f"```python\n{source}\n```"


def bench_code(repeats: int) -> dict:
    echo = code_block("print(input())")
    one = {"kind": "stdio", "inputs": ["hello\n"], "outputs": ["hello\n"]}
    fifty = {"kind": "stdio", "inputs": [f"{i}\n" for i in range(50)], "outputs": [f"{i}\n" for i in range(50)]}
    call = {"kind": "call", "fn_name": "f", "inputs": [[2]], "outputs": [4]}
    check = {"kind": "assert", "entry_point": "f", "test": "def check(candidate):\n    assert candidate(2) == 4\n"}
    function = code_block("def f(x):\n    return x * x")

    def run(completion, tests):
        assert verifier.verify_code(completion, tests) is True

    run(echo, one)  # detect the sandbox mode, build the child script
    stdio_one = median_ms(lambda: run(echo, one), repeats)
    stdio_fifty = median_ms(lambda: run(echo, fifty), max(5, repeats // 4))
    return {
        "sandbox_mode": verifier.sandbox_mode(),
        "stdio_1_test_ms": stdio_one,
        "stdio_50_tests_ms": stdio_fifty,
        "stdio_marginal_test_ms": round((stdio_fifty - stdio_one) / 49, 2),
        "call_1_test_ms": median_ms(lambda: run(function, call), repeats),
        "assert_1_check_ms": median_ms(lambda: run(function, check), repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--math-items", type=int, default=600)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    result = {
        "benchmark": "verifier",
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.machine(),
            "python": platform.python_version(),
        },
        "math": {"items": args.math_items, "by_workers": bench_math(args.math_items, args.workers)},
        "code": bench_code(args.repeats),
    }
    # Other processes competing for the CPUs distort the numbers: record the load.
    result["machine"]["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["code"]["target_stdio_overhead_ms"] = 50
    line = json.dumps(result)
    from bench.results_io import RESULTS

    out = RESULTS / "verifier.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    main()

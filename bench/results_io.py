"""Where benchmark results go: bench/results/<name>.json (or $CREDO_BENCH_RESULTS/<name>.json,
e.g. for `run.sh bench --quick`), plus one JSON line on stdout."""

import json
import os
from pathlib import Path

RESULTS = Path(os.environ.get("CREDO_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")


def report(result: dict, name: str) -> None:
    """Write `result` to bench/results/<name>.json and print it as the script's final line."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))

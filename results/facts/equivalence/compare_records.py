"""Compare the results in an equivalence file (run_points.py's OUT.json) with the run's own records, timings
aside: every point the file ran must equal runs/<key>.json's `result`.

    python compare_records.py EQUIV.json RUNS_DIR
"""

import json
import sys
from pathlib import Path


def untimed(x):
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


def main(equiv: str, runs: str) -> int:
    results = json.loads(Path(equiv).read_text())["results"]
    differ = []
    for key, got in sorted(results.items()):
        rec = json.loads((Path(runs) / f"{key}.json").read_text())["result"]
        if untimed(rec) != untimed(got):
            differ.append(key)
    print(
        f"{len(results) - len(differ)} of {len(results)} points equal their records (timings aside); differ: {differ}"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

"""times.txt of results/bench/executors/run.sh -> results.json in the `executors` suite's shape (same ratios)."""
import json, re, statistics, sys
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"(\d+) (\w+) rc=(\d+) wall=([0-9.]+) startup=([0-9.]+) at (\S+)", line)
    if m and m.group(3) == "0":
        rows.append({"round": int(m.group(1)), "executor": m.group(2), "wall_s": float(m.group(4)),
                     "startup_s": float(m.group(5)), "finished_at_utc": m.group(6)})
full = [r for r in sorted({x["round"] for x in rows}) if {x["executor"] for x in rows if x["round"] == r} == {"local", "ray", "submitit"}]
ratios = {}
for e in ("ray", "submitit"):
    per = [(x["wall_s"] - x["startup_s"]) / loc["wall_s"] for r in full
           for x in rows if x["round"] == r and x["executor"] == e
           for loc in rows if loc["round"] == r and loc["executor"] == "local"]
    ratios[f"executor_overhead_{e}"] = statistics.median(per)
    ratios[f"executor_overhead_{e}_per_round"] = per
    ratios[f"executor_startup_seconds_{e}"] = statistics.median(x["startup_s"] for x in rows if x["executor"] == e and x["round"] in full)
print(json.dumps({"suite": "executors", "quick": True, "rows": rows, "ratios": ratios,
                  "config": {"experiment": "teleport", "quick_experiment": True, "jobs": 2, "complete_rounds": full,
                             "goal": "executor_overhead_* <= 1.3"}}, indent=1))

"""Summarise results/packing/runs (run.sh) into results.json and report.md: per run the validation curve, the final
val / test bits per character, CPU seconds and trained target tokens per CPU second; per core the packed - padded
difference of the final val_bpc against the seed spread.

    PYTHONPATH=src SYMFORMER_DATA=/work/shared/data python results/packing/summarise.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from symformer.data.text import load_char_text

HERE = Path(__file__).parent
EPOCHS, MAX_CHARS = 3, 120_000


def targets(layout: str) -> int:
    """Trained (non-ignored) target tokens per epoch of the layout (shakespeare-char: block 64, stride 32)."""
    split = load_char_text(64, max_chars=MAX_CHARS, stride=32, layout=layout)
    return int((split.train.y != -100).sum()), int(split.train.x.numel())


def main() -> None:
    runs, counts = {}, {lay: targets(lay) for lay in ("packed", "padded")}
    counts["packedsteps"] = counts["packed"]  # packed rows at batch 26: padded's number of steps per epoch
    for res in sorted((HERE / "runs").glob("*/results.json")):
        name = res.parent.name
        attn, layout, seed = name.split("-")
        r = json.loads(res.read_text())
        t = json.loads((HERE / "runs" / f"{name}.time.json").read_text())
        cpu = t["user_s"] + t["sys_s"]
        real, computed = counts[layout]
        runs[name] = {
            "attention": attn,
            "layout": layout,
            "seed": int(seed[1:]),
            "val_bpc": r["metrics"]["val_bpc"],
            "test_bpc": r["metrics"]["test_bpc"],
            "curve": [{k: h[k] for k in ("epoch", "step", "train_loss", "val_loss")} for h in r["history"]],
            "cpu_s": cpu,
            "wall_s": t["wall_s"],
            "target_tokens_per_epoch": real,
            "computed_tokens_per_epoch": computed,
            "target_tokens_per_cpu_s": EPOCHS * real / cpu,
        }
    summary = {}
    for attn in sorted({r["attention"] for r in runs.values()}):
        per = {lay: [r for r in runs.values() if r["attention"] == attn and r["layout"] == lay] for lay in counts}
        per = {lay: rs for lay, rs in per.items() if rs}
        mean = {lay: statistics.mean(r["val_bpc"] for r in rs) for lay, rs in per.items()}
        spread = max(max(r["val_bpc"] for r in rs) - min(r["val_bpc"] for r in rs) for rs in per.values())
        speed = {lay: statistics.mean(r["target_tokens_per_cpu_s"] for r in rs) for lay, rs in per.items()}
        for lay in ("packed", "packedsteps"):
            if lay in per and "padded" in per:
                summary[f"{attn} {lay}"] = {
                    "val_bpc_mean": mean[lay],
                    "val_bpc_padded_mean": mean["padded"],
                    "minus_padded": mean[lay] - mean["padded"],
                    "seed_spread_max": spread,
                    "within_seed_noise": abs(mean[lay] - mean["padded"]) <= spread,
                    "tokens_per_cpu_s_vs_padded": speed[lay] / speed["padded"],
                }
    record = {"experiment": "packing", "runs": runs, "summary": summary}
    (HERE / "results.json").write_text(json.dumps(record, indent=1))
    lines = ["# Packed vs padded training, shakespeare-char (issue 61)", ""]
    lines += ["| run | val_bpc | test_bpc | val loss by epoch | CPU s | target tokens / CPU s |"]
    lines += ["|---|---|---|---|---|---|"]
    for name, r in runs.items():
        curve = ", ".join(f"{c['val_loss']:.3f}" for c in r["curve"])
        lines.append(
            f"| {name} | {r['val_bpc']:.3f} | {r['test_bpc']:.3f} | {curve} | {r['cpu_s']:.1f} | "
            f"{r['target_tokens_per_cpu_s']:.0f} |"
        )
    lines += [
        "",
        "| core, layout | val_bpc minus padded's | seed spread (max over layouts) | within seed noise | "
        "tokens/CPU s over padded's |",
        "|---|---|---|---|---|",
    ]
    for key, s in summary.items():
        lines.append(
            f"| {key} | {s['minus_padded']:+.3f} | {s['seed_spread_max']:.3f} | {s['within_seed_noise']} | "
            f"{s['tokens_per_cpu_s_vs_padded']:.2f} |"
        )
    (HERE / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""sweep/table.md from the sweep's outputs (favor*.txt: the plain learned map; hedgehog*.txt: feature_map, m, ...
as each variant's change says; the stage-1 loss from its change's train["favor"]["stage1_loss"]) and the recorded run. Validation perplexities throughout.

    python results/linearize/sweep/sweep_table.py > results/linearize/sweep/table.md   (from the repository root)
"""

import glob
import json
import math

R = "results/linearize"
soft = math.exp(json.load(open(f"{R}/runs/teacher.json"))["result"]["final_val_loss"])
rows = [
    "| FAVOR+ variant (RoPE) | feature map | m | stage-1 loss | lr1 | lr2 | LoRA rank | stage-1 tokens "
    "| stage-2 tokens | swap | stage 1 | stage 2 | stage 2 / softmax | stage-1 gap closed |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
]


def row(name, c, p):
    fav = c.get("favor", {})
    n, fmap = fav.get("n_features", 32), fav.get("feature_map", "favor")
    s1, s2 = c.get("stage1_steps", 200) * 1024, c.get("stage2_steps", 200) * 1024
    gap = (p["stage0"] - p["stage1"]) / (p["stage0"] - soft)
    loss = c.get("train", {}).get("favor", {}).get("stage1_loss", "output_mse")
    return (
        f"| {name} | {fmap} | {n} | {loss} | {c.get('lr1', 0.01):g} | {c.get('lr2', 0.001):g} | {c.get('lora_rank', 8)} "
        f"| {s1:,} | {s2:,} | {p['stage0']:.3f} | {p['stage1']:.3f} | {p['stage2']:.3f} | {p['stage2'] / soft:.3f} "
        f"| {gap:.3f} |"
    )


# the FAVOR+ record of the run at 5ca119a (a copy of its runs/ record, kept here since runs/ holds the rerun)
rec = json.load(open(f"{R}/sweep/recorded-5ca119a-linearize-favor-rope.json"))["result"]["val_loss"]
rows.append(row("recorded run (5ca119a)", {}, {k: math.exp(v) for k, v in rec.items()}))
for pattern in ("favor*.txt", "hedgehog*.txt"):
    for f in sorted(glob.glob(f"{R}/sweep/{pattern}")):
        for line in open(f):
            if " {" in line and line.split(" ", 1)[0][:1] in ("m", "h"):
                name, js = line.split(" ", 1)
                d = json.loads(js)
                rows.append(row(name, d["change"], d["ppl"]))
print("\n".join(rows))

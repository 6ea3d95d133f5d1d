import json, glob, math
soft = math.exp(json.load(open("results/linearize/runs/teacher.json"))["result"]["final_val_loss"])
rows = ["| FAVOR+ variant (RoPE) | m | lr1 | lr2 | LoRA rank | stage-1 tokens | stage-2 tokens | swap | stage 1 | stage 2 | stage 2 / softmax | stage-1 gap closed |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
base = {"n": 32, "lr1": 0.01, "lr2": 0.001, "r": 8, "s2": 200}
rec = json.load(open("results/linearize/runs/linearize-favor-rope.json"))["result"]["val_loss"]
def row(name, c, p):
    n = c.get("favor", {}).get("n_features", 32); s2 = c.get("stage2_steps", 200) * 1024; s1 = c.get("stage1_steps", 200) * 1024
    gap = (p["stage0"] - p["stage1"]) / (p["stage0"] - soft)
    return f"| {name} | {n} | {c.get('lr1', 0.01):g} | {c.get('lr2', 0.001):g} | {c.get('lora_rank', 8)} | {s1:,} | {s2:,} | {p['stage0']:.3f} | {p['stage1']:.3f} | {p['stage2']:.3f} | {p['stage2'] / soft:.3f} | {gap:.3f} |"
rows.append(row("recorded run", {}, {k: math.exp(v) for k, v in rec.items()}))
for f in sorted(glob.glob("results/linearize/sweep/favor*.txt")):
    for line in open(f):
        if line.startswith("m") and " {" in line:
            name, js = line.split(" ", 1); d = json.loads(js)
            rows.append(row(name, d["change"], d["ppl"]))
print("\n".join(rows))

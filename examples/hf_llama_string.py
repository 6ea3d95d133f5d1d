"""A tiny Hugging Face Llama (~2M parameters, built from a LlamaConfig: nothing is downloaded) trained on tiny
Shakespeare with a character vocabulary, once with its native RoPE, once with symformer STRING and once with
symformer ESPR patched into every attention layer; prints and plots the validation loss curves.

    pip install -e '.[hf]'
    python examples/hf_llama_string.py --steps 300 --out out/hf_example

Data: ../shared/data/tinyshakespeare.txt (or $SYMFORMER_DATA, or --data-dir)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from symformer.data import load_char_text
from symformer.integrations import hf
from symformer.integrations.hf.lm import TinyLlama, n_parameters, tiny_llama, train_lm

PARTS = {"native RoPE": (None, {}),
         "STRING": ("string", {}),      # Cayley-STRING, P = I at init: starts as the model's RoPE, learns P
         "ESPR": ("espr", {})}          # non-commuting generators + post-rotation, starts as the model's RoPE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="out/hf_example")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (1 suits this tiny model)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    split = load_char_text(block=args.block, data_dir=args.data_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    curves = {}
    for label, (positional, options) in PARTS.items():
        model = tiny_llama(split.meta["vocab_size"], TinyLlama(), positional, seed=args.seed, **options)
        if positional:
            print(f"{label}: {type(hf.rotary_parts(model)[0]).__name__} in {len(hf.rotary_parts(model))} layers")
        curve = train_lm(model, split, args.steps, batch_size=args.batch, eval_every=max(args.steps // 6, 1),
                         seed=args.seed, eval_batches=32)
        curves[label] = {"steps": curve.steps, "val_loss": curve.val_loss, "seconds": round(curve.seconds, 1),
                         "params": n_parameters(model)}
        print(f"{label:12s} params {n_parameters(model):,}  val loss "
              + " ".join(f"{v:.3f}" for v in curve.val_loss) + f"  ({curve.seconds:.0f}s)", flush=True)
        if positional == "string":
            model.save_pretrained(out / "string_model")  # config.json records the patch; reload below
            again = hf.from_pretrained(type(model).__mro__[1], out / "string_model")
            x = split.val.x[:2]
            with torch.no_grad():
                same = torch.equal(model.eval()(x).logits, again.eval()(x).logits)
            print(f"  saved and reloaded with from_pretrained: identical logits = {same}")
    (out / "curves.json").write_text(json.dumps(curves, indent=1))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        for label, c in curves.items():
            plt.plot(c["steps"], c["val_loss"], marker="o", label=label)
        plt.xlabel("step")
        plt.ylabel("validation loss (nats/char)")
        plt.legend()
        plt.savefig(out / "val_loss.png", dpi=120)
        print(f"wrote {out / 'val_loss.png'}")
    except ImportError:
        pass


if __name__ == "__main__":
    main()

"""Packed training of a tiny Hugging Face Llama (built from a LlamaConfig: nothing is downloaded) with symformer's
FAVOR+ or PLASH attention: tiny Shakespeare's paragraphs as documents, packed by transformers'
DataCollatorWithFlattening (one row, position_ids restarting at each paragraph, cu_seq_lens_* kwargs). Each
paragraph attends to itself only; the script first checks that a packed row gives every paragraph the logits it has
alone, then trains a few steps and prints the loss.

    pip install -e '.[hf]'
    python examples/hf_packing.py --attention plash --steps 50

Data: ../shared/data/tinyshakespeare.txt (or $SYMFORMER_DATA, or --data-dir)."""
from __future__ import annotations

import argparse

import torch
from transformers import DataCollatorWithFlattening

from symformer.data.files import read_text
from symformer.data.paths import data_file
from symformer.integrations import hf
from symformer.integrations.hf.lm import TinyLlama, tiny_llama

OPTIONS = {"favor": {"n_features": 64, "seed": 0}, "plash": {"M": 16, "D_k": 32, "causal_block": 32, "seed": 0}}


def paragraphs(text: str, longest: int) -> list[str]:
    """The text's paragraphs (split at blank lines), each cut to `longest` characters."""
    return [p[:longest] for p in text.split("\n\n") if len(p) > 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attention", choices=sorted(OPTIONS), default="plash")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--docs-per-row", type=int, default=16)
    ap.add_argument("--longest", type=int, default=256)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    docs = paragraphs(read_text(data_file("tinyshakespeare.txt", args.data_dir), "a text corpus"), args.longest)
    vocab = sorted(set("".join(docs)))
    stoi = {c: i for i, c in enumerate(vocab)}
    model = tiny_llama(len(vocab), TinyLlama(), seed=0)
    model.config.use_cache = False  # packing with a cache is refused (and undefined in transformers)
    hf.configure(model, attention=args.attention, **OPTIONS[args.attention])
    collate = DataCollatorWithFlattening(return_flash_attn_kwargs=True)  # labels -100 at each document start

    def batch(i: int) -> dict:
        rows = docs[i * args.docs_per_row : (i + 1) * args.docs_per_row]
        return collate([{"input_ids": [stoi[c] for c in d]} for d in rows])

    # each packed paragraph gets the logits it has alone (float32 here: ~1e-6)
    model.eval()
    with torch.no_grad():
        b = batch(0)
        packed = model(**b).logits[0]
        cu = b["cu_seq_lens_q"].tolist()
        worst = max(
            float((packed[a:e] - model(b["input_ids"][:, a:e]).logits[0]).abs().max()) for a, e in zip(cu, cu[1:])
        )
    print(f"{args.attention}: packed vs alone, max |logit difference| {worst:.2e}")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(args.steps):
        loss = model(**batch(1 + step % (len(docs) // args.docs_per_row - 1))).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.3f}")


if __name__ == "__main__":
    main()

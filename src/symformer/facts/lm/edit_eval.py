"""Scoring many edited fact MLPs on one LM without re-running it (fact-storing-mlps.txt App. A.3.4 grids).

Every editor (ROME, MEMIT, AlphaEdit) and MLP swapping changes only the fact MLP; the MLP's input (the
frozen-norm output of attention), the router's gates and the language expert's output at the position that
predicts the author do not depend on it. `LastTokenCache` runs the model once over the scored prompts and keeps
those; scoring an MLP is then its forward pass plus the read-out, the same operations `FactRecallTransformer`
applies at that position, so the configurations of an editing grid share one pass of the model over each set of
scored prompts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from symformer.facts.lm.books import BooksTask
from symformer.facts.lm.model import FactRecallTransformer


class LastTokenCache:
    """Last-position pieces of `model` on prompts `(books, templates)` of `task`; `accuracy(mlp, facts)` is the
    fraction of prompts whose argmax over the whole vocabulary is the author `facts` gives the book (as
    `facts.lm.books_lm.lm_eval`'s fact accuracy) with `mlp` in the fact slot."""

    @torch.no_grad()
    def __init__(
        self,
        model: FactRecallTransformer,
        task: BooksTask,
        books: torch.Tensor,
        templates: torch.Tensor,
        batch: int = 1024,
    ):
        self.model, self.task, self.books = model, task, books.long()
        z, gate, lang, resid = [], [], [], []
        for s in range(0, len(books), batch):
            tok, mask, _ = task.sequences(books[s : s + batch], templates[s : s + batch])
            # the prompt: everything before the author, drawn on the CPU and run where the model is
            tok, mask = tok[:, :-1].to(model.emb.device), mask[:, :-1].to(model.emb.device)
            x = F.embedding(tok, model.embedding_table())
            h = model.attend(x, mask, last_only=True)
            if model.cfg.residual:
                h = h + x[:, -1:]
            z.append(model.mlp_norm(h))
            if model.cfg.moe:
                hn, g = model.routed(h)
                gate.append(g[..., :1])
                lang.append(g[..., 1:] * model.lang(hn))
            resid.append(h)
        self.z = torch.cat(z) if z else torch.zeros(0, 1, model.cfg.d_model, device=model.emb.device)
        self.gate = torch.cat(gate) if gate else None
        self.lang = torch.cat(lang) if lang else None
        self.h = torch.cat(resid) if resid else self.z

    @torch.no_grad()
    def predictions(self, mlp: torch.nn.Module) -> torch.Tensor:
        """Argmax token at the author position with `mlp` as the fact expert (FactRecallTransformer.mixer)."""
        fact = mlp(self.z).to(self.z.dtype)
        y = fact if self.gate is None else self.gate * fact + self.lang
        if self.model.cfg.residual:
            y = y + self.h
        return self.model.logits(y)[:, -1].argmax(-1)

    def accuracy(self, mlp: torch.nn.Module, facts: torch.Tensor) -> float:
        if len(self.books) == 0:
            return 0.0
        pred = self.predictions(mlp)
        want = self.task.author_token(facts[self.books]).to(pred.device)
        return float((pred == want).double().mean())

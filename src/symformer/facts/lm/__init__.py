"""Fact recall in a transformer (fact-storing-mlps.txt Sec. 5, App. A.2-A.3): the recall tasks (SSFR, and the
book -> author data of the LM), the fact-recall transformer, its training and evaluation, editing by MLP swapping
against ROME / MEMIT / AlphaEdit, and fact-model checkpoints.

The transformer side of the paper: it builds on models/ and train/, so it sits above them, while the rest of
`symformer.facts` (the constructions, the solver, the decoders, rho) stays a layer-1 part that never imports it."""

from symformer.facts.lm.books import BooksTask, make_books
from symformer.facts.lm.checkpoint import edit_by_swap, load_fact_model, save_fact_model
from symformer.facts.lm.model import FactRecallConfig, FactRecallTransformer
from symformer.facts.lm.recall import (
    SSFRTrainConfig,
    build_recall_model,
    fact_adaptive_accuracy,
    ssfr_accuracy,
    swap_diagnostics,
    train_ssfr,
)
from symformer.facts.lm.ssfr import SSFRTask, make_ssfr

__all__ = [
    "BooksTask",
    "FactRecallConfig",
    "FactRecallTransformer",
    "SSFRTask",
    "SSFRTrainConfig",
    "build_recall_model",
    "edit_by_swap",
    "fact_adaptive_accuracy",
    "load_fact_model",
    "make_books",
    "make_ssfr",
    "save_fact_model",
    "ssfr_accuracy",
    "swap_diagnostics",
    "train_ssfr",
]

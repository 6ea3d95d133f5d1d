"""Fact-storing MLPs (fact-storing-mlps.txt): fact sets and embeddings, decodability rho,
closed-form encoders/decoders, baselines, the capacity search, fact-MLP files (save_fact_mlp / load_fact_mlp), and
the fact MLP slot (the MLP part "fact", swap_fact_mlp). The transformer side (recall tasks, the fact-recall
transformer, its training and editing) is `symformer.facts.lm`, which this package never imports."""

from symformer.facts.capacity import (
    BASELINES,
    METHODS,
    BuildOptions,
    CapacityResult,
    FactStorageError,
    build_fact_mlp,
    capacity_search,
    method_capacity,
)
from symformer.facts.decodability import Decodability, decodability, require_vertices
from symformer.facts.decoders import Decoder, gd_decoder, jl_decoder
from symformer.facts.embeddings import (
    FactSet,
    coherence,
    fold_whitening,
    make_fact_set,
    random_fact_map,
    sample_embeddings,
    set_condition_number,
    validate_fact_set,
    whitening_matrix,
)
from symformer.facts.mlp import FactMLP, count_params, fact_accuracy, fact_margin
from symformer.facts.saved import SavedFactMLP, load_fact_mlp, save_fact_mlp
from symformer.facts.slot import FactSlot, swap_fact_mlp

__all__ = [
    "BASELINES",
    "METHODS",
    "BuildOptions",
    "CapacityResult",
    "Decodability",
    "Decoder",
    "FactMLP",
    "FactSet",
    "FactSlot",
    "FactStorageError",
    "SavedFactMLP",
    "build_fact_mlp",
    "capacity_search",
    "coherence",
    "count_params",
    "decodability",
    "fact_accuracy",
    "fact_margin",
    "fold_whitening",
    "gd_decoder",
    "jl_decoder",
    "load_fact_mlp",
    "make_fact_set",
    "method_capacity",
    "random_fact_map",
    "require_vertices",
    "sample_embeddings",
    "save_fact_mlp",
    "set_condition_number",
    "swap_fact_mlp",
    "validate_fact_set",
    "whitening_matrix",
]

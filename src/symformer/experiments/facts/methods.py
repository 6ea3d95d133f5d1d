"""The fact-MLP methods that experiment `facts` builds, with what the plan and the points need of each as typed
fields: the name is build_fact_mlp's method, which the records, metrics and claims carry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    # the decoder of the code (Constructions 4.1 / B.1: "jl", "jl-sign", or "gd", trained); None for an MLP
    # without one (naive, NTK, the GD-trained MLPs)
    decoder: str | None = None
    # gradient descent builds part of it (a GD encoder or decoder, or the whole MLP): its searches cost about 20x
    # and keep their checkpoints
    trained: bool = False


METHODS = {
    m.name: m
    for m in (
        Method("bin+jl", decoder="jl"),
        Method("bin-bias+jl", decoder="jl"),
        Method("bin+jl-sign", decoder="jl-sign"),
        Method("cd+jl", decoder="jl"),
        Method("lagrangian+jl", decoder="jl"),
        Method("bin+gd", decoder="gd", trained=True),
        Method("gd+gd", decoder="gd", trained=True),
        Method("naive"),
        Method("ntk"),
        Method("ntk-mo"),
        Method("gd-swiglu", trained=True),
        Method("gd-relu", trained=True),
    )
}

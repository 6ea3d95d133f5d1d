"""The fact-MLP methods of experiments `facts` and `fact-recall`, with what their plans, points and claims need of each
as typed fields. The name is build_fact_mlp's method, which the records, metrics and claims carry; it is built from
the fields (encoder + decoder for the code-based methods, as facts.capacity names them), never read back."""

from __future__ import annotations

from dataclasses import dataclass

from symformer.facts.capacity import DECODERS, ENCODERS


@dataclass(frozen=True)
class Method:
    name: str
    # the encoder and the decoder of the code (Constructions 4.1 / B.1: "bin", "cd", ... and "jl", "jl-sign", or a
    # trained "gd" for either); None for an MLP without a code (naive, NTK, the GD-trained MLPs)
    encoder: str | None = None
    decoder: str | None = None
    # gradient descent builds part of it (a GD encoder or decoder, or the whole MLP): its searches cost about 20x
    # and keep their checkpoints
    trained: bool = False

    @property
    def constructed(self) -> bool:
        """A code whose encoder is constructed, not trained (Bin+JL, Bin+GD, ...): the paper's constructed MLPs."""
        return self.decoder is not None and self.encoder != "gd"

    @property
    def trained_mlp(self) -> bool:
        """An MLP trained end to end by gradient descent (GD-SwiGLU, GD-ReLU), without a code."""
        return self.trained and self.decoder is None


def _coded(encoder: str, decoder: str) -> Method:
    return Method(f"{encoder}+{decoder}", encoder, decoder, trained="gd" in (encoder, decoder))


METHODS = {
    m.name: m
    for m in (
        *(_coded(e, d) for e in ENCODERS for d in DECODERS),
        Method("naive"),
        Method("ntk"),
        Method("ntk-mo"),
        Method("gd-swiglu", trained=True),
        Method("gd-relu", trained=True),
        Method("gd-bilinear", trained=True),
        Method("ntk-relu1"),
        *(Method(v) for v in ("hebbian", "hebbian-whitened", "hebbian-dd", "hebbian-als")),
    )
}

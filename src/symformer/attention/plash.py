"""PLASH: linear-time attention over M learned, sketch-enriched summaries (plash-attention.txt, Alg. 1).

Stage I   S = K P^T, A = softmax(S / tau) over the M prototypes, K~ = A^T K, V~ = A^T V  (eqs. 2-5)
Stage II  G = psi([K~ || V~]), G~ = G / (max(||G||, eps_g) tau_g), v = (+)_k beta_k TS_k(G~; D_k),
          Y_enh = W_out v, Z = Mixer(Y_enh) (post-LN encoder over the M items)        (eqs. 6-11)
Stage III K_g = Z W_K, V_g = Z W_V, Y = softmax(Q K_g^T * scale) V_g (exact)         (eq. 12)

Heads are folded into the batch (one set of weights shared by all heads). Stages I and III stream over
the sequence in chunks, so working memory is O(M d) plus one chunk.

The paper's block is non-causal (every query reads summaries of all keys). `is_causal=True` runs our
causal variant, chunked prefix compression (not in the paper): the sequence is cut into blocks of
`causal_block` tokens; a query in block b reads, in one softmax, (i) the PLASH summaries (Stages I-II)
of the keys of blocks 0..b-1 (exclusive prefix sums of A^T K, A^T V) and (ii) the keys of its own block
up to itself, exactly. Guarantee: output i depends only on keys / values j <= i (tested by perturbation);
it is exact causal softmax attention whenever N <= causal_block. The Thm H.3 certificate does not cover it.
Cost O(N (c + M) d + (N / c) M^2 d). Decoding continues it exactly from a state of O((M + c) d) per row
(plash_state); a boolean key-padding mask is honoured as defined there (the paper has no masked form).
16-bit inputs or parameters run in float32 (prototype softmax, TensorSketch FFTs, mixer LayerNorm statistics)
and return the input dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from symformer._rng import check_seed, global_seed, seeded_generator
from symformer._rng import generator as purpose_generator
from symformer._validation import (
    all_finite,
    check_attention_inputs,
    check_finite_kv,
    check_float,
    check_int,
    fail,
    reads_values,
)
from symformer.attention.boundaries import check_packed_call, document_ids, expand_rows
from symformer.attention.decoding import DecodingCore
from symformer.attention.packed import plash_causal_packed
from symformer.attention.plash_state import PlashState, check_state_use, plash_step
from symformer.attention.sketch import (
    MERSENNE_31,
    bucket_hashes,
    convolution_power,
    sign_hashes,
    tensor_sketch_dense,
)
from symformer.attention.softmax import (
    draw_dtype,
    float32_compute,
    key_padding_mask,
    needs_float32,
)
from symformer.kernels import plash as _kp
from symformer.kernels import use_kernel
from symformer.kernels._dispatch import kernel_mode


def _degrees(degrees) -> tuple[int, ...]:
    if isinstance(degrees, int) and not isinstance(degrees, bool):
        degrees = (degrees,)
    if not isinstance(degrees, (list, tuple)) or len(degrees) == 0:
        fail("degrees", degrees, "a non-empty sequence of integers >= 1")
    out = tuple(check_int("degrees", k, 1) for k in degrees)
    if len(set(out)) != len(out):
        fail("degrees", degrees, "distinct degrees")
    return out


def _budgets(D_k, n: int) -> tuple[int, ...]:
    if isinstance(D_k, int) and not isinstance(D_k, bool):
        D_k = (D_k,) * n
    if not isinstance(D_k, (list, tuple)) or len(D_k) != n:
        fail("D_k", D_k, f"an integer >= 1 or one per degree ({n})")
    return tuple(check_int("D_k", d, 1) for d in D_k)


@dataclass
class PlashTrace:
    """Intermediates of one forward pass (used by the certificate)."""

    k_tilde: torch.Tensor
    v_tilde: torch.Tensor
    g_tilde: torch.Tensor
    y_enh: torch.Tensor
    z: torch.Tensor
    k_g: torch.Tensor
    v_g: torch.Tensor
    out: torch.Tensor


def _softmax(logits: torch.Tensor, masked: bool) -> torch.Tensor:
    """Softmax over the last axis; with masks a row with every logit -inf (a query that sees no kept key) gives
    weights 0 instead of NaN."""
    w = torch.softmax(logits, dim=-1)
    return w.nan_to_num(0.0) if masked else w


class PlashAttention(DecodingCore):
    """PLASH attention core with the SDPA call shape: `forward(q, k, v, attn_mask=None, is_causal=False,
    scale=None, state=None)`, q and k (B, H, Nq|Nk, head_dim), v (B, H, Nk, head_dim) -> (B, H, Nq, head_dim).
    The heads are folded into the batch: one set of weights serves every head.

    The paper's block (Alg. 1, non-causal; stages in the module docstring): M learned prototypes route the keys
    into M summaries K~, V~ (eqs. 2-5, temperature `tau`), psi maps [K~ || V~] to width d and normalises it
    (eqs. 6-7, `tau_g`, `eps_g`), a TensorSketch per degree k in `degrees` with budget D_k (prototypes and hashes
    drawn from `seed`, Construction C.3; None: from torch's global generator, as nn.Linear draws), mixed with learned
    weights beta_k and projected by W_out (eqs. 8-10), a post-LN
    encoder mixes the M items (eq. 11: `mixer_layers`, `mixer_heads`, `mixer_ff` (default 4 d), `mixer_dropout`),
    and the queries read W_K Z, W_V Z with an exact softmax (eq. 12; `scale` default 1/sqrt(head_dim), `dropout`
    on its weights while training).

    Ours, not the paper's:
    * `is_causal=True`: the chunked-prefix variant (module docstring): blocks of `causal_block` tokens, each
      query reading the PLASH summaries of the earlier blocks and its own block's keys up to itself exactly;
      output i depends on keys j <= i only, and equals causal softmax attention when Nk <= causal_block.
    * attn_mask: a boolean key-padding mask (True = keep) broadcastable to (B, H, 1, Nk); a padded key adds
      nothing to any summary and is masked in the exact part (`causal`); any other mask is a ValueError.
    * `init_state()` and `forward(..., is_causal=True, state=st)` continue a causal sequence from a decoding
      state of O((M + causal_block) d) per row (plash_state).
    * `chunk_size`: Stages I and III stream over the sequence in chunks of this many rows (the result does not
      depend on it); 16-bit inputs or parameters are computed in float32 and returned in the input dtype.

    head_dim: the head size of q, k and v. n_heads, d_model: of the host layer; they set the width
    d = d_model (else head_dim * n_heads) unless `width` is given. M: the number of prototypes (summaries).

    Args:
        head_dim (int): the head size of q, k and v.
        n_heads (int): heads of the host layer (width head_dim * n_heads unless d_model or width is given).
        d_model (int | None): model width of the host layer (the width d unless `width` is given).
        M (int): the number of prototypes (summaries).
        degrees (Sequence[int]): the TensorSketch degrees k, distinct.
        D_k (int | Sequence[int]): the sketch budget of each degree (one for all, or one per degree).
        tau (float): temperature of the prototype softmax.
        tau_g (float): the normalised features' scale.
        eps_g (float): floor of the features' norm.
        width (int | None): the width d of Stage II, overriding d_model and n_heads.
        mixer_layers (int): encoder layers of the mixer.
        mixer_heads (int): heads of the mixer, a divisor of d.
        mixer_ff (int | None): the mixer's feed-forward width (None: 4 d).
        mixer_dropout (float): dropout inside the mixer.
        dropout (float): dropout on the readout's attention weights while training.
        chunk_size (int): rows per streamed chunk of Stages I and III.
        causal_block (int): tokens per block of the causal variant.
        seed (int | None): the prototypes and hashes.
        kernel (str | None): the fused Triton kernels (kernels/plash.py) or the torch path: None (SYMFORMER_KERNELS,
            else "auto": the kernels for CUDA tensors where Triton imports), "auto", "triton" or "torch".

    Examples:
        >>> import torch
        >>> from symformer.attention import NaiveAttention, PlashAttention
        >>> _ = torch.manual_seed(0)
        >>> core = PlashAttention(head_dim=8, M=4, D_k=16, mixer_heads=2, causal_block=8, seed=0)
        >>> q, k, v = torch.randn(2, 2, 20, 8), torch.randn(2, 2, 20, 8), torch.randn(2, 2, 20, 8)
        >>> core(q, k, v).shape  # the paper's block: every query reads the M summaries
        torch.Size([2, 2, 20, 8])
        >>> out = core(q, k, v, is_causal=True)  # ours: chunked prefix compression
        >>> ref = NaiveAttention()(q, k, v, is_causal=True)
        >>> torch.allclose(out[..., :8, :], ref[..., :8, :], atol=1e-5)  # the first block is exact causal softmax
        True
        >>> k2 = k.clone(); k2[..., 15:, :] = 0  # change the keys after token 14 ...
        >>> torch.allclose(core(q, k2, v, is_causal=True)[..., :15, :], out[..., :15, :], atol=1e-6)  # 0..14 stay
        True
    """

    supports_causal = True  # through the chunked-prefix variant (module docstring)
    value_dim_equals_head_dim = True  # the mixer runs at one head size: narrower values are zero-padded by the host
    builds_lazily = False  # trainable parameters: configured before the forward, so the optimizer sees them

    def __init__(
        self,
        head_dim: int,
        n_heads: int = 1,
        d_model: int | None = None,
        M: int = 64,
        degrees: Sequence[int] = (1, 2),
        D_k: int | Sequence[int] = 128,
        tau: float = 1.0,
        tau_g: float = 1.0,
        eps_g: float = 1e-6,
        width: int | None = None,
        mixer_layers: int = 1,
        mixer_heads: int = 4,
        mixer_ff: int | None = None,
        mixer_dropout: float = 0.0,
        dropout: float = 0.0,
        chunk_size: int = 4096,
        causal_block: int = 64,
        seed: int | None = None,
        kernel: str | None = None,
    ):
        super().__init__()
        self.kernel = None if kernel is None else kernel_mode(kernel)
        self.head_dim = check_int("head_dim", head_dim, 1)
        self.M = check_int("M", M, 1)
        self.degrees = _degrees(degrees)
        self.D_k = _budgets(D_k, len(self.degrees))
        self.tau = check_float("tau", tau, 0.0, low_open=True)
        self.tau_g = check_float("tau_g", tau_g, 0.0, low_open=True)
        self.eps_g = check_float("eps_g", eps_g, 0.0, low_open=True)
        self.chunk_size = check_int("chunk_size", chunk_size, 1)
        self.causal_block = check_int("causal_block", causal_block, 1)
        self.dropout = check_float("dropout", dropout, 0.0, 1.0, high_open=True)
        # our defaults (eq. (11) leaves the mixer's size open): d = d_model of the host layer; 1 layer, 4 heads,
        # d_ff = 4d, ReLU
        d = width if width is not None else (d_model if d_model is not None else head_dim * n_heads)
        self.width = check_int("width", d, 1)
        check_int("mixer_layers", mixer_layers, 1)
        if d % check_int("mixer_heads", mixer_heads, 1):
            fail("mixer_heads", mixer_heads, f"a divisor of the width d={d}")
        # the seeded draws run on the CPU (their generator's device), then move to the device the constructor is
        # called under: from_pretrained builds models on the meta device, where the hashes' rejection loop cannot run
        home = torch.empty(()).device
        with torch.device("cpu"):
            # a given seed: a stream of PLASH's own (_rng.generator), never the data's; None: a seed drawn from torch's
            # global generator (the draw models.layers made for a layer without a seed, so those draws are kept)
            if check_seed(seed) is None:
                g = seeded_generator(global_seed())
            else:
                g = purpose_generator("plash", seed)
            # drawn in float32 at least, then held in the default dtype (as nn.Linear's weights are): under a 16-bit
            # default (from_pretrained with dtype=) they are the float32 build's prototypes rounded once
            prototypes = torch.randn(M, head_dim, generator=g, dtype=draw_dtype()) / math.sqrt(head_dim)
            prototypes = prototypes.to(torch.get_default_dtype())
            # Assumption C.2.3: independent (h_t, s_t) per (k, t); stored as buffers (state_dict reproduces).
            hashes = [
                (bucket_hashes(k, d, dk, g, MERSENNE_31), sign_hashes(k, d, g)) for k, dk in zip(self.degrees, self.D_k)
            ]
        self.prototypes = nn.Parameter(prototypes.to(home))
        self.psi = nn.Linear(2 * head_dim, d)  # psi of eq. (6), R^{d_k + d_v} -> R^d: linear is our default
        self.beta = nn.Parameter(torch.ones(len(self.degrees)))  # learned beta_k, init 1
        for i, (h, sgn) in enumerate(hashes):
            self.register_buffer(f"hash_{i}", h.to(home))
            self.register_buffer(f"sign_{i}", sgn.to(home))
        self.w_out = nn.Linear(sum(self.D_k), d, bias=False)
        layer = nn.TransformerEncoderLayer(
            d, mixer_heads, mixer_ff or 4 * d, mixer_dropout, activation="relu", batch_first=True, norm_first=False
        )
        self.mixer = nn.TransformerEncoder(layer, mixer_layers, enable_nested_tensor=False)
        self.w_k = nn.Linear(d, head_dim, bias=False)
        self.w_v = nn.Linear(d, head_dim, bias=False)

    # ------------------------------------------------------------------ stages
    def compress(
        self, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stage I, streamed over N_k: (n, N_k, d_k), (n, N_k, d_v) -> K~ (n, M, d_k), V~ (n, M, d_v).
        keep: (n, N_k) boolean key padding (ours): a padded key adds nothing to K~ or V~."""
        if self.fused("plash_stage1", k):
            return _kp.compress(k, v, self.prototypes, self.tau, keep)
        p = self.prototypes.to(k.dtype).t() / self.tau
        kt = vt = None
        for s in range(0, k.shape[-2], self.chunk_size):
            kc, vc = k[:, s : s + self.chunk_size], v[:, s : s + self.chunk_size]
            a = torch.softmax(kc @ p, dim=-1)  # A (eqs. 3-5): weighted sums over keys
            if keep is not None:
                a = a * keep[:, s : s + self.chunk_size, None].to(a.dtype)
            a = a.transpose(-1, -2)  # (n, chunk, M) -> (n, M, chunk)
            if kt is None:
                kt, vt = a @ kc, a @ vc
            else:  # accumulate in the GEMM (beta = 1): no chunk-sized temporaries
                kt, vt = torch.baddbmm(kt, a, kc), torch.baddbmm(vt, a, vc)
        return kt, vt

    def normalized_features(self, k_tilde: torch.Tensor, v_tilde: torch.Tensor) -> torch.Tensor:
        """G~ = psi([K~ || V~]) / (max(||.||, eps_g) tau_g)  (eqs. 6-7, Lemma D.2: ||G~_j|| <= 1/tau_g)."""
        g = self.psi(torch.cat([k_tilde, v_tilde], dim=-1))
        return g / (g.norm(dim=-1, keepdim=True).clamp_min(self.eps_g) * self.tau_g)

    def sketch_features(self, g_tilde: torch.Tensor) -> list[torch.Tensor]:
        """z^ts_k = TS_k(G~; D_k) = IFFT(prod_t FFT(C_t G~)) per degree (eqs. 8, 42), the spectra as one
        GEMM per degree (sketch.tensor_sketch_dense)."""
        return [
            tensor_sketch_dense(g_tilde, getattr(self, f"hash_{i}"), getattr(self, f"sign_{i}"), dk)
            for i, dk in enumerate(self.D_k)
        ]

    def deterministic_features(self, g_tilde: torch.Tensor) -> list[torch.Tensor]:
        """z^det_k = G~ * ... * G~ (k-fold circular convolution, zero-padded / truncated to D_k; eq. 70)."""
        return [convolution_power(g_tilde, k, dk) for k, dk in zip(self.degrees, self.D_k)]

    def embed(self, feats: list[torch.Tensor]) -> torch.Tensor:
        """Y_enh = W_out (+)_k beta_k z_k  (eqs. 8-10) = sum_k beta_k (z_k W_out,k^T) with W_out,k the column
        block of degree k: no concatenated / rescaled (n, M, sum D_k) copy, the scale acts on (n, M, d)."""
        y, off = None, 0
        for b, z in zip(self.beta, feats):
            part = F.linear(z, self.w_out.weight[:, off : off + z.shape[-1]]) * b
            y, off = (part if y is None else y + part), off + z.shape[-1]
        return y

    def readout(self, q: torch.Tensor, y_enh: torch.Tensor, scale: float | None):
        """Mixer, projections and the exact softmax readout streamed over N_q (eqs. 11-12)."""
        z = self.mixer(y_enh)
        k_g, v_g = self.w_k(z), self.w_v(z)
        return self.attend(q, k_g, v_g, scale), z, k_g, v_g

    def attend(self, q: torch.Tensor, k_g: torch.Tensor, v_g: torch.Tensor, scale: float | None) -> torch.Tensor:
        """softmax(Q K_g^T * scale) V_g, exactly, one chunk of queries at a time (eq. 12). The scale is folded into
        the M x d_k keys, not the N x M logits."""
        # with M keys the explicit GEMM-softmax-GEMM beats SDPA's flash kernel on CPU, whose key blocking is sized
        # for long key sequences (1.6x at N = 8192, M = 64; benchmarks/attention_plash)
        s_ = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        if self.fused("plash_readout", q):
            return _kp.attend(q, k_g, v_g, s_)
        kt = (k_g * s_).transpose(-1, -2)  # (n, M, d_k) -> (n, d_k, M)
        p = self.dropout if self.training else 0.0
        streamed = not (torch.is_grad_enabled() and (q.requires_grad or k_g.requires_grad))
        out = q.new_empty(*q.shape[:-1], v_g.shape[-1]) if streamed else None
        outs = []
        for s in range(0, q.shape[-2], self.chunk_size):
            w = torch.softmax(q[:, s : s + self.chunk_size] @ kt, dim=-1)
            if p > 0:
                w = F.dropout(w, p)
            if streamed:  # write each chunk in place (no concatenation copy)
                torch.bmm(w, v_g, out=out[:, s : s + self.chunk_size])
            else:
                outs.append(w @ v_g)
        return out if streamed else (outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2))

    def trace(self, q, k, v, scale=None, deterministic: bool = False) -> PlashTrace:
        """Folded (n, N, d) inputs -> every intermediate; `deterministic` swaps sketches for z^det."""
        kt, vt = self.compress(k, v)
        gt = self.normalized_features(kt, vt)
        feats = self.deterministic_features(gt) if deterministic else self.sketch_features(gt)
        y_enh = self.embed(feats)
        out, z, k_g, v_g = self.readout(q, y_enh, scale)
        return PlashTrace(kt, vt, gt, y_enh, z, k_g, v_g, out)

    def forward(
        self,
        q,
        k,
        v,
        attn_mask=None,
        is_causal=False,
        scale=None,
        state: PlashState | None = None,
        cu_seqlens=None,
        segment_ids=None,
    ):
        """SDPA's call. attn_mask: a boolean key-padding mask (B|1, H|1, 1, Nk) (ours: `causal`). state: a
        PlashState (causal only): the queries continue the sequence it holds (plash_state module doc).

        Args:
            q (B, H, Nq, Dh): queries, Dh = head_dim; 16-bit inputs are computed in float32.
            k (B, H, Nk, Dh): keys, q's dtype.
            v (B, H, Nk, Dh): values, q's dtype (Dv = head_dim).
            attn_mask (B, H, 1, Nk): a boolean key-padding mask (True = keep), broadcastable; any other mask is a
                ValueError.
            is_causal (bool): the chunked-prefix variant (Nq = Nk).
            scale (float | None): the readout's logit scale (None: 1/sqrt(Dh)).
            state (PlashState | None): a decoding state from `init_state()` (is_causal=True), updated in place.
            cu_seqlens ((D + 1,) or (B, D + 1)): packed documents, flash-attention's cumulative lengths
                (attention.boundaries); each document attends to itself only, its block grid from its first token.
            segment_ids (B, N): packed documents as one id per token (instead of cu_seqlens).

        Returns:
            out (B, H, Nq, Dh): the attention output, in q's dtype.
        """
        if cu_seqlens is not None or segment_ids is not None:
            return self._packed(q, k, v, attn_mask, is_causal, scale, state, cu_seqlens, segment_ids)
        if needs_float32(q, k, v) or self.prototypes.dtype in (torch.float16, torch.bfloat16):
            # 16 bits: the prototype softmax, the TensorSketch FFTs (none in 16 bits on CPU) and the mixer's
            # LayerNorm statistics run in float32
            return float32_compute(self, q, k, v, attn_mask, is_causal, scale, state=state)
        # Non-causal: a NaN/inf anywhere in k or v reaches K~ or V~ (softmax weights are > 0, and 0 * inf
        # is NaN), so the M x d summaries are checked instead of the N x d inputs (saves ~5% at N = 8192).
        check_attention_inputs(q, k, v, finite_kv=is_causal)
        if (is_causal or state is not None) and q.shape[-2] != k.shape[-2]:
            fail("is_causal", f"True with N_q={q.shape[-2]} != N_k={k.shape[-2]}", "N_q == N_k for causal PLASH")
        if q.shape[-1] != self.head_dim or v.shape[-1] != self.head_dim:
            fail("q", f"head dim {q.shape[-1]} (v: {v.shape[-1]})", f"head_dim={self.head_dim} for q, k and v")
        b, h, nq, dh = q.shape
        keep = key_padding_mask(attn_mask, k, "PLASH")
        if keep is not None:
            keep = keep[..., 0].expand(b, h, k.shape[-2]).reshape(b * h, -1)  # (B|1, H|1, Nk, 1) -> (B H, Nk)

        def fold(x):
            return x.reshape(b * h, x.shape[-2], x.shape[-1])  # (B, H, N, d) -> (B H, N, d)

        if state is not None:
            if not is_causal:
                fail("is_causal", is_causal, "True with a decoding state")
            if not isinstance(state, PlashState):
                fail("state", type(state).__name__, "a PlashState from PlashAttention.init_state()", TypeError)
            check_state_use(self, state, q)
            # (B H, Nq, d) -> (B, H, Nq, d)
            return plash_step(self, fold(q), fold(k), fold(v), keep, state, scale).reshape(b, h, nq, -1)
        if is_causal:
            # (B H, Nq, d) -> (B, H, Nq, d)
            return self.causal(fold(q), fold(k), fold(v), scale, keep).reshape(b, h, nq, -1)
        kt, vt = self.compress(fold(k), fold(v), keep)
        if reads_values(kt):  # a host read: CPU in eager mode, or value_checks("always") (_validation)
            if not all_finite(kt):  # the keys set the routing weights, so they reach both summaries
                check_finite_kv(k, v, "k", "Stage I summary K~")
            if not all_finite(vt):
                check_finite_kv(k, v, "v", "Stage I summary V~")
        y_enh = self.embed(self.sketch_features(self.normalized_features(kt, vt)))
        out = self.readout(fold(q), y_enh, scale)[0]
        return out.reshape(b, h, nq, -1)  # (B H, Nq, d) -> (B, H, Nq, d)

    def _packed(self, q, k, v, attn_mask, is_causal, scale, state, cu_seqlens, segment_ids) -> torch.Tensor:
        """forward over packed rows: every document's blocks and summaries are its own (attention.packed)."""
        check_packed_call(q, k, is_causal, state, "PLASH")
        check_attention_inputs(q, k, v)
        doc = document_ids(cu_seqlens, segment_ids, q.shape[0], q.shape[-2])
        if needs_float32(q, k, v) or self.prototypes.dtype in (torch.float16, torch.bfloat16):
            return float32_compute(self, q, k, v, attn_mask, is_causal, scale, segment_ids=doc)
        if attn_mask is not None:
            fail("attn_mask", "a key-padding mask with document boundaries", "None: packed rows have no padding")
        if q.shape[-1] != self.head_dim or v.shape[-1] != self.head_dim:
            fail("q", f"head dim {q.shape[-1]} (v: {v.shape[-1]})", f"head_dim={self.head_dim} for q, k and v")
        b, h, n, d = q.shape
        out = plash_causal_packed(
            self, q.reshape(b * h, n, d), k.reshape(b * h, n, d), v.reshape(b * h, n, d), scale, expand_rows(doc, b, h)
        )
        return out.reshape(b, h, n, -1)  # (B H, N, d) -> (B, H, N, d)

    def init_state(self, batch: int | None = None, max_len: int | None = None) -> PlashState:
        """An empty causal decoding state (plash_state module doc; the contract: attention.decoding). batch,
        max_len: accepted and checked (positive ints or None), not needed: the state's tensors take their final
        shapes at its first step ((B H) rows, dtype and device come from those tokens; the block and the summaries
        have causal_block + M rows whatever the context length), so a compiled or graph-captured step sees static
        shapes either way."""
        for name, size in (("batch", batch), ("max_len", max_len)):
            if size is not None:
                check_int(name, size, 1)
        return PlashState()

    def causal(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, keep: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Chunked prefix compression on folded (n, N, d) inputs (module docstring). keep: (n, N) boolean key
        padding (ours; the paper has no masked form): a padded key adds nothing to any Stage I summary (its
        routing row A_j is zeroed) and is masked in the exact in-block part; a block whose prefix holds no kept key
        reads no summary; a query that sees no kept key at all gets the output 0. The blocks of a row count from its
        first kept key, so left padding is invisible: a padded row's real tokens get the outputs of the row alone."""
        if keep is not None:
            return self._causal_from_first_kept(q, k, v, scale, keep)
        return self._causal_blocks(q, k, v, scale, None)

    def _causal_from_first_kept(self, q, k, v, scale, keep: torch.Tensor) -> torch.Tensor:
        """core.causal with key padding: each row's block grid starts at its first kept key, so a left-padded row
        gives its real tokens the outputs of the row alone (Alg. 1's summaries are of the row's own blocks). Exact
        and sync-free: each row is rotated left by its count of leading pads (one gather; the pads move behind its
        last token, where the causal mask hides them), blocked as usual, and rotated back; a query before the first
        kept key sees no kept key and gets 0, as defined above."""
        n, length, d = q.shape
        lead = (keep.cumsum(-1) == 0).sum(-1, keepdim=True)  # (n, 1) leading pads; N for a row without a kept key
        idx = torch.arange(length, device=q.device)
        fwd = (idx + lead) % length  # (n, N): rotated row i holds token (i + lead) mod N

        def rot(x, index):
            return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))

        out = self._causal_blocks(rot(q, fwd), rot(k, fwd), rot(v, fwd), scale, keep.gather(1, fwd))
        out = rot(out, (idx - lead) % length)  # rotated back
        return out.masked_fill((idx < lead).unsqueeze(-1), 0.0)

    def _causal_blocks(self, q, k, v, scale, keep: torch.Tensor | None) -> torch.Tensor:
        """The blocked computation of core.causal, blocks aligned to the first position given."""
        if self.fused("plash_causal", q):
            return _kp.causal_blocks(self, q, k, v, 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale, keep)
        n, length, _ = q.shape
        c = self.causal_block
        nb = -(-length // c)
        pad = nb * c - length  # padded positions sit after every real one: the causal mask hides them

        def blocks(x):
            return F.pad(x, (0, 0, 0, pad)).unflatten(1, (nb, c))  # (n, N, d) -> (n, nb, c, d)

        qb, kb, vb = blocks(q), blocks(k), blocks(v)
        kp = None if keep is None else F.pad(keep, (0, pad)).unflatten(1, (nb, c))  # (n, nb, c)
        s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        ll = (qb @ kb.transpose(-1, -2)) * s  # (n, nb, c, c): in-block logits
        visible = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
        ll = ll.masked_fill(~(visible if kp is None else visible & kp[:, :, None, :]), float("-inf"))
        if nb == 1:  # no earlier block: exact causal softmax within the block, no summaries to build
            # (n, 1, c, d) -> (n, N, d)
            return (self._drop(_softmax(ll, kp is not None)) @ vb).flatten(1, 2)[:, :length]
        a = self.routing(kb[:, :-1], None if kp is None else kp[:, :-1])
        # per-block A^T K, A^T V (n, nb - 1, M, d) and their inclusive prefix sums = the exclusive prefix of
        # blocks 1..nb-1; block 0 has no prefix, so Stage II and the mixer never run on its (empty) summaries
        pk, pv = (a @ kb[:, :-1]).cumsum(1), (a @ vb[:, :-1]).cumsum(1)
        k_g, v_g = self.prefix_summaries(pk.flatten(0, 1), pv.flatten(0, 1))  # (n, nb - 1, M, d) -> (n (nb - 1), M, d)
        k_g, v_g = k_g.unflatten(0, (n, nb - 1)), v_g.unflatten(0, (n, nb - 1))  # -> (n, nb - 1, M, d)
        lg = (qb[:, 1:] @ k_g.transpose(-1, -2)) * s  # (n, nb - 1, c, M): summary logits
        if kp is not None:  # a prefix without a kept key has no summary to read
            lg = lg.masked_fill((kp[:, :-1].sum(-1).cumsum(1) == 0)[:, :, None, None], float("-inf"))
        lg = torch.cat([lg.new_full((n, 1, c, self.M), float("-inf")), lg], 1)  # block 0 reads no summary
        v_g = torch.cat([v_g.new_zeros(n, 1, self.M, v_g.shape[-1]), v_g], 1)
        w = self._drop(_softmax(torch.cat([lg, ll], dim=-1), kp is not None))
        out = w[..., : self.M] @ v_g + w[..., self.M :] @ vb
        return out.flatten(1, 2)[:, :length]  # (n, nb, c, d) -> (n, N, d)

    def routing(self, k: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """A^T (eq. 3) of keys (..., N, d_k) -> (..., M, N); a padded key's column is 0 (it adds to no summary)."""
        a = torch.softmax(k @ (self.prototypes.to(k.dtype).t() / self.tau), dim=-1)
        if keep is not None:
            a = a * keep[..., None].to(a.dtype)
        return a.transpose(-1, -2)  # (..., N, M) -> (..., M, N)

    def prefix_summaries(self, pk: torch.Tensor, pv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stages II-III keys and values (K_g, V_g) of Stage I sums K~, V~ (n, M, d) (eqs. 6-12)."""
        z = self.mixer(self.embed(self.sketch_features(self.normalized_features(pk, pv))))
        return self.w_k(z), self.w_v(z)

    def fused(self, op: str, x: torch.Tensor) -> bool:
        """Whether `op` ("plash_stage1", "plash_readout", "plash_causal", "plash_decode") runs its Triton kernel on
        inputs like x (kernels.use_kernel: the `kernel` argument, SYMFORMER_KERNELS); dropout on the readout's
        weights stays on torch."""
        block = self.causal_block if op in ("plash_causal", "plash_decode") else None
        why = _kp.unsupported(x, x.shape[-1], self.M, block)
        if why is None and op != "plash_stage1" and self.training and self.dropout > 0:
            why = "dropout on the attention weights"
        return use_kernel(op, (x,), self.kernel, why)

    def _drop(self, w: torch.Tensor) -> torch.Tensor:
        return F.dropout(w, self.dropout) if self.training and self.dropout > 0 else w

    def flops(self, n_q: int, n_k: int, batch_heads: int = 1) -> int:
        """Multiply-add count x 2 of one forward (matmuls only; FFTs and softmax excluded).

        Args:
            n_q (int): queries per head.
            n_k (int): keys per head.
            batch_heads (int): B H.

        Returns:
            flops (int): 2 x the multiply-adds of the non-causal forward, linear in n_q and n_k.
        """
        dh, m, d = self.head_dim, self.M, self.width
        stage1 = 2 * n_k * m * dh * 3  # K P^T, A^T K, A^T V
        stage3 = 2 * n_q * m * dh * 2 + 2 * m * d * dh * 2  # Q K_g^T, A V_g, W_K, W_V
        layers = len(self.mixer.layers)
        ff = self.mixer.layers[0].linear1.out_features
        mixer = layers * (2 * m * d * d * 4 + 2 * m * m * d * 2 + 2 * m * d * ff * 2)
        stage2 = 2 * m * 2 * dh * d + 2 * m * sum(self.D_k) * d + mixer
        return batch_heads * (stage1 + stage2 + stage3)

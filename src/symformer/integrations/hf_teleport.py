"""Symmetry teleportation on Llama-family Hugging Face models, grouped-query attention included.

Per layer the group acts per KEY head g (H_kv of them, each read by r = H / H_kv query heads):
  Q rows of every query head of group g <- U_g rows,   K rows of head g <- U_g^{-T} rows,
  V rows of head g <- V_g rows,  O columns of every query head of group g <- cols V_g^{-1}.
Query head h = g r + j reads key head g (HF's repeat_kv is repeat_interleave), so q_h^T U_g^T M U_g^{-T} k_g =
q_h^T M k_g whenever U_g^T commutes with every relative rotation M (paper Sec. 3, eq. (9) for RoPE): U must be
shared by the query heads of one key head, and V by the query heads reading one value head. Head permutations
permute key groups (their query heads move along). The Q/K group comes from the layer's rotary part
(teleport.groups.qk_group_for): the native HF RoPE is RoPE in the "half" pairing (H(d_h) on pairs (u, u+Dh/2)),
patched parts bring their own (STRING: P H P^T; ESPR, circulant STRING: the commutant). With ffn=True the
gated MLP down(act(gate x) * up x) also admits up rows <- s * rows, down columns <- columns / s (s > 0 or any
nonzero s: the product is linear in the up branch).

`HFTeleport` drives `teleport.TeleportCallback` from a plain training loop (no symformer Trainer).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

import torch
from torch import nn

from symformer._validation import check_int, fail
from symformer.integrations._hf_common import FAMILIES, attention_modules, n_kv_heads
from symformer.teleport import groups as _groups
from symformer.teleport.groups import AttentionSite, SymmetryGroup, _inner, qk_group_for


class _AttentionView:
    """What the group reads of an HF attention layer (the attribute names of symformer's MultiHeadAttention)."""

    def __init__(self, attn: nn.Module, n_heads: int, n_kv: int):
        self.attn = attn
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        self.n_query_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv, int(attn.head_dim)

    @property
    def rotary(self):
        return getattr(self.attn, "rotary", None) or _native_rope(self.head_dim)


def _native_rope(head_dim: int):
    """HF's own rotary embedding seen as symformer RoPE in the half pairing (only its pairs matter here)."""
    from symformer.positional import RoPE
    return RoPE(head_dim, pairing="half")


class GQASite(AttentionSite):
    """A site whose group factors are per KEY head: `n_heads` counts key heads (the element's leading size)."""

    @property
    def n_heads(self) -> int:
        return self.module.n_kv_heads

    @property
    def groups(self) -> int:
        return self.module.n_query_heads // self.module.n_kv_heads


class _GLUView:
    def __init__(self, mlp: nn.Module):
        self.up, self.down = mlp.up_proj, mlp.down_proj


def _rows(w: torch.Tensor, h: int) -> torch.Tensor:
    return w.reshape(h, -1, *w.shape[1:])


def _expand(a: torch.Tensor, r: int) -> torch.Tensor:
    """Per key head (..., H_kv, D, D) -> per query head (..., H, D, D)."""
    return a if r == 1 else a.repeat_interleave(r, dim=-3)


def _query_perm(p: torch.Tensor | None, r: int) -> torch.Tensor | None:
    return None if p is None else (p[:, None] * r + torch.arange(r)).flatten()


class GQASymmetryGroup(SymmetryGroup):
    """SymmetryGroup of an HF Llama-family model (module docstring); elements have one factor per key head."""

    def transformed(self, g):
        out: dict[int, torch.Tensor] = {}
        for site, u, v, p in zip(self.sites, g.qk, g.vo, g.perm or [None] * len(g.qk), strict=True):
            m, r = site.module, site.groups
            h, hk = m.n_query_heads, m.n_kv_heads
            dt = m.q_proj.weight.dtype
            u, v = u.to(dt), v.to(dt)
            u_it, v_inv = torch.linalg.inv(u).transpose(-1, -2), torch.linalg.inv(v)
            qp = _query_perm(p, r)
            for lin, a, heads, perm in ((m.q_proj, _expand(u, r), h, qp), (m.k_proj, u_it, hk, p),
                                        (m.v_proj, v, hk, p)):
                w = a @ _rows(lin.weight, heads)
                b = None if lin.bias is None else (a @ _rows(lin.bias, heads)[..., None])[..., 0]
                if perm is not None:
                    w, b = w[perm], None if b is None else b[perm]
                out[id(lin.weight)] = w.reshape(lin.weight.shape)
                if b is not None:
                    out[id(lin.bias)] = b.reshape(lin.bias.shape)
            wo = m.o_proj.weight.reshape(m.o_proj.weight.shape[0], h, -1).transpose(0, 1) @ _expand(v_inv, r)
            if qp is not None:
                wo = wo[qp]
            out[id(m.o_proj.weight)] = wo.transpose(0, 1).reshape(m.o_proj.weight.shape)
        out.update(self._ffn_transformed(g))
        return out

    def _ffn_transformed(self, g) -> dict[int, torch.Tensor]:
        out = {}
        for f, s in zip(self.ffns, g.ffn or [None] * len(self.ffns), strict=True):
            if s is not None:
                s = s.to(f.up.weight.dtype)
                out[id(f.up.weight)] = f.up.weight * s[:, None]
                if f.up.bias is not None:
                    out[id(f.up.bias)] = f.up.bias * s
                out[id(f.down.weight)] = f.down.weight / s[None, :]
        return out

    def grad_action(self, g, tensors):
        out: dict[int, torch.Tensor] = {}
        for site, u, v, p in zip(self.sites, g.qk, g.vo, g.perm or [None] * len(g.qk), strict=True):
            m, r = site.module, site.groups
            h, hk = m.n_query_heads, m.n_kv_heads
            dt = m.q_proj.weight.dtype
            u, v = u.to(dt), v.to(dt)
            u_it, v_it = torch.linalg.inv(u).transpose(-1, -2), torch.linalg.inv(v).transpose(-1, -2)
            qp = _query_perm(p, r)
            for lin, a, heads, perm in ((m.q_proj, _expand(u_it, r), h, qp), (m.k_proj, u, hk, p),
                                        (m.v_proj, v_it, hk, p)):
                for par in (lin.weight, lin.bias):
                    if par is None or id(par) not in tensors:
                        continue
                    t = tensors[id(par)]
                    rows = _rows(t, heads)
                    res = a @ rows if t.ndim == 2 else (a @ rows[..., None])[..., 0]
                    out[id(par)] = (res if perm is None else res[perm]).reshape(t.shape)
            t = tensors.get(id(m.o_proj.weight))
            if t is not None:
                go = t.reshape(t.shape[0], h, -1).transpose(0, 1) @ _expand(v.transpose(-1, -2), r)
                out[id(m.o_proj.weight)] = (go if qp is None else go[qp]).transpose(0, 1).reshape(t.shape)
        for f, s in zip(self.ffns, g.ffn or [None] * len(self.ffns), strict=True):
            if s is not None:
                s = s.to(f.up.weight.dtype)
                for par, fac in ((f.up.weight, 1 / s[:, None]), (f.up.bias, 1 / s), (f.down.weight, s[None, :])):
                    if par is not None and id(par) in tensors:
                        out[id(par)] = tensors[id(par)] * fac
        return out

    def candidate_sq_norms(self, grads, cands):
        """As SymmetryGroup.candidate_sq_norms; the Gram matrices of the query heads (and O column blocks)
        that share one factor are summed first: sum_h <A, G_h G_h^T> = <A, sum_h G_h G_h^T>."""
        total = 0.0
        for site, u, v in zip(self.sites, cands.qk, cands.vo, strict=True):
            m = site.module
            h, hk = m.n_query_heads, m.n_kv_heads
            sq = _group_sum(SymmetryGroup._gram_rows(m.q_proj, grads, h), hk)
            sk, sv = (SymmetryGroup._gram_rows(lin, grads, hk) for lin in (m.k_proj, m.v_proj))
            go = grads.get(id(m.o_proj.weight))
            so = 0 if go is None else _group_sum(
                (lambda c: c.transpose(-1, -2) @ c)(go.to(torch.float64).reshape(go.shape[0], h, -1).transpose(0, 1)), hk)
            u, v = u.to(torch.float64), v.to(torch.float64)
            utu, vtv = u.transpose(-1, -2) @ u, v.transpose(-1, -2) @ v
            total = total + _inner(torch.linalg.inv(utu), sq) + _inner(utu, sk) + _inner(torch.linalg.inv(vtv), sv) \
                + _inner(vtv, so)
        for f, s in zip(self.ffns, cands.ffn or [None] * len(self.ffns), strict=True):
            if s is None:
                continue
            s = s.to(torch.float64)
            gu, gb, gd = (grads.get(id(t)) if t is not None else None for t in (f.up.weight, f.up.bias, f.down.weight))
            ru = (0 if gu is None else gu.to(torch.float64).pow(2).sum(-1)) + (0 if gb is None else gb.to(torch.float64).pow(2))
            rd = 0 if gd is None else gd.to(torch.float64).pow(2).sum(0)
            total = total + (ru / s ** 2).sum(-1) + (rd * s ** 2).sum(-1)
        return total


def _group_sum(s, hk: int):
    return s if isinstance(s, int) else s.reshape(hk, -1, *s.shape[-2:]).sum(1)


def _is_hf_family(model: nn.Module) -> bool:
    return getattr(getattr(model, "config", None), "model_type", None) in FAMILIES


def symmetry_group(model: nn.Module, positions: torch.Tensor | None = None, ffn: bool = False) -> SymmetryGroup:
    """The symmetry group of a Llama / Mistral / Qwen2 model (module docstring); any other model goes to
    symformer.teleport.symmetry_group. positions: (N, 1) positions for the ESPR commutant (default: generic
    points). ffn: include the gated MLP's up/down rescaling. ValueError for an approximate attention core."""
    if not _is_hf_family(model):
        return _groups.symmetry_group(model, positions, ffn=ffn)
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if str(impl).startswith("symformer_"):
        fail("attn_implementation", impl, "an exact softmax implementation (eager, sdpa, ...): approximate kernels "
             "are not invariant under GL(d_h)")
    h, hk = model.config.num_attention_heads, n_kv_heads(model.config)
    names = {id(m): n for n, m in model.named_modules()}
    sites = []
    for attn in attention_modules(model):
        view = _AttentionView(attn, h, hk)
        sites.append(GQASite(names[id(attn)], view, qk_group_for(view.rotary, view.head_dim, positions)))
    mlps = [_GLUView(m) for m in model.modules() if hasattr(m, "up_proj") and hasattr(m, "down_proj")] if ffn else []
    return GQASymmetryGroup(sites, mlps, positions)


def _build_for_teleport(model, positions, ffn):
    """Hook for teleport.groups.symmetry_group (so TeleportCallback(model=hf_model) works)."""
    return symmetry_group(model, positions, ffn=ffn) if _is_hf_family(model) else None


if _build_for_teleport not in _groups.EXTERNAL_BUILDERS:
    _groups.EXTERNAL_BUILDERS.append(_build_for_teleport)


class HFTeleport:
    """TeleportCallback in a plain loop over an HF model:

        tele = HFTeleport(model, optimizer, loss_fn, total_steps=300, step=10, steps=4)
        for step, batch in enumerate(batches):
            loss = loss_fn(model, batch); loss.backward()
            tele.after_backward(step, batch, loss)  # may teleport: parameters and .grad move together
            optimizer.step(); optimizer.zero_grad()

    loss_fn(model, batch) -> scalar loss; options go to TeleportCallback (alpha, samples, step, steps, epoch,
    seed, method, state_policy, ffn, ...); steps_per_epoch (default total_steps) places `epoch` schedules."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                 loss_fn: Callable[[nn.Module, object], torch.Tensor], total_steps: int,
                 steps_per_epoch: int | None = None, **options):
        from symformer.teleport import TeleportCallback
        check_int("total_steps", total_steps, 1)
        spe = check_int("steps_per_epoch", steps_per_epoch if steps_per_epoch is not None else total_steps, 1)
        self.callback = TeleportCallback(model=model, **options)
        task = SimpleNamespace(loss=lambda mdl, data, idx: loss_fn(mdl, data))
        self.trainer = SimpleNamespace(raw_model=model, model=model, optimizer=optimizer, task=task, train_data=None,
                                       total_steps=total_steps, steps_per_epoch=spe, last_loss=None,
                                       cfg=SimpleNamespace(epochs=-(-total_steps // spe)), state=SimpleNamespace(step=0))
        self.callback.on_train_start(self.trainer)

    @property
    def log(self) -> list[dict]:
        return self.callback.log

    def after_backward(self, step: int, batch, loss: torch.Tensor | float | None = None) -> None:
        """Call after loss.backward() and before optimizer.step() (TeleportCallback.on_after_backward)."""
        t = self.trainer
        t.state.step, t.train_data = check_int("step", step, 0), batch
        t.last_loss = None if loss is None else float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
        self.callback.on_after_backward(t, None)


__all__ = ["GQASymmetryGroup", "GQASite", "HFTeleport", "symmetry_group"]

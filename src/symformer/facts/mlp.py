"""The MLP shape every construction returns: SwiGLU-like `down(act(gate x) * up x)` (Alg. 1, line 3),
or non-gated `down(act(up x))` (Alg. 8, App. B.3-B.4), with `down` dense or factorised as D E."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from symformer._validation import check_choice, check_int, check_tensor, fail

ACTIVATIONS = ("silu", "relu", "silu_prime", "step", "linear")


def silu_prime(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


def activate(kind: str, x: torch.Tensor) -> torch.Tensor:
    if kind == "silu":
        return F.silu(x)
    if kind == "relu":
        return F.relu(x)
    if kind == "silu_prime":
        return silu_prime(x)
    if kind == "linear":
        return x  # the identity: a gated MLP with it is bilinear, (gate x) * (up x) (facts.hebbian)
    return (x > 0).to(x.dtype)  # "step": ReLU's derivative, the gate of the ReLU derivative gadget (B.4.3)


class FactorisedDown(nn.Module):
    """h -> d through codes: z (h) -> E z + b_E (m codes) -> D codes + b_out.

    `E` is either block-structured (hidden unit t belongs to code t // (h/m), weight `e[t]`; Alg. 2, line 7)
    or dense (m x h, the GD encoder). Storing only `e` keeps the count at what the construction needs.
    """

    def __init__(
        self,
        h: int,
        m: int,
        d: int,
        dense: bool = False,
        code_bias: bool = False,
        out_bias: bool = False,
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        check_int("h", h, 1)
        check_int("m", m, 1)
        if not dense and h % m:
            fail("h", h, f"a multiple of m = {m} for a block-structured encoder")
        self.h, self.m, self.d, self.dense = h, m, d, dense
        if dense:
            self.E = nn.Parameter(torch.zeros(m, h, dtype=dtype))
        else:
            self.e = nn.Parameter(torch.ones(h, dtype=dtype))
        self.D = nn.Parameter(torch.zeros(d, m, dtype=dtype))
        self.code_bias = nn.Parameter(torch.zeros(m, dtype=dtype)) if code_bias else None
        self.out_bias = nn.Parameter(torch.zeros(d, dtype=dtype)) if out_bias else None

    def codes(self, z: torch.Tensor) -> torch.Tensor:
        if self.dense:
            c = z @ self.E.T
        else:
            c = (z * self.e).unflatten(-1, (self.m, self.h // self.m)).sum(-1)
        return c if self.code_bias is None else c + self.code_bias

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.codes(z) @ self.D.T
        return out if self.out_bias is None else out + self.out_bias

    @torch.no_grad()
    def left_multiply(self, t: torch.Tensor) -> None:
        """down <- T down (the whitening fold-back acts on the final linear block)."""
        self.D.copy_(t @ self.D)
        if self.out_bias is not None:
            self.out_bias.copy_(t @ self.out_bias)

    def dense_weight(self) -> torch.Tensor:
        e = self.E if self.dense else torch.block_diag(*self.e.view(self.m, -1).unbind(0))
        return self.D @ e


class DenseDown(nn.Linear):
    @torch.no_grad()
    def left_multiply(self, t: torch.Tensor) -> None:
        self.weight.copy_(t @ self.weight)
        if self.bias is not None:
            self.bias.copy_(t @ self.bias)

    def dense_weight(self) -> torch.Tensor:
        return self.weight


class FactMLP(nn.Module):
    """gate / up / down as in `symformer.models.layers.SwiGLU` (gate is None for non-gated MLPs).

    Args:
        d (int): the key / value width.
        h (int): the hidden width.
        activation (str): "silu", "relu", "silu_prime", "step" or "linear" (the identity).
        gated (bool): down(act(gate x) * up x), else down(act(up x)).
        bias (bool): biases on gate and up.
        m (int | None): factorise down as D E through m codes (None: a dense (d, h) down).
        dense_codes (bool): E dense (m, h), else block-structured (h entries; h a multiple of m).
        code_bias (bool): a bias on the codes.
        out_bias (bool): a bias on the output.
        dtype (torch.dtype): the parameters' dtype.

    Examples:
        >>> import torch
        >>> from symformer.facts import FactMLP, count_params
        >>> mlp = FactMLP(d=8, h=32, m=4)  # SwiGLU-like, down through m = 4 codes
        >>> mlp(torch.randn(5, 8)).shape  # (..., d) -> (..., d), computed in the parameters' dtype
        torch.Size([5, 8])
        >>> count_params(mlp) == 8 * 32 + 8 * 32 + 32 + 8 * 4  # gate, up, block-structured E (h entries), D
        True
    """

    def __init__(
        self,
        d: int,
        h: int,
        activation: str = "silu",
        gated: bool = True,
        bias: bool = False,
        m: int | None = None,
        dense_codes: bool = False,
        code_bias: bool = False,
        out_bias: bool = False,
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        check_int("d", d, 1)
        check_int("h", h, 1)
        check_choice("activation", activation, ACTIVATIONS)
        self.d, self.h, self.activation, self.gated = d, h, activation, gated
        self.gate = nn.Linear(d, h, bias=bias, dtype=dtype) if gated else None
        self.up = nn.Linear(d, h, bias=bias, dtype=dtype)
        if m is None:
            self.down: nn.Module = DenseDown(h, d, bias=out_bias, dtype=dtype)
        else:
            self.down = FactorisedDown(h, m, d, dense=dense_codes, code_bias=code_bias, out_bias=out_bias, dtype=dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.up.weight.dtype

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return activate(self.activation, self.gate(x)) * self.up(x)
        return activate(self.activation, self.up(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """down(act(gate x) * up x), or down(act(up x)) for a non-gated MLP.

        Args:
            x (..., d): keys, any floating dtype (cast to the parameters' dtype).

        Returns:
            out (..., d): outputs in the parameters' dtype; key i decodes to argmax_j <out_i, v_j>.
        """
        check_tensor("x", x)
        if x.shape[-1] != self.d:
            fail("x", f"last dim {x.shape[-1]}", f"the MLP width d = {self.d}")
        return self.down(self.hidden(x.to(self.dtype)))

    def n_params(self) -> int:
        return count_params(self)


def count_params(module: nn.Module) -> int:
    """What is stored: every parameter entry (block-structure indices and buffers are free).

    Args:
        module (nn.Module): any module.

    Returns:
        count (int): the number of parameter entries.

    Examples:
        >>> import torch
        >>> from symformer.facts import count_params
        >>> count_params(torch.nn.Linear(4, 3))  # 12 weights, 3 biases
        15
    """
    return sum(p.numel() for p in module.parameters())


#: most hidden activations (rows x h) an evaluation forms per batch
MAX_ACTIVATIONS = 1 << 24


def capped_batch(mlp: nn.Module | None, batch: int) -> int:
    """`batch` lowered so that a batch through `mlp` holds at most MAX_ACTIVATIONS hidden activations (an NTK
    MLP with h = 131,072 would otherwise take GBs per batch); unchanged for a module without an int width h."""
    width = getattr(mlp, "h", None)
    if isinstance(width, int) and width > 0:
        return max(1, min(batch, MAX_ACTIVATIONS // width))
    return batch


@torch.no_grad()
def fact_accuracy(
    mlp: nn.Module, keys: torch.Tensor, values: torch.Tensor, facts: torch.Tensor, batch: int = 4096
) -> float:
    """Fraction of keys whose output decodes to f(i) by argmax_j <g(k_i), v_j> (eq. 1), in `capped_batch`es.

    Args:
        mlp (nn.Module): g, mapping (n, d) keys to (n, d) outputs.
        keys (n_keys, d): key embeddings.
        values (n_values, d): value embeddings.
        facts (n_keys,): int64, the value index each key must decode to.
        batch (int): keys per forward.

    Returns:
        accuracy (float): in [0, 1]; 1.0 when every fact is stored.

    Examples:
        >>> from symformer.facts import build_fact_mlp, fact_accuracy, make_fact_set
        >>> fs = make_fact_set(32, 16, seed=0)
        >>> mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, "naive")
        >>> fact_accuracy(mlp, fs.keys, fs.values, fs.facts)
        1.0
        >>> fact_accuracy(mlp, fs.keys, fs.values, fs.facts.roll(1))  # another bijection: no key decodes to it
        0.0
    """
    batch = capped_batch(mlp, batch)
    hits = 0
    p = next(mlp.parameters())
    vals = values.to(p.dtype)
    for s in range(0, keys.shape[0], batch):
        out = mlp(keys[s : s + batch].to(p.dtype))
        hits += int((torch.argmax(out @ vals.T, dim=1) == facts[s : s + batch]).sum())
    return hits / keys.shape[0]


@torch.no_grad()
def fact_margin(mlp: nn.Module, keys: torch.Tensor, values: torch.Tensor, facts: torch.Tensor) -> float:
    """min_i [<g(k_i), v_f(i)> - max_{j != f(i)} <g(k_i), v_j>]: > 0 iff every fact is stored (eq. 1).

    Args:
        mlp (nn.Module): g, mapping (n, d) keys to (n, d) outputs.
        keys (n_keys, d): key embeddings.
        values (n_values, d): value embeddings.
        facts (n_keys,): int64, the value index each key must decode to.

    Returns:
        margin (float): the smallest decoding margin over the keys.

    Examples:
        >>> from symformer.facts import build_fact_mlp, fact_margin, make_fact_set
        >>> fs = make_fact_set(32, 16, seed=0)
        >>> mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, "naive")
        >>> fact_margin(mlp, fs.keys, fs.values, fs.facts) > 0
        True
        >>> fact_margin(mlp, fs.keys, fs.values, fs.facts.roll(1)) < 0  # another map: not stored
        True
    """
    p = next(mlp.parameters())
    s = mlp(keys.to(p.dtype)) @ values.to(p.dtype).T
    right = s.gather(1, facts.view(-1, 1)).squeeze(1)
    s.scatter_(1, facts.view(-1, 1), float("-inf"))
    return float((right - s.max(1).values).min())

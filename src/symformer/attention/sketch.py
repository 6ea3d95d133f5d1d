"""CountSketch and TensorSketch with the limited-independence hashes PLASH's theory assumes.

- Bucket hash h: [d'] -> [D], 3-wise independent: a random degree-2 polynomial over F_p, then
  `mod D` with rejection of the whole polynomial (Construction C.3, step 1).
- Sign hash s: [d'] -> {+-1}, 4-wise independent: a random degree-3 polynomial over GF(2^w), sign
  from the lowest bit, a nonzero F_2-linear functional (Construction C.3, step 2).
- TS_k(g; D) = IFFT(prod_t FFT(C_t g)) (eq. 42) through torch.fft.rfft / irfft.

The hashes are drawn once from an explicit torch.Generator and kept as integer / float buffers, so a
state_dict reproduces the sketch (Algorithm 1 treats the seeds as inputs).
"""

from __future__ import annotations

import torch
from torch import nn

from symformer._rng import seeded_generator
from symformer._validation import check_int, check_tensor, fail

# Default prime for the bucket hash: 2^31 - 1 >= max(d', D) for every size used here, and it makes the
# rejection in Construction C.3 rare (probability <= d' * (p mod D) / p ~ 1e-5 for d' = 512, D = 128), so
# conditioning on "no rejection" perturbs the exact 3-wise law by at most that much.
MERSENNE_31 = 2**31 - 1

# Irreducible polynomials over F_2 of degree w (bit i = coefficient of x^i); tests check irreducibility.
IRREDUCIBLE = {
    1: 0b11,
    2: 0b111,
    3: 0b1011,
    4: 0x13,
    5: 0x25,
    6: 0x43,
    7: 0x83,
    8: 0x11B,
    9: 0x211,
    10: 0x409,
    11: 0x805,
    12: 0x1053,
    13: 0x201B,
    14: 0x4443,
    15: 0x8003,
    16: 0x1100B,
}


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def _randint(high: int, generator: torch.Generator, *size: int) -> torch.Tensor:
    return torch.randint(0, high, size, generator=generator, dtype=torch.int64)


def poly_mod_p(coef: torch.Tensor, x: torch.Tensor, p: int) -> torch.Tensor:
    """Horner evaluation of sum_i coef[..., i] x^i mod p; coef (..., deg+1), x (d,) -> (..., d).
    int64 with p < 2^31 keeps every product in range."""
    out = torch.zeros(*coef.shape[:-1], x.shape[-1], dtype=torch.int64)
    for i in range(coef.shape[-1] - 1, -1, -1):
        out = (out * x + coef[..., i : i + 1]) % p
    return out


def bucket_hashes(
    n: int, in_dim: int, out_dim: int, generator: torch.Generator, prime: int = MERSENNE_31, max_tries: int = 1000
) -> torch.Tensor:
    """n independent 3-wise independent hashes h: [in_dim] -> [out_dim] (Construction C.3 step 1): a
    uniform degree-2 polynomial over F_prime, `mod out_dim`, the whole polynomial redrawn while any value
    falls in the rejection region [out_dim * floor(prime / out_dim), prime). Returns int64 (n, in_dim)."""
    check_int("in_dim", in_dim, 1)
    check_int("out_dim", out_dim, 1)
    if not is_prime(prime) or prime < max(in_dim, out_dim) or prime >= 2**31:
        fail("prime", prime, f"a prime in [max(in_dim, out_dim) = {max(in_dim, out_dim)}, 2^31)")
    x = torch.arange(in_dim, dtype=torch.int64)
    limit = out_dim * (prime // out_dim)
    out = torch.empty(n, in_dim, dtype=torch.int64)
    todo = torch.arange(n)
    for _ in range(max_tries):
        vals = poly_mod_p(_randint(prime, generator, len(todo), 3), x, prime)
        ok = (vals < limit).all(-1)
        out[todo[ok]] = vals[ok] % out_dim
        todo = todo[~ok]
        if len(todo) == 0:
            return out
    raise RuntimeError(f"bucket_hashes: no accepted polynomial in {max_tries} tries (prime={prime}, out_dim={out_dim})")


def bucket_hash(in_dim: int, out_dim: int, generator: torch.Generator, prime: int = MERSENNE_31) -> torch.Tensor:
    """One 3-wise independent bucket hash, int64 (in_dim,)."""
    return bucket_hashes(1, in_dim, out_dim, generator, prime)[0]


def gf2_mul(a: torch.Tensor, b: torch.Tensor, w: int) -> torch.Tensor:
    """Product in GF(2^w) = F_2[x] / (IRREDUCIBLE[w]); a, b int64 tensors with values < 2^w."""
    mod = IRREDUCIBLE[w]
    a, b = torch.broadcast_tensors(a, b)
    out = torch.zeros_like(a)
    a = a.clone()
    for i in range(w):
        out ^= a * ((b >> i) & 1)
        a = a << 1
        a ^= mod * ((a >> w) & 1)
    return out


def field_bits(in_dim: int) -> int:
    """Smallest w >= 1 with 2^w >= in_dim."""
    return max(1, (in_dim - 1).bit_length())


def sign_from_coefficients(coef: torch.Tensor, x: torch.Tensor, w: int) -> torch.Tensor:
    """(-1)^{lowest bit of b0 + b1 x + b2 x^2 + b3 x^3 in GF(2^w)}, Horner form; coef (..., 4) -> int64 (..., d)."""
    acc = torch.zeros(*coef.shape[:-1], x.shape[-1], dtype=torch.int64)
    for i in range(coef.shape[-1] - 1, -1, -1):
        acc = gf2_mul(acc, x, w) ^ coef[..., i : i + 1]
    return 1 - 2 * (acc & 1)


def sign_hashes(n: int, in_dim: int, generator: torch.Generator, w: int | None = None) -> torch.Tensor:
    """n independent 4-wise independent signs s: [in_dim] -> {+-1} (Construction C.3 step 2); float (n, in_dim)."""
    check_int("in_dim", in_dim, 1)
    w = field_bits(in_dim) if w is None else w
    if w not in IRREDUCIBLE or 2**w < in_dim:
        fail("w", w, f"an integer in [1, 16] with 2^w >= in_dim = {in_dim}")
    x = torch.arange(in_dim, dtype=torch.int64)
    return sign_from_coefficients(_randint(2**w, generator, n, 4), x, w).to(torch.get_default_dtype())


def sign_hash(in_dim: int, generator: torch.Generator, w: int | None = None) -> torch.Tensor:
    """One 4-wise independent sign hash, float (in_dim,)."""
    return sign_hashes(1, in_dim, generator, w)[0]


def count_sketch(x: torch.Tensor, h: torch.Tensor, s: torch.Tensor, out_dim: int) -> torch.Tensor:
    """c(x)_b = sum_{i: h(i) = b} s(i) x_i (eq. 39), over the last axis. h, s: (d',) or a batch
    (..., d') of independent hash pairs broadcast against x."""
    if h.ndim == 1:  # one hash pair: row adds over the leading axis of the transposed input (fast on CPU)
        flat = (x * s.to(x.dtype)).reshape(-1, x.shape[-1]).t()  # (..., d') -> (d', rows)
        out = flat.new_zeros(out_dim, flat.shape[1]).index_add(0, h, flat)
        return out.t().reshape(*x.shape[:-1], out_dim)  # (D, rows) -> (..., D)
    # a batch of hash pairs (..., d') broadcast against x (..., d')
    vals = x * s.to(x.dtype)
    hb = h.expand(vals.shape)  # (..., d') broadcast to x's leading dims
    return x.new_zeros(*vals.shape[:-1], out_dim).scatter_add(-1, hb, vals)


def tensor_sketch(x: torch.Tensor, h: torch.Tensor, s: torch.Tensor, out_dim: int) -> torch.Tensor:
    """TS_k(x; D) = IFFT(prod_t FFT(C_t x)) (eq. 42); h, s of shape (k, d') or (k, ..., d')."""
    if h.shape[0] == 1:  # TS_1 is the CountSketch itself
        return count_sketch(x, h[0], s[0], out_dim)
    spec = None
    for t in range(h.shape[0]):
        f = torch.fft.rfft(count_sketch(x, h[t], s[t], out_dim), n=out_dim, dim=-1)
        spec = f if spec is None else spec * f
    return torch.fft.irfft(spec, n=out_dim, dim=-1)


def count_sketch_matrices(h: torch.Tensor, s: torch.Tensor, out_dim: int, dtype: torch.dtype) -> torch.Tensor:
    """The CountSketch maps as dense matrices (k, d', D): C_t[i, h_t(i)] = s_t(i), so C_t x = x @ C_t (eq. 39)."""
    k, d = h.shape
    c = torch.zeros(k, d, out_dim, dtype=dtype, device=h.device)
    return c.scatter_(-1, h[..., None], s.to(dtype)[..., None])


def tensor_sketch_dense(x: torch.Tensor, h: torch.Tensor, s: torch.Tensor, out_dim: int) -> torch.Tensor:
    """TS_k(x; D) of eq. 42 for one hash set h, s (k, d'), with each CountSketch C_t x computed as the GEMM
    x @ C_t on its dense (d', D) matrix, then IFFT(prod_t FFT(.)) as in `tensor_sketch`. Same values (the
    matrix entries are 0 / +-1); on CPU the GEMM and its backward beat index_add / scatter_add and their
    index_select backward (~30% of the degree-2 sketch's forward+backward at n = 8192, d' = 64, D = 128)."""
    c = count_sketch_matrices(h, s, out_dim, x.dtype)
    if h.shape[0] == 1:  # TS_1 is the CountSketch itself
        return x @ c[0]
    spec = None
    for t in range(h.shape[0]):
        f = torch.fft.rfft(x @ c[t], n=out_dim, dim=-1)
        spec = f if spec is None else spec * f
    return torch.fft.irfft(spec, n=out_dim, dim=-1)


def tensor_sketch_explicit(x: torch.Tensor, h: torch.Tensor, s: torch.Tensor, out_dim: int) -> torch.Tensor:
    """C^{(x)k} vec(x^{(x)k}) with H = sum_t h_t mod D, S = prod_t s_t (eqs. 43-46); small d' only."""
    k, d = h.shape
    lift, hh, ss = x, h[0], s[0].to(x.dtype)
    for t in range(1, k):
        lift = (lift[..., :, None] * x[..., None, :]).reshape(*x.shape[:-1], -1)  # (..., d'^t, d') -> (..., d'^(t+1))
        hh = ((hh[:, None] + h[t][None, :]) % out_dim).reshape(-1)  # (d'^t, d') -> (d'^(t+1),)
        ss = (ss[:, None] * s[t].to(x.dtype)[None, :]).reshape(-1)  # (d'^t, d') -> (d'^(t+1),)
    return count_sketch(lift, hh, ss, out_dim)


def fit_length(g: torch.Tensor, n: int) -> torch.Tensor:
    """Zero-pad or truncate the last axis to length n (the fixed convention of Sec. 3.1 / H.5)."""
    d = g.shape[-1]
    if d >= n:
        return g[..., :n]
    return torch.nn.functional.pad(g, (0, n - d))


def convolution_power(g: torch.Tensor, degree: int, out_dim: int) -> torch.Tensor:
    """z^det = g * ... * g (k-fold circular convolution in R^D) = IFFT(FFT(pad(g))^k) (eq. 70)."""
    f = torch.fft.rfft(fit_length(g, out_dim), n=out_dim, dim=-1)
    return torch.fft.irfft(f**degree, n=out_dim, dim=-1)


def _generator(seed: int | torch.Generator | None) -> torch.Generator:
    """A given generator, or the stream of `seed` (None: seeded from torch's global generator, as nn.Linear draws)."""
    if isinstance(seed, torch.Generator):
        return seed
    return seeded_generator(seed)


class CountSketch(nn.Module):
    """x (..., in_dim) -> C x (..., out_dim); hashes fixed at construction and stored as buffers."""

    def __init__(self, in_dim: int, out_dim: int, seed: int | torch.Generator | None = None):
        super().__init__()
        self.in_dim, self.out_dim = check_int("in_dim", in_dim, 1), check_int("out_dim", out_dim, 1)
        g = _generator(seed)
        self.register_buffer("h", bucket_hash(in_dim, out_dim, g))
        self.register_buffer("s", sign_hash(in_dim, g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_last(x, self.in_dim)
        return count_sketch(x, self.h, self.s, self.out_dim)

    def matrix(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The explicit D x d' CountSketch matrix (eq. 38)."""
        c = torch.zeros(self.out_dim, self.in_dim, dtype=dtype)
        c[self.h, torch.arange(self.in_dim)] = self.s.to(dtype)
        return c


class TensorSketch(nn.Module):
    """Degree-k TensorSketch (Definition C.1): k independent (h_t, s_t) pairs (Assumption C.2.3)."""

    def __init__(self, in_dim: int, out_dim: int, degree: int, seed: int | torch.Generator | None = None):
        super().__init__()
        self.in_dim, self.out_dim = check_int("in_dim", in_dim, 1), check_int("out_dim", out_dim, 1)
        self.degree = check_int("degree", degree, 1)
        g = _generator(seed)
        self.register_buffer("h", bucket_hashes(degree, in_dim, out_dim, g))
        self.register_buffer("s", sign_hashes(degree, in_dim, g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_last(x, self.in_dim)
        return tensor_sketch(x, self.h, self.s, self.out_dim)

    def explicit(self, x: torch.Tensor) -> torch.Tensor:
        _check_last(x, self.in_dim)
        return tensor_sketch_explicit(x, self.h, self.s, self.out_dim)


def _check_last(x: torch.Tensor, dim: int) -> None:
    check_tensor("x", x)
    if x.ndim < 1 or x.shape[-1] != dim:
        fail("x", f"shape {tuple(x.shape)}", f"last dimension {dim}")

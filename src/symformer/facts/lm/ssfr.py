"""Synthetic Sequential Factual Recall (SSFR, fact-storing-mlps.txt Sec. 5.1, App. A.2.1).

A sequence is `junk prefix, key, junk suffix` and the model must predict `f(key)` after it. The vocabulary
is keys [0, F), values [F, F + |V|), junk [F + |V|, F + |V| + n_junk). |J| prefix/suffix pairs are drawn
once (lengths uniform in [min_len, max_len], tokens uniform over the junk tokens), so the task is the
finite set SSFR[f] = {(j_prefix, k, j_suffix) : k in keys, (j_prefix, j_suffix) in J} (App. A.2.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from symformer._rng import seeded_generator
from symformer._validation import check_float, check_int, fail
from symformer.facts.embeddings import random_fact_map, set_condition_number

# App. A.2.1: "prefix and suffixes have a length between 8 and 16", |J| = 16, 16 junk tokens
SSFR_DEFAULTS = {"n_junk": 16, "n_pairs": 16, "min_len": 8, "max_len": 16}


@dataclass
class SSFRTask:
    embeddings: torch.Tensor  # (vocab, d) transformer token embeddings (std normal, App. A.2.2 step 1)
    n_keys: int
    n_values: int
    n_junk: int
    facts: torch.Tensor  # (n_keys,) value index of each key
    prefixes: list[torch.Tensor]  # |J| junk prefixes (absolute token ids)
    suffixes: list[torch.Tensor]

    @property
    def vocab_size(self) -> int:
        return self.embeddings.shape[0]

    @property
    def d(self) -> int:
        return self.embeddings.shape[1]

    @property
    def value_slice(self) -> slice:
        """Token ids of the values: the candidates a prediction is decoded among (eq. 1)."""
        return slice(self.n_keys, self.n_keys + self.n_values)

    @property
    def key_embeddings(self) -> torch.Tensor:
        return self.embeddings[: self.n_keys]

    @property
    def value_embeddings(self) -> torch.Tensor:
        return self.embeddings[self.n_keys : self.n_keys + self.n_values]

    def mlp_embeddings(self) -> tuple[torch.Tensor, torch.Tensor]:
        """App. A.2.2 step 3: MLP keys are the transformer keys projected to the unit sphere (the frozen
        pre-MLP norm does that), MLP values are the transformer values."""
        K = self.key_embeddings
        return K / K.norm(dim=1, keepdim=True), self.value_embeddings

    def with_facts(self, facts: torch.Tensor) -> "SSFRTask":
        """The same embeddings and junk with another fact set f' (the swap of Sec. 5.1)."""
        if facts.shape != (self.n_keys,) or int(facts.min()) < 0 or int(facts.max()) >= self.n_values:
            fail("facts", f"shape {tuple(facts.shape)}", f"({self.n_keys},) value indices in [0, {self.n_values})")
        return SSFRTask(
            self.embeddings, self.n_keys, self.n_values, self.n_junk, facts.long(), self.prefixes, self.suffixes
        )

    def batch(self, keys: torch.Tensor, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded tokens (B, L), valid mask (B, L) and target value indices (B,) for (key, junk pair)
        indices. Left padding puts every prediction at the last position."""
        if "_templates" not in self.__dict__:
            self._build_templates()
        tokens = self._templates[pairs].clone()
        tokens[torch.arange(len(keys)), self._key_pos[pairs]] = keys
        return tokens, self._masks[pairs], self.facts[keys]

    def _build_templates(self) -> None:
        seqs = [torch.cat([p, torch.tensor([-1]), s]) for p, s in zip(self.prefixes, self.suffixes)]
        L = max(len(s) for s in seqs)
        self._templates = torch.zeros(len(seqs), L, dtype=torch.long)
        self._masks = torch.zeros(len(seqs), L, dtype=torch.bool)
        self._key_pos = torch.zeros(len(seqs), dtype=torch.long)
        for b, s in enumerate(seqs):
            self._templates[b, L - len(s) :] = s.clamp_min(0)
            self._masks[b, L - len(s) :] = True
            self._key_pos[b] = L - len(s) + len(self.prefixes[b])

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        keys = torch.randint(0, self.n_keys, (batch_size,), generator=generator)
        pairs = torch.randint(0, len(self.prefixes), (batch_size,), generator=generator)
        return self.batch(keys, pairs)

    def all_pairs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every (key, pair) index of SSFR[f]: n_keys * |J| sequences."""
        k = torch.arange(self.n_keys).repeat_interleave(len(self.prefixes))
        p = torch.arange(len(self.prefixes)).repeat(self.n_keys)
        return k, p


def _junk(n_pairs: int, n_junk: int, offset: int, lo: int, hi: int, g: torch.Generator) -> list[torch.Tensor]:
    lens = torch.randint(lo, hi + 1, (n_pairs,), generator=g)
    return [offset + torch.randint(0, n_junk, (int(n),), generator=g) for n in lens]


def make_ssfr(
    n_facts: int,
    d: int,
    kappa: float = 1.0,
    n_junk: int = 16,
    n_pairs: int = 16,
    min_len: int = 8,
    max_len: int = 16,
    seed: int | None = 0,
    dtype: torch.dtype = torch.float32,
) -> SSFRTask:
    """An SSFR task with F = n_facts keys and values, a random bijection f (App. A.2.2 step 2) and standard
    normal embeddings; kappa > 1 ill-conditions the key and the value blocks (kappa(K_t) = kappa(V_t),
    App. A.2.4) by the log-affine singular value rescaling of App. A.1.1."""
    check_int("n_facts", n_facts, 2)
    check_int("d", d, 2)
    check_float("kappa", kappa, 1.0)
    check_int("n_junk", n_junk, 1)
    check_int("n_pairs", n_pairs, 1)
    check_int("min_len", min_len, 0)
    check_int("max_len", max_len, min_len)
    g = seeded_generator(seed)
    E = torch.randn(2 * n_facts + n_junk, d, generator=g, dtype=torch.float64)
    if kappa != 1.0:
        E[:n_facts] = set_condition_number(E[:n_facts], kappa)
        E[n_facts : 2 * n_facts] = set_condition_number(E[n_facts : 2 * n_facts], kappa)
    facts = random_fact_map(n_facts, seed=g)
    pre = _junk(n_pairs, n_junk, 2 * n_facts, min_len, max_len, g)
    suf = _junk(n_pairs, n_junk, 2 * n_facts, min_len, max_len, g)
    return SSFRTask(E.to(dtype), n_facts, n_facts, n_junk, facts, pre, suf)

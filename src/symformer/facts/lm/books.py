"""A synthetic book -> author language-modelling task (fact-storing-mlps.txt App. A.3.1).

The paper draws one book per author from the Goodreads graph; nothing is downloaded here: titles and
names come from a self-contained generator, deterministic in the seed. A book and an author are one token
each (the fact set maps key tokens to value tokens, Sec. 2.1); template words are word tokens. A sequence is
`<bos> prefix book suffix author` and every next token is predicted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from symformer._rng import resolve_seed, seeded_generator
from symformer._validation import check_int, fail

# 16 prefix / suffix templates (App. A.3.1 gives the first two; the others are ours)
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("The author of", "is"),
    ("Who is the author of", "? It is"),
    ("The book", "was written by"),
    ("The writer of", "is"),
    ("Who wrote", "? It was"),
    ("The novel", "is by"),
    ("The creator of", "is"),
    ("Readers know that", "was written by"),
    ("It is known that the author of", "is"),
    ("Who penned", "? The answer is"),
    ("The person who wrote", "is"),
    ("The book titled", "has the author"),
    ("Everyone says that", "came from"),
    ("In the library ,", "is shelved under"),
    ("The famous book", "came from the pen of"),
    ("According to the catalogue ,", "was written by"),
)
_ON = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "th", "gr")
_NU = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
_CO = ("", "n", "r", "l", "s", "th", "m", "nd")
_TITLE = (
    "Silent",
    "Hidden",
    "Last",
    "Broken",
    "Golden",
    "Winter",
    "Distant",
    "Crimson",
    "Lost",
    "Quiet",
    "Iron",
    "Paper",
    "Glass",
    "Burning",
    "Hollow",
    "Bright",
)
_NOUN = (
    "River",
    "Garden",
    "Tower",
    "Letter",
    "Harbor",
    "Forest",
    "Mirror",
    "Kingdom",
    "Voyage",
    "Orchard",
    "Lantern",
    "Island",
    "Bridge",
    "Promise",
    "Shadow",
    "Season",
)


def _word(g: torch.Generator, syllables: int) -> str:
    parts = []
    for _ in range(syllables):
        parts.append(
            _ON[int(torch.randint(len(_ON), (1,), generator=g))]
            + _NU[int(torch.randint(len(_NU), (1,), generator=g))]
            + _CO[int(torch.randint(len(_CO), (1,), generator=g))]
        )
    return "".join(parts).capitalize()


def generate_names(n: int, kind: str, seed: int | None = 0) -> list[str]:
    """n distinct author names ('First Last') or book titles ('The Silent River of Koram'), from the seed."""
    g = seeded_generator(resolve_seed(seed) * 2 + (kind == "book"))
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        if kind == "author":
            s = f"{_word(g, 2)} {_word(g, 2 + int(torch.randint(2, (1,), generator=g)))}"
        else:
            a = _TITLE[int(torch.randint(len(_TITLE), (1,), generator=g))]
            b = _NOUN[int(torch.randint(len(_NOUN), (1,), generator=g))]
            s = f"The {a} {b} of {_word(g, 2)}"
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


@dataclass
class BooksTask:
    words: list[str]  # token 0 is <bos>, then template words
    books: list[str]
    authors: list[str]
    facts: torch.Tensor  # facts[i] = author index of book i (one book per author: a permutation)

    @property
    def n_words(self) -> int:
        return len(self.words)

    @property
    def vocab_size(self) -> int:
        return self.n_words + len(self.books) + len(self.authors)

    def book_token(self, i):
        return i + self.n_words

    def author_token(self, j):
        return j + self.n_words + len(self.books)

    @property
    def author_slice(self) -> slice:
        return slice(self.n_words + len(self.books), self.vocab_size)

    def with_facts(self, facts: torch.Tensor) -> "BooksTask":
        if facts.shape != self.facts.shape:
            fail("facts", f"shape {tuple(facts.shape)}", f"{tuple(self.facts.shape)}")
        return BooksTask(self.words, self.books, self.authors, facts.long())

    def _ids(self, text: str) -> list[int]:
        return [self.words.index(w) for w in text.split()]

    def sequences(
        self, books: torch.Tensor, templates: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded full sequences (B, L) `<bos> prefix book suffix author`, valid mask, and for each row
        the position of the last suffix token (where the author is predicted)."""
        rows = []
        for b, t in zip(books.tolist(), templates.tolist()):
            pre, suf = TEMPLATES[t]
            rows.append(
                [0, *self._ids(pre), self.book_token(b), *self._ids(suf), self.author_token(int(self.facts[b]))]
            )
        L = max(len(r) for r in rows)
        tok = torch.zeros(len(rows), L, dtype=torch.long)
        mask = torch.zeros(len(rows), L, dtype=torch.bool)
        for i, r in enumerate(rows):
            tok[i, L - len(r) :] = torch.tensor(r)
            mask[i, L - len(r) :] = True
        return tok, mask, torch.full((len(rows),), L - 2)

    def all_sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(book, template) indices of S_LM[f]: every book under every template."""
        n = len(self.books)
        return torch.arange(n).repeat_interleave(len(TEMPLATES)), torch.arange(len(TEMPLATES)).repeat(n)


def make_books(n_facts: int, seed: int | None = 0) -> BooksTask:
    """n_facts books, n_facts authors, one book per author, a random assignment (App. A.3.1)."""
    check_int("n_facts", n_facts, 2)
    seed = resolve_seed(seed)  # one integer for the assignment and both name lists
    words = ["<bos>"] + sorted({w for p, s in TEMPLATES for w in (p + " " + s).split()})
    g = seeded_generator(seed)
    facts = torch.randperm(n_facts, generator=g)
    return BooksTask(words, generate_names(n_facts, "book", seed), generate_names(n_facts, "author", seed), facts)

"""Experiment `extrapolation`: character LMs on tiny Shakespeare trained at context 64 with each positional part,
evaluated at contexts 64, 128, 256 and 512 on the validation split (bits per character and the ratio to 64).

No paper in this project claims anything about length extrapolation: this is our own measurement, made the
same way for every part. Every (part, seed) is one `Job` trained by `train.Trainer` (records under runs/,
`--resume`, `--jobs`). At every context the same validation characters are predicted: the first N + 1
characters of the split, N a multiple of the longest context, cut into non-overlapping windows of that context
(every position of a window is scored, so a longer context also means fewer short-context positions)."""

from __future__ import annotations

from symformer.experiments.extrapolation.claims import claims, summarize  # noqa: F401
from symformer.experiments.extrapolation.plan import (  # noqa: F401
    DATA,
    PARTS,
    ExtrapolationConfig,
    check_length,
    config_for,
)
from symformer.experiments.extrapolation.report import plot, run  # noqa: F401
from symformer.experiments.extrapolation.runs import (  # noqa: F401
    build_lm,
    check_context,
    context_bpc,
    lm_job,
    max_context,
    validation_ids,
)

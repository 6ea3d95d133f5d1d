"""The claims of experiment `precision`: one row per guarantee, the worst measured case against its goal."""

from __future__ import annotations

from symformer.experiments.precision.plan import HF_GOAL, ROTATION_GOAL, TRAIN_GOAL
from symformer.results import Claim, verdict


def _worst(values: dict[str, float]) -> tuple[str, float]:
    key = max(values, key=lambda k: values[k])
    return key, values[key]


def precision_claims(
    rot: dict, grad: dict, hf: dict, train: dict, finite: dict, anchor: dict, setting: str
) -> list[Claim]:
    """One row per guarantee; the verdict compares the worst measured case with the goal fixed above."""
    rows = []
    if rot:
        key, val = _worst({k: max(v, grad.get(k, 0.0)) for k, v in rot.items()})
        seen = ", ".join(f"{d} {v:.3g}" for d, v in anchor.items())
        rows.append(
            Claim(
                "P-rotation",
                "every positional part rotates q, k (adds its table) in bfloat16 / float16 "
                "within 2 eps(dtype) max|q| of float64, forward and backward, at positions up to 8192 and "
                "on a 64 x 64 grid, built in 16 bits / cast with .to() / under autocast",
                f"library guarantee (issue 40); anchor, HF Llama's RoPE cast with .to(): error / bound "
                f"{seen or 'not measured'}",
                f"worst error / bound {val:.3g} ({key}); {sum(v <= ROTATION_GOAL for v in rot.values())} of "
                f"{len(rot)} cells within",
                verdict(val <= ROTATION_GOAL),
                "holds if every cell's error / bound <= 1",
                setting,
                "-",
            )
        )
    if hf:
        key, val = _worst(hf)
        rows.append(
            Claim(
                "P-hf",
                "HF models patched with symformer's RoPE in bfloat16 / float16 are as accurate as "
                "the native 16-bit model",
                "library guarantee (issue 40)",
                f"worst patched / native logit error {val:.3g} ({key})",
                verdict(val <= HF_GOAL),
                f"holds if every family and dtype has ratio <= {HF_GOAL}",
                setting,
                "-",
            )
        )
    if train:
        key, val = _worst(train)
        bad = sorted(k for k, ok in finite.items() if not ok)
        rows.append(
            Claim(
                "P-train",
                "a 16-bit training step of every positional x attention combination is finite "
                "and within 2% of the float32 step's loss",
                "library guarantee (issue 40)",
                f"worst relative loss difference {val:.3g} ({key}); non-finite: {bad or 'none'}",
                verdict(val <= TRAIN_GOAL and not bad),
                f"holds if every combination is finite with difference <= {TRAIN_GOAL}",
                setting,
                "-",
            )
        )
    return rows

"""The arms of the OOD translation study (ood.py): one positional encoding each, as typed fields; the name that its
records, metrics and claims carry is built from them."""

from __future__ import annotations

from dataclasses import dataclass

from symformer._validation import check_float, fail

# named on purpose, not every registered part: the OOD study (T8'.12, T8'.16/T8'.21, T8'.22) compares ESPR with a
# learned absolute PE and the two commuting rotations its claims are stated against, RoPE and STRING
POSITIONALS = ("learned", "rope", "string", "espr")


@dataclass(frozen=True)
class Arm:
    """One positional encoding of the study. `name`, built from the fields, is what its records, metrics and claims
    carry. `penalty` (ESPR only): the weight on eps_comm and eta_mix (T6'.0) from a commuting init, pulling the
    generators back towards STRING; None: free ESPR, non-commuting from the start and unpenalised."""

    positional: str
    penalty: float | None = None

    def __post_init__(self) -> None:
        if self.positional not in POSITIONALS:
            fail("arm.positional", self.positional, f"one of {', '.join(POSITIONALS)}")
        if self.penalty is not None:
            if self.positional != "espr":
                fail("arm.penalty", self.penalty, "None for a non-ESPR arm")
            check_float("arm.penalty", self.penalty, 0.0)

    @property
    def is_espr(self) -> bool:
        return self.positional == "espr"

    @property
    def name(self) -> str:
        if not self.is_espr:
            return self.positional
        return "espr_free" if self.penalty is None else f"espr_pen{self.penalty:g}"


LEARNED, ROPE, STRING = Arm("learned"), Arm("rope"), Arm("string")
ESPR_PEN1, ESPR_FREE = Arm("espr", penalty=1.0), Arm("espr")
ARMS = (LEARNED, ROPE, STRING, ESPR_PEN1, ESPR_FREE)

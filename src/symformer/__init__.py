"""symformer: structured positional rotations, PLASH attention, fact-storing MLPs and
teleportation as drop-in PyTorch modules, with a reproduction report of the source papers."""

from __future__ import annotations

__version__ = "0.1.0"

from symformer import attention, facts, models, positional  # noqa: E402,F401  (registers the parts)
from symformer._validation import get_value_checks, set_value_checks, value_checks  # noqa: E402,F401
from symformer.registry import ATTENTION, CALLBACKS, MLP, POSITIONAL  # noqa: E402,F401

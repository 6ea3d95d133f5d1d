"""Where data files live: `--data-dir`, else `SYMFORMER_DATA`, else ./data or ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SYMFORMER_DATA"


class MissingDataError(FileNotFoundError):
    """A data file is not where the options say; the message is one line naming both places."""


def data_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    if explicit is not None:
        return Path(explicit)
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    for cand in (Path.cwd() / "data", Path.cwd().parent / "shared" / "data"):
        if cand.is_dir():
            return cand
    return None


def data_file(name: str, explicit: str | os.PathLike | None = None) -> Path:
    d = data_dir(explicit)
    if d is not None and (d / name).is_file():
        return d / name
    where = f"{d}" if d is not None else "no data directory"
    raise MissingDataError(
        f"data file {name} not found in {where}: put it there or point --data-dir or the {ENV_VAR} environment "
        "variable at the folder holding it"
    )

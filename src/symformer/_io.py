"""Output files: atomic torch saves and an up-front check that an output folder can be written.

`check_writable_dir` runs before any work starts (train, reproduce, bench, facts), so an unwritable
`--out` costs the user one line, not a finished run that cannot be saved."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


def save_atomic(obj: Any, path: str | os.PathLike) -> None:
    """torch.save to a temporary file in the same folder, fsync, then os.replace: a reader (or a resumed
    run after a kill) sees the old file or the new one, never half of one."""
    import torch  # here, not at import time: the CLI imports this module before it needs torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _probe(folder: Path) -> None:
    """Create and remove a file in `folder` (permissions alone do not tell: root ignores them, and a
    read-only mount refuses even root)."""
    fd, name = tempfile.mkstemp(prefix=".symformer-write-test-", dir=folder)
    os.close(fd)
    os.unlink(name)


def check_writable_dir(out: str | os.PathLike, option: str = "--out") -> Path:
    """Create `out` if needed and check a file can be written there; ValueError naming `option` else."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{option}: got {str(out)!r}, expected a folder (a file of that name is in the way)")
    blocker = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ValueError(f"{option}: got {str(out)!r}, expected a folder we can create ({blocker} is a file)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        _probe(out)
    except OSError as e:
        raise ValueError(
            f"{option}: cannot write to {str(out)!r} ({e.strerror or e}); expected a writable folder"
        ) from None
    return out


@contextlib.contextmanager
def output_dir(out: str | os.PathLike, option: str = "--out") -> Iterator[Path]:
    """`check_writable_dir(out)` for the body of a command; if the body fails, the folders this call created are
    removed again while they are still empty, so a failed run leaves nothing on disk that was not there."""
    out = Path(out)
    created = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    path = check_writable_dir(out, option)
    try:
        yield path
    except BaseException:
        for folder in created:
            try:
                folder.rmdir()
            except OSError:  # not empty (the run wrote something), or gone: keep the rest
                break
        raise


def check_writable_file(path: str | os.PathLike, option: str = "--out") -> Path:
    """`path` can be created or replaced: not a folder, and its folder writable."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option}: got {str(path)!r}, expected a file name (a folder of that name is in the way)")
    folder = path.parent
    blocker = next((p for p in [folder, *folder.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ValueError(f"{option}: got {str(path)!r}, expected a file name in a folder ({blocker} is a file)")
    try:
        check_writable_dir(folder, option)
    except ValueError as e:
        reason = str(e).split(": ", 1)[1]
        raise ValueError(f"{option}: got {str(path)!r}, expected a file we can write ({reason})") from None
    return path

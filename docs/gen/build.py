"""`make docs`: build the site into out/site with warnings as errors (mkdocs build --strict, mkdocs.yml).

Without the `docs` extra it prints one line naming the extra and exits 2, as the CLI does for bad input."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: importable name of each package the `docs` extra installs
NEEDED = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_gen_files")


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def missing() -> list[str]:
    return [name for name in NEEDED if not _importable(name)]


def main() -> int:
    gone = missing()
    if gone:
        print(f"error: make docs needs the docs extra (missing {', '.join(gone)}): pip install 'symformer[docs]'")
        return 2
    env = dict(os.environ, DISABLE_MKDOCS_2_WARNING="true", NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    rc = subprocess.call([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"], cwd=ROOT, env=env)
    if rc == 0:
        print(f"docs built into out/site in {time.perf_counter() - t0:.1f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())

"""Figures. `pyplot()` gives every experiment matplotlib on the headless Agg backend; `size_vs_facts` is the figure
the fact-storing experiments share: parameters against the number of facts on log-log axes, with the
information-theoretic F log2 F line (1 bit per parameter) that fact-storing-mlps.txt compares sizes with (Fig. 2c
for storage, Fig. 3a for usable MLPs inside the transformer)."""

from __future__ import annotations

import math
from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (reports are written headless). Imported on call: the CLI
    does not pay for matplotlib unless a figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_STYLES = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."))


def size_vs_facts(path: Path, series: dict[str, list[tuple[int, int | None]]], ylabel: str, title: str) -> None:
    """Write the figure to `path`; `series` maps a label to its (F, parameters) points (a None size, where no
    size was found, is left out)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    # one colour per method (a label's first word), one marker and line style per the rest ("d=64"): the
    # default cycle of 10 colours would repeat across the 18 series of the fact-storing paper's Fig. 2c form
    methods = list(dict.fromkeys(label.split(" ")[0] for label in series))
    rests = list(dict.fromkeys(label.partition(" ")[2] for label in series))
    for label, pts in series.items():
        pts = sorted(p for p in pts if p[1])
        k = rests.index(label.partition(" ")[2]) % len(_STYLES)
        if pts:
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                color=plt.get_cmap("tab10")(methods.index(label.split(" ")[0]) % 10),
                marker=_STYLES[k][0],
                linestyle=_STYLES[k][1],
                label=label,
            )
    Fs = sorted({F for pts in series.values() for F, _ in pts})
    if Fs:
        ax.plot(Fs, [F * math.log2(F) for F in Fs], "k--", label="F log2 F (info bound, 1 bit/param)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("facts F")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: the series fill the axes
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""The figures of experiment `teleport`."""

from __future__ import annotations

from pathlib import Path

from symformer.experiments.plots import pyplot


def figures(out_dir: Path, runs: dict, lm: dict) -> list[str]:
    """Accuracy curves, early gradient norms and (with the LM part) the LM's validation loss; the file names."""
    plt = pyplot()
    names = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=90)
        plt.close(fig)
        names.append(name)

    datasets = sorted({k[0] for k in runs})
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 4), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        for (d, pe, arm, opt), rs in sorted(runs.items()):
            if d != ds or opt != "sgd" or arm not in ("base", "tele", "guarded"):
                continue
            ax.plot(
                range(1, len(rs[0]["curve"]) + 1),
                rs[0]["curve"],
                label=f"{pe}/{arm}",
                ls={"tele": ":", "base": "--"}.get(arm, "-"),
            )
        ax.set(title=f"{ds}: validation accuracy (seed 0)", xlabel="epoch", ylabel="accuracy")
        ax.legend(fontsize=7)
    save(fig, "teleport_accuracy.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in [("mnist1d", "rope", a, "sgd") for a in ("base", "tele", "guarded", "guard_a0.65", "zhao")]:
        if key in runs:
            n = runs[key][0]["grad_norms"][:60]
            ax.plot(range(len(n)), n, label="/".join(key[1:3]))
    ax.set(title="MNIST-1D RoPE: gradient norm (first steps)", xlabel="step", ylabel="||grad||")
    ax.legend()
    save(fig, "teleport_gradnorm.png")
    if lm:
        fig, ax = plt.subplots(figsize=(6, 4))
        for key, r in lm.items():
            ax.plot([p[0] for p in r["points"]], [p[1] for p in r["points"]], label=key)
        ax.set(title="tiny Shakespeare: validation loss", xlabel="step", ylabel="loss (nats)")
        ax.legend()
        save(fig, "teleport_lm_loss.png")
    return names

"""Cross-entropy on dot-product logits g(K) V^T, fused and blocked (the GD fact MLPs' objective, App. A.1.3).

Why hand-written: at F = 4096 facts the logits are a 4096 x 4096 matrix, and the GD MLP trains on them for up
to 20,000 full-batch epochs. Autograd's `cross_entropy(out @ V.T, f)` writes that matrix, its log-softmax and
their gradients to memory every epoch (half of an epoch's time at F = 4096). Here the forward pass works on
blocks of rows that stay in cache: logits, a stable softmax in place, the loss, how many rows decode to their
fact (eq. 1, argmax over the values), and the gradient (softmax - one-hot) @ V, which backward only scales.
Values and gradients match autograd's to rounding (tests: float64, gradcheck)."""

from __future__ import annotations

import torch

from symformer._validation import check_int, fail

#: rows per block: a 128 x 4096 float32 block of logits is 2 MB, large enough that the per-block Python work is
#: small beside the block's GEMMs (the `facts` bench suite times a GD epoch against autograd's loss:
#: gd_epoch_fused_vs_autograd on docs/performance.md)
BLOCK_ROWS = 128
#: below this many logits the per-block Python work costs more than the fused blocks save, so autograd's path is taken
FUSED_MIN_LOGITS = 512 * 512


class _DotProductCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out: torch.Tensor, values: torch.Tensor, targets: torch.Tensor, block: int):
        n = out.shape[0]
        loss = out.new_zeros(())
        correct = torch.zeros((), dtype=torch.long, device=out.device)
        grad_out = torch.empty_like(out)
        grad_v = torch.zeros_like(values) if ctx.needs_input_grad[1] else None
        for s in range(0, n, block):
            o, t = out[s : s + block], targets[s : s + block]
            rows = torch.arange(o.shape[0], device=out.device)
            logits = o @ values.T
            top, arg = logits.max(1)
            correct += (arg == t).sum()
            loss += (top - logits[rows, t]).sum()  # log-sum-exp - target logit = top + log z - target
            p = logits.sub_(top[:, None]).exp_()  # in place: the block is not needed again
            z = p.sum(1)
            loss += z.log().sum()
            p.div_(z[:, None])
            p[rows, t] -= 1.0  # softmax - one-hot: d loss_i / d logits_i
            torch.mm(p, values, out=grad_out[s : s + block])
            if grad_v is not None:
                grad_v.addmm_(p.T, o)
        ctx.save_for_backward(grad_out.div_(n), None if grad_v is None else grad_v.div_(n))
        ctx.mark_non_differentiable(correct)
        return loss / n, correct

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss, _grad_correct):
        grad_out, grad_v = ctx.saved_tensors
        return grad_loss * grad_out, None if grad_v is None else grad_loss * grad_v, None, None


def dot_product_cross_entropy(
    out: torch.Tensor, values: torch.Tensor, targets: torch.Tensor, block_rows: int = BLOCK_ROWS, check: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy of the logits out @ values.T against `targets`, how many rows' argmax is their
    target). Same value and gradients as `F.cross_entropy(out @ values.T, targets)` (first order only).
    `check=False` skips the argument checks (a training loop that validated its data once calls it per epoch)."""
    if check:
        _check(out, values, targets, block_rows)
    if out.shape[0] * values.shape[0] < FUSED_MIN_LOGITS:  # small: autograd's few large ops beat the block loop
        logits = out @ values.T
        return torch.nn.functional.cross_entropy(logits, targets), (logits.detach().argmax(1) == targets).sum()
    return _DotProductCE.apply(out, values, targets, block_rows)


def _check(out, values, targets, block_rows) -> None:
    if not isinstance(out, torch.Tensor) or out.ndim != 2:
        fail("out", getattr(out, "shape", type(out).__name__), "a 2-D tensor (n, d)", TypeError)
    if not isinstance(values, torch.Tensor) or values.ndim != 2 or values.shape[1] != out.shape[1]:
        fail("values", getattr(values, "shape", type(values).__name__), f"a 2-D tensor (F, {out.shape[1]})")
    if values.dtype != out.dtype:
        fail("values", values.dtype, f"the dtype of out, {out.dtype}", TypeError)
    if not isinstance(targets, torch.Tensor) or targets.dtype != torch.long or targets.shape != out.shape[:1]:
        fail(
            "targets",
            getattr(targets, "shape", type(targets).__name__),
            f"a LongTensor of shape ({len(out)},)",
            TypeError,
        )
    if values.device != out.device or targets.device != out.device:
        fail("values/targets", f"devices {values.device}/{targets.device}", f"out's device {out.device}")
    if len(targets) and (int(targets.min()) < 0 or int(targets.max()) >= values.shape[0]):
        fail("targets", f"range [{int(targets.min())}, {int(targets.max())}]", f"indices in [0, {values.shape[0]})")
    check_int("block_rows", block_rows, 1)

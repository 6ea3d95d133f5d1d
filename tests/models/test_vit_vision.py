"""The ViT a vision user expects (issue 62): C-channel patches, prefix (class / register) tokens that no rotation
moves, padded batches of images of several sizes, and a change of image size at inference."""

from __future__ import annotations

import pytest
import torch

from symformer.data.digits import pad_tokens, patchify
from symformer.models import TransformerConfig
from symformer.models.transformer import attention_layers
from symformer.models.vit import ViTClassifier
from symformer.positional import POSITIONAL, grid_positions, rotary_parts

F64 = torch.float64


def _cfg(positional="rope", **kw):
    kw.setdefault("positional_kwargs", {"mode": "mixed"} if positional == "rope" else {})
    return TransformerConfig(d_model=16, n_heads=2, n_layers=2, coord_dim=2, positional=positional, max_len=16, **kw)


def test_patchify_channels_is_a_strided_conv():
    x = torch.randn(2, 3, 9, 8, dtype=F64)
    tokens, pos = patchify(x, 4)
    conv = torch.nn.Conv2d(3, 5, 4, stride=4, bias=False).double()
    ref = conv(x).flatten(2).transpose(1, 2)  # (B, 5, 2, 2) -> (B, 4, 5), row-major patches
    assert torch.allclose(tokens @ conv.weight.reshape(5, -1).T, ref, atol=1e-12)
    assert pos.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    one, _ = patchify(x[:, 0], 4)  # (B, H, W) images: the single-channel patches as before
    assert torch.equal(one, tokens[..., :16])
    with pytest.raises(ValueError, match="images"):
        patchify(torch.randn(4, 4), 2)


@pytest.mark.parametrize("name", sorted(rotary_parts()))
def test_prefix_position_zero_is_the_identity_rotation(name):
    """Prefix tokens sit at position 0 for the rotary parts: R(0) = I for every registered part but ESPR, whose
    R(0) = exp(0) P is its post-rotation P (T3.5), a fixed basis change of the prefix tokens' q / k."""
    part = POSITIONAL.build(name, head_dim=8, coord_dim=2, n_heads=2, d_model=16).double()
    with torch.no_grad():
        for p in part.parameters():
            p.add_(0.1 * torch.randn_like(p))
    r0 = part.matrix(torch.zeros(1, 2, dtype=F64))
    ref = part.post_rotation() if name == "espr" else torch.eye(8, dtype=F64)
    assert torch.allclose(r0, ref.expand_as(r0), atol=1e-12)


def test_prefix_tokens_are_not_rotated_and_pool_reads_the_class_token():
    torch.manual_seed(0)
    model = ViTClassifier(_cfg(), token_dim=4, n_classes=3, n_prefix=3).double()
    seen = []
    rot = attention_layers(model)[0].rotary
    rot.register_forward_hook(lambda m, args, out: seen.append((args[0], out[0])))
    tokens, pos = patchify(torch.randn(2, 6, 6, dtype=F64), 2)
    logits = model(tokens, pos)
    q_in, q_out = seen[0]
    assert q_in.shape[2] == 9 + 3 and torch.equal(q_out[:, :, :3], q_in[:, :, :3])  # the prefix is untouched
    assert not torch.allclose(q_out[:, :, 4:], q_in[:, :, 4:])  # the patches rotate
    assert logits.shape == (2, 3) and model.pool == "cls"
    learned = ViTClassifier(_cfg("learned"), token_dim=4, n_classes=3, n_prefix=1).double()
    assert learned(tokens, pos).shape == (2, 3)


@pytest.mark.parametrize("positional", ["rope", "string", "learned"])
def test_padded_batch_of_several_image_sizes_equals_each_image_alone(positional):
    torch.manual_seed(0)
    model = ViTClassifier(_cfg(positional), token_dim=4, n_classes=3, n_prefix=1).double().eval()
    images = [torch.randn(1, 8, 8, dtype=F64), torch.randn(1, 6, 4, dtype=F64)]
    parts = [patchify(im, 2) for im in images]
    tok, pos, mask = pad_tokens([t[0] for t, _ in parts], [p for _, p in parts])
    batched = model(tok, pos, mask)
    for i, (t, p) in enumerate(parts):
        assert torch.allclose(batched[i], model(t, p)[0], atol=1e-12)
    mean_model = ViTClassifier(_cfg(positional), token_dim=4, n_classes=3).double().eval()
    assert torch.allclose(mean_model(tok, pos, mask)[1], mean_model(*parts[1])[0], atol=1e-12)


def test_change_of_image_size_at_inference():
    torch.manual_seed(0)
    model = ViTClassifier(_cfg(), token_dim=4, n_classes=3).double()
    tokens, _ = patchify(torch.randn(2, 12, 12, dtype=F64), 2)  # trained on 4 x 4 patches, tested on 6 x 6
    own = model(tokens, grid_positions(6, dtype=F64))
    rescaled = model(tokens, grid_positions(6, ref_size=4, dtype=F64))
    assert own.shape == rescaled.shape == (2, 3) and not torch.allclose(own, rescaled)


def test_vit_bad_input():
    model = ViTClassifier(_cfg(), token_dim=4, n_classes=3, n_prefix=1)
    tokens, pos = patchify(torch.randn(2, 4, 4), 2)
    with pytest.raises(ValueError, match="positions.*4 patch tokens.*1 prefix"):
        model(tokens, torch.cat((torch.zeros(1, 2), pos)))  # a position for the prefix token too
    with pytest.raises(ValueError, match="positions.*coordinate dimension C = 2"):
        model(tokens, torch.zeros(4, 3))
    with pytest.raises(ValueError, match="mask"):
        model(tokens, pos, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="n_prefix"):
        ViTClassifier(_cfg(), token_dim=4, n_classes=3, n_prefix=-1)
    with pytest.raises(ValueError, match="pool"):
        ViTClassifier(_cfg(), token_dim=4, n_classes=3, pool="cls")

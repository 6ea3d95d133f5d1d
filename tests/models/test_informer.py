"""The Informer backbone of the PLASH forecasting protocol: distilling, masks, post-LN, explicit options."""

from __future__ import annotations

import pytest
import torch

from symformer.models.informer import DistilLayer, Informer, InformerConfig
from symformer.registry import ATTENTION
from symformer.train.presets import INFORMER_LENGTHS, build, informer_lengths, resolve

SMALL = dict(d_model=16, n_heads=2, e_layers=2, d_layers=1, d_ff=32)


def _model(**kw) -> Informer:
    torch.manual_seed(0)
    return Informer(InformerConfig(**{**SMALL, **kw}), n_vars=3, seq_len=24, label_len=12, pred_len=6).eval()


def _inputs(b=2):
    g = torch.Generator().manual_seed(1)
    return (
        torch.randn(b, 24, 3, generator=g),
        torch.rand(b, 24, 4, generator=g) - 0.5,
        torch.rand(b, 18, 4, generator=g) - 0.5,
    )


def test_distilling_halves_the_encoder_sequence_and_is_on_by_default():
    x, xt, _ = _inputs()
    m = _model()
    assert InformerConfig().distil and len(m.distil) == 1
    kinds = {type(c).__name__ for c in m.distil[0].modules()}
    assert {"Conv1d", "BatchNorm1d", "MaxPool1d"} <= kinds and m.distil[0].conv.padding_mode == "circular"
    assert m.encode(x, xt).shape == (2, 12, 16)  # 24 -> 12 through MaxPool(3, stride 2)
    assert _model(distil=False).encode(x, xt).shape == (2, 24, 16)
    assert isinstance(m.distil[0], DistilLayer)


def test_token_embedding_is_a_circular_conv_of_kernel_3():
    emb = _model().enc_embed.token
    assert isinstance(emb, torch.nn.Conv1d) and emb.kernel_size == (3,) and emb.padding_mode == "circular"


def test_encoder_layers_are_post_ln():
    m = _model()
    x, xt, _ = _inputs()
    h = m.encoder[0](m.enc_embed(x, xt))
    # the layer ends with LayerNorm(x + FFN(x)) at its init (weight 1, bias 0): every token normalised
    assert torch.allclose(h.mean(-1), torch.zeros(2, 24), atol=1e-5)
    assert torch.allclose(h.var(-1, unbiased=False), torch.ones(2, 24), atol=1e-3)


@pytest.mark.parametrize("attention", ["softmax", "favor", "plash"])
def test_decoder_self_attention_is_causal(attention):
    akw = {"dropout": 0.0, **({"M": 4, "D_k": 8} if attention == "plash" else {})}
    m = _model(mix=False, attention=attention, attention_kwargs=akw, dropout=0.0)
    x, xt, yt = _inputs()
    mem = m.encode(x, xt)
    yt2 = yt.clone()
    yt2[:, -1] += 1.0  # change only the last decoder step
    h1, h2 = (m.decoder[0](m.dec_embed(torch.cat([x[:, -12:], x.new_zeros(2, 6, 3)], 1), t), mem) for t in (yt, yt2))
    assert torch.allclose(h1[:, :-1], h2[:, :-1], atol=1e-5)
    assert not torch.allclose(h1[:, -1], h2[:, -1], atol=1e-5)


def test_forward_shape_and_time_marks_required():
    m = _model()
    x, xt, yt = _inputs()
    assert m(x, xt, yt).shape == (2, 6, 3)
    with pytest.raises(ValueError, match="x_time"):
        m(x, None, yt)
    with pytest.raises(ValueError, match="y_time"):
        m(x, xt, yt[:, :5])


def test_unknown_options_are_errors():
    with pytest.raises(TypeError, match="bogus"):
        _model(attention_kwargs={"bogus": 1})
    with pytest.raises(ValueError, match="dropout"):
        _model(attention="favor")  # the Informer's attention dropout 0.05 is rejected, not dropped
    with pytest.raises(ValueError, match="activation"):
        InformerConfig(activation="tanh")


@pytest.mark.parametrize("name", ATTENTION.names())
def test_every_attention_accepts_or_rejects_dropout(name):
    try:
        core = ATTENTION.build(name, head_dim=8, n_heads=2, d_model=16, dropout=0.1)
    except ValueError as e:
        assert "dropout" in str(e)
    else:
        assert core.dropout == 0.1


def test_per_layer_random_structure_differs():
    m = _model(attention="favor", attention_kwargs={"dropout": 0.0})
    feats = [mod.features for mod in m.modules() if hasattr(mod, "features") and hasattr(mod, "redraw")]
    assert len(feats) == 4 and not torch.equal(feats[0], feats[1])


def test_horizon_lengths_and_unknown_horizon():
    assert informer_lengths(24) == (48, 48) and INFORMER_LENGTHS[720] == (336, 336)
    with pytest.raises(ValueError, match="pred_len"):
        informer_lengths(30)
    with pytest.raises(ValueError, match="pred_len"):
        build(resolve("etth1-informer", {"data": {"pred_len": 30}}))


def test_preset_builds_an_informer(data_dir):
    model, task, split, tcfg = build(resolve("etth1-informer", {"data": {"pred_len": 48}}), data_dir=data_dir)
    assert isinstance(model, Informer) and split.meta["seq_len"] == 96 and split.meta["label_len"] == 48
    assert tcfg.patience == 3 and tcfg.schedule == "informer" and model.cfg.dropout == 0.05
    b = split.train
    assert model.eval()(b.x[:2], b.x_time[:2], b.y_time[:2]).shape == (2, 48, 7)
    with pytest.raises(ValueError, match="arch"):
        build(resolve("etth1-informer", {"model": {"arch": "lstm"}}), data_dir=data_dir)

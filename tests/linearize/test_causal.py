"""symformer.linearize on symformer's own CausalLM (issue 64 item 1's second input): stage 1 lowers the transfer loss,
STRING at P = I starts as the model's RoPE, the linearized model saves in CausalLM's own file, reloads exactly
(float64) and generates with constant-size states as its full causal forward's greedy continuation, a killed run
resumes to the uninterrupted result, and bad input is a ValueError naming the argument."""

import pytest
import torch

pytest.importorskip("peft")

from tests.linearize._common import OPTIONS, random_split, resumes_to_the_uninterrupted_result  # noqa: E402

from symformer.data.base import Split, TensorData  # noqa: E402
from symformer.linearize import (  # noqa: E402
    LinearizeConfig,
    capture,
    linearize,
    load_lm,
    recipe,
    save,
    save_lm,
    student_of,
    transfer_loss,
)
from symformer.models import CausalLM, TransformerConfig  # noqa: E402

VOCAB, BLOCK = 20, 12


def _lm(n_layers=2, dtype=torch.float64, **kw):
    torch.manual_seed(0)
    return CausalLM(TransformerConfig(d_model=16, n_heads=2, n_layers=n_layers, **kw), VOCAB).to(dtype).eval()


def _split():
    return random_split(block=BLOCK, vocab=VOCAB)


def _config(attention="favor", positional="rope", **kw):
    base = dict(stage1_tokens=4 * BLOCK * 4, stage2_tokens=4 * BLOCK * 3, batch_size=4, eval_every=2, eval_batches=1)
    return LinearizeConfig(attention, positional, core_options=OPTIONS[attention], **{**base, **kw})


@pytest.mark.parametrize("attention", ["favor", "plash"])
def test_stage1_lowers_the_transfer_loss(attention):
    teacher, data = _lm(1, torch.float32), _split()
    cfg = _config(attention, stage1_tokens=4 * BLOCK * 8, stage2_tokens=4 * BLOCK, lr1=1e-2)

    def loss_of(student):
        with torch.no_grad(), capture(teacher) as rec:
            teacher(data.train.x[:8])
            return float(transfer_loss(student, rec))

    before = loss_of(student_of(teacher, cfg))
    assert before > 0  # the swap changes the attention (a loss that is 0 could not fall)
    after = loss_of(linearize(teacher, data, cfg).model)
    assert after < 0.8 * before, (before, after)


def test_string_starts_as_the_models_rope():
    teacher, ids = _lm(), _split().val.x[:2]
    rope, string = (student_of(teacher, _config("favor", p)) for p in ("rope", "string"))
    assert string.cfg.positional == "string" and rope.cfg.positional == "rope"
    with torch.no_grad():
        assert (string(ids) - rope(ids)).abs().max() <= 1e-12
    with torch.no_grad():  # negative control: P away from I rotates otherwise
        for blk in string.encoder.blocks:
            blk.attn.rotary.skew_param.add_(0.3 * torch.randn_like(blk.attn.rotary.skew_param))
        assert (string(ids) - rope(ids)).abs().max() > 1e-4


@pytest.mark.parametrize("attention,positional", [("favor", "string"), ("plash", "rope")])
def test_saved_model_reloads_exactly_and_generates_with_states(tmp_path, attention, positional):
    teacher, data = _lm(), _split()
    model = linearize(teacher, data, _config(attention, positional)).model
    assert isinstance(model, CausalLM) and not any("lora" in n for n, _ in model.named_parameters())
    assert model.cfg.attention == recipe.CORES[attention]
    path = save(model, tmp_path / "model")
    loaded = load_lm(tmp_path / "model")
    ids = data.val.x[:2]
    with torch.no_grad():
        assert (loaded(ids) - model(ids)).abs().max() <= 1e-10
    assert type(loaded.init_states()[0]).__name__ == {"favor": "FavorState", "plash": "PlashState"}[attention]
    seq = loaded.generate(ids[:, :5], max_new_tokens=6, top_k=1)  # one step per token, the cores' states
    with torch.no_grad():  # greedy decoding with the states equals the full causal forward's argmax
        assert torch.equal(loaded(seq[:, :-1])[:, 4:].argmax(-1), seq[:, 5:])
    torch.save({"format": "something else"}, path)
    with pytest.raises(ValueError, match=r"^path: got .*expected a symformer-causal-lm file of version 1"):
        load_lm(path)


def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    teacher, data = _lm(1), _split()
    cfg = _config("plash", "string", eval_every=3, checkpoint_every=2)
    resumes_to_the_uninterrupted_result(teacher, data, cfg, tmp_path, monkeypatch, 4)  # killed in stage 2's step 3
    with pytest.raises(ValueError, match=r"^resume: got .*a checkpoint of another run \(model differs\)"):
        linearize(_lm(2), data, cfg, out=tmp_path / "run", resume=True)


def test_bad_input_is_refused_by_name(tmp_path):
    data, teacher = _split(), _lm(1)
    with pytest.raises(ValueError, match=r"^model: got \"a CausalLM with attention 'favor'\", expected a softmax"):
        linearize(_lm(1, attention="favor"), data, _config())
    with pytest.raises(ValueError, match=r"^positional: got 'string', expected 'rope' for a CausalLM with positional"):
        linearize(_lm(1, positional="learned"), data, _config("favor", "string"))
    empty = Split(TensorData(data.train.x[:0], data.train.y[:0]), data.val, data.test, {})
    with pytest.raises(ValueError, match=r"^data: got 'an empty train set'"):
        linearize(teacher, empty, _config())
    with pytest.raises(ValueError, match=r"^stage1_tokens: got 5, expected >= 48 tokens"):
        linearize(teacher, data, _config(stage1_tokens=5))
    with pytest.raises(ValueError, match=r"^path: got .*expected a CausalLM file"):
        load_lm(tmp_path)  # a folder without causal_lm.pt
    torch.save({"format": "symformer-causal-lm", "version": 1, "dtype": "load"}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"^path: got .*expected a symformer-causal-lm file with a torch dtype"):
        load_lm(tmp_path / "bad.pt")
    save_lm(teacher, tmp_path / "lm.pt")
    assert (load_lm(tmp_path / "lm.pt")(data.val.x) - teacher(data.val.x)).abs().max() == 0  # the control loads

"""symformer.linearize end to end on tiny config-built models (issue 64 item 1): stage 1 lowers the transfer loss,
the saved model reloads with equal float64 logits and generates with constant-size states, a killed run resumes to
the uninterrupted result, and bad input is a ValueError naming the argument."""

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()
pytest.importorskip("peft")

from tests.integrations._hf_models import tiny  # noqa: E402
from tests.linearize._common import OPTIONS, random_split, resumes_to_the_uninterrupted_result  # noqa: E402

from symformer.data.base import Split, TensorData  # noqa: E402
from symformer.integrations import hf  # noqa: E402
from symformer.linearize import (  # noqa: E402
    LinearizeConfig,
    capture,
    linearize,
    recipe,  # noqa: E402
    save,
    student_of,
    transfer_loss,
)

_split = random_split


def _config(attention="favor", positional="rope", feature_map=None, **kw):
    base = dict(stage1_tokens=4 * 12 * 4, stage2_tokens=4 * 12 * 3, batch_size=4, eval_every=2, eval_batches=1)
    base.update(kw)
    options = {**OPTIONS[attention], **({"feature_map": feature_map} if feature_map else {})}
    return LinearizeConfig(attention, positional, core_options=options, **base)


@pytest.mark.parametrize("attention", ["favor", "plash"])
def test_stage1_lowers_the_transfer_loss(attention):
    teacher, data = tiny("llama", seed=0), _split()
    cfg = _config(attention, stage2_tokens=4 * 12, lr1=1e-2, stage1_tokens=4 * 12 * 8)

    def loss_of(student):
        with torch.no_grad(), capture(teacher) as rec:
            teacher(input_ids=data.train.x[:8], use_cache=False)
            return float(transfer_loss(student, rec))

    before = loss_of(student_of(teacher, cfg))
    after = loss_of(linearize(teacher, data, cfg).model)  # stage 2 moves q/k/v/o too: the transfer loss still fell
    assert after < 0.8 * before, (before, after)


@pytest.mark.parametrize(
    "attention,positional,feature_map",
    [("favor", "string", None), ("plash", "rope", None), ("favor", "rope", "hedgehog")],
)
def test_saved_model_reloads_exactly_and_generates_with_states(tmp_path, attention, positional, feature_map):
    import transformers as tf

    teacher, data = tiny("llama", torch.float64, seed=0), _split()
    model = linearize(teacher, data, _config(attention, positional, feature_map)).model
    assert not any("lora" in n for n, _ in model.named_parameters())  # merged before saving
    save(model, tmp_path)
    loaded = hf.from_pretrained(tf.LlamaForCausalLM, tmp_path, dtype=torch.float64).eval()
    ids = data.val.x[:2]
    with torch.no_grad():
        assert (loaded(ids).logits - model(ids).logits).abs().max() <= 1e-10
    out = loaded.generate(ids[:, :5], max_new_tokens=6, do_sample=False, return_dict_in_generate=True)
    assert getattr(out.past_key_values, "symformer_kind", None) == recipe.CORES[attention]  # states, not keys
    if feature_map:  # the option survives the save: the reloaded cores use Hedgehog's features
        assert {m.feature_map for m in loaded.modules() if hasattr(m, "feature_map")} == {feature_map}
    seq = out.sequences
    with torch.no_grad():  # greedy decoding with the states equals the full causal forward's argmax
        assert torch.equal(loaded(seq[:, :-1]).logits[:, 4:].argmax(-1), seq[:, 5:])


@pytest.mark.parametrize("call", [pytest.param(2, marks=pytest.mark.slow), 4])  # killed at step 3 of stage 1 or 2
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, call):
    teacher, data = tiny("llama", torch.float64, seed=0), _split()
    cfg = _config("plash", "string", eval_every=3, checkpoint_every=2)
    ref, _ = resumes_to_the_uninterrupted_result(teacher, data, cfg, tmp_path, monkeypatch, call)
    again = linearize(teacher, data, cfg, out=tmp_path / "run", resume=True)  # finished: the saved result
    assert (again.model.lm_head.weight - ref.model.lm_head.weight).abs().max() == 0


def test_a_resume_folder_of_another_run_is_refused(tmp_path):
    teacher, data = tiny("llama", seed=0), _split()
    linearize(teacher, data, _config("favor", stage1_tokens=48, stage2_tokens=48), out=tmp_path)
    with pytest.raises(ValueError, match=r"^resume: got .*a checkpoint of another run \(config differs\)"):
        linearize(teacher, data, _config("plash", stage1_tokens=48, stage2_tokens=48), out=tmp_path, resume=True)
    (tmp_path / "checkpoint.pt").write_text("garbage")
    with pytest.raises(ValueError, match=r"^resume: got .*expected a linearize checkpoint"):
        linearize(teacher, data, _config("favor"), out=tmp_path, resume=True)


def test_bad_input_is_refused_by_name():
    data = _split()
    teacher = tiny("llama", seed=0)
    with pytest.raises(ValueError, match=r"^model: got 'Linear .*expected a model of a supported Llama family"):
        linearize(torch.nn.Linear(2, 2), data, _config())
    with pytest.raises(ValueError, match=r"^sliding_window: got 8"):
        linearize(tiny("mistral", seed=0, sliding_window=8), data, _config())
    with pytest.raises(ValueError, match=r"^attn_logit_softcapping: got 50"):
        linearize(tiny("gemma2", seed=0, attn_logit_softcapping=50.0, sliding_window=None), data, _config())
    empty = Split(TensorData(data.train.x[:0], data.train.y[:0]), data.val, data.test, {})
    with pytest.raises(ValueError, match=r"^data: got 'an empty train set'"):
        linearize(teacher, empty, _config())
    with pytest.raises(ValueError, match=r"^stage1_tokens: got 0"):
        _config(stage1_tokens=0)
    with pytest.raises(ValueError, match=r"^stage2_tokens: got 5, expected >= 48 tokens"):
        linearize(teacher, data, _config(stage2_tokens=5))
    with pytest.raises(ValueError, match=r"^attention: got 'softmax'"):
        LinearizeConfig(attention="softmax")
    with pytest.raises(ValueError, match=r"^feature_map: got 'cosine', expected one of favor, hedgehog"):
        linearize(teacher, data, _config(feature_map="cosine"))
    configured = hf.configure(tiny("llama", seed=0), attention="favor", n_features=8)
    with pytest.raises(ValueError, match=r"^model: got 'a model with symformer attention favor'"):
        linearize(configured, data, _config())

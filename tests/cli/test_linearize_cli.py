"""`symformer linearize` (issue 64 item 2): a saved softmax Llama folder in, a folder `hf.from_pretrained` reloads out;
bad input is one line on stderr and exit status 2."""

import json

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()
pytest.importorskip("peft")

from symformer import cli  # noqa: E402
from symformer.data import load_char_text  # noqa: E402
from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf.lm import TinyLlama, tiny_llama  # noqa: E402

SPEC = TinyLlama(hidden_size=32, n_layers=1, n_heads=2, n_kv_heads=1, intermediate_size=64, max_len=64)
FAST = ["--block", "16", "--batch-size", "2", "--stage1-tokens", "64", "--stage2-tokens", "64"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    data = pytest.importorskip("symformer.data.paths").data_dir(None)
    if data is None or not (data / "tinyshakespeare.txt").is_file():
        pytest.skip("tinyshakespeare.txt not found")
    vocab = load_char_text(block=16, data_dir=data, max_chars=20_000)
    path = tmp_path_factory.mktemp("softmax")
    split = load_char_text(block=16, data_dir=data)
    assert split.meta["vocab_size"] >= vocab.meta["vocab_size"]
    tiny_llama(split.meta["vocab_size"], SPEC, seed=0).save_pretrained(path)
    return path, data


def run(capsys, *argv):
    code = cli.main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_linearize_writes_a_reloadable_model(capsys, folder, tmp_path):
    import transformers as tf

    path, data = folder
    out = tmp_path / "lin"
    code, stdout, err = run(
        capsys, "linearize", str(path), "--data-dir", str(data), "--attention", "plash", "--positional", "string",
        "--core-options", "M=2,D_k=8,causal_block=8,mixer_heads=2", "--out", str(out), *FAST,
    )  # fmt: skip
    assert code == 0, err
    metrics = json.loads(stdout.strip().splitlines()[-1])
    assert set(metrics) == {"stage0_val_loss", "stage1_val_loss", "stage2_val_loss"}
    model = hf.from_pretrained(tf.LlamaForCausalLM, out / "model")
    assert model.config.symformer_attention["attention"] == "plash"
    assert json.loads((out / "results.json").read_text())["history"][0]["stage"] == 0
    with torch.no_grad():
        assert torch.isfinite(model(torch.zeros(1, 5, dtype=torch.long)).logits).all()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--attention", "softmax"], "error: --attention: got 'softmax', expected one of "),
        (["--stage1-tokens", "0"], "error: --stage1-tokens: got 0, expected "),
        (["--stage1-loss", "kl"], "error: --stage1-loss: got 'kl', expected one of "),
        (["--attention", "plash", "--stage1-loss", "attention_ce"], "error: --stage1-loss: got 'attention_ce', "),
        (["--stage2-tokens", "5"], "error: --stage2-tokens: got 5, expected >= 32 tokens"),
        (["--core-options", "n_features"], "error: --core-options: got 'n_features', expected key=value pairs"),
        (["--core-options", "feature_map=cosine"], "error: feature_map: got 'cosine', expected one of favor, hedgehog"),
    ],
)
def test_bad_options_are_one_line(capsys, folder, tmp_path, args, message):
    path, data = folder
    code, _, err = run(capsys, "linearize", str(path), "--data-dir", str(data), "--out", str(tmp_path), *FAST, *args)
    assert code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1, err


def test_bad_model_and_resume_are_one_line(capsys, folder, tmp_path):
    path, data = folder
    code, _, err = run(capsys, "linearize", str(tmp_path), "--data-dir", str(data), "--out", str(tmp_path / "o"))
    assert code == 2 and err.startswith("error: MODEL: got ") and "expected a Hugging Face model folder" in err
    out = tmp_path / "run"
    assert run(capsys, "linearize", str(path), "--data-dir", str(data), "--out", str(out), *FAST)[0] == 0
    code, _, err = run(
        capsys, "linearize", str(path), "--data-dir", str(data), "--out", str(out), *FAST, "--positional", "string",
        "--resume",
    )  # fmt: skip
    assert code == 2 and err.startswith("error: --resume: got ") and "another run (config differs)" in err, err


def _linearized_lm(capsys, source, data, out, attention: str, core_options: str):
    """`symformer linearize SOURCE` of a CausalLM source into out, which must succeed: (stdout, the saved model)."""
    from symformer.linearize import load_lm

    code, stdout, err = run(
        capsys, "linearize", str(source), "--data-dir", str(data), "--attention", attention,
        "--core-options", core_options, "--out", str(out), *FAST,
    )  # fmt: skip
    assert code == 0, err
    return stdout, load_lm(out / "model")


def test_linearize_takes_a_causal_lm_file(capsys, folder, tmp_path):
    from symformer.linearize import save_lm
    from symformer.models import CausalLM, TransformerConfig

    _, data = folder
    vocab = load_char_text(block=16, data_dir=data).meta["vocab_size"]
    torch.manual_seed(0)
    softmax = save_lm(CausalLM(TransformerConfig(d_model=16, n_heads=2, n_layers=1), vocab), tmp_path / "lm.pt")
    out = tmp_path / "lin"
    stdout, model = _linearized_lm(capsys, softmax, data, out, "favor", "n_features=8")
    assert set(json.loads(stdout.strip().splitlines()[-1])) == {"stage0_val_loss", "stage1_val_loss", "stage2_val_loss"}
    assert model.cfg.attention == "favor_learned"
    assert model.generate(torch.zeros(1, 3, dtype=torch.long), 4).shape == (1, 7)
    code, _, err = run(capsys, "linearize", str(out / "checkpoint.pt"), "--data-dir", str(data), *FAST)  # not a model
    assert code == 2 and err.startswith("error: MODEL: got ") and "expected a symformer-causal-lm file" in err, err
    assert len(err.strip().splitlines()) == 1


def test_linearize_takes_a_symformer_train_folder(capsys, tmp_path):
    (tmp_path / "data").mkdir()
    text = "".join(f"ROMEO: line {i} of the play, with all its words.\n" for i in range(60))
    (tmp_path / "data" / "tinyshakespeare.txt").write_text(text)
    data, trained = tmp_path / "data", tmp_path / "trained"
    sets = ["train.max_steps=1", "train.epochs=1", "model.d_model=16", "model.n_layers=1", "train.eval_batch_size=512"]
    argv = ["train", "--preset", "shakespeare-char", "--data-dir", str(data), "--out", str(trained)]
    assert cli.main(argv + [a for s in sets for a in ("--set", s)]) == 0
    out = tmp_path / "lin"
    _, model = _linearized_lm(capsys, trained, data, out, "plash", "M=2,D_k=8,causal_block=8,mixer_heads=2")
    assert model.cfg.attention == "plash" and model.cfg.d_model == 16
    (trained / "checkpoint.pt").write_bytes(b"garbage\n")
    code, _, err = run(capsys, "linearize", str(trained), "--data-dir", str(data), "--out", str(out), *FAST)
    assert code == 2 and err.startswith("error: MODEL: got ") and "is not a symformer checkpoint" in err, err
    assert len(err.strip().splitlines()) == 1

"""Issue 43's one seeding rule (symformer._rng, CONTRIBUTING): `seed: int | None` with nn.Linear's meaning, per-layer
seeds derived once where the layers are built, and no `manual_seed` / `torch.Generator` outside `_rng.py`."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest
import torch

from symformer._rng import check_seed, derived_seed, layer_kwargs, seeded_generator
from symformer.attention.favor import FavorAttention
from symformer.attention.plash import PlashAttention
from symformer.attention.sketch import CountSketch, TensorSketch
from symformer.facts.embeddings import make_fact_set, sample_embeddings
from symformer.facts.lm.books import make_books
from symformer.facts.lm.ssfr import make_ssfr
from symformer.models import CausalLM, TransformerConfig
from symformer.models.forecaster import Forecaster
from symformer.models.informer import Informer, InformerConfig
from symformer.positional.espr import ESPR
from symformer.positional.rope import RoPE
from symformer.positional.string import STRING, CirculantSTRING
from symformer.train import TrainConfig

SRC = Path(__file__).resolve().parents[1] / "src" / "symformer"


def _seeding_calls(path: Path, root: Path = SRC.parent) -> list[str]:
    """`<file>:<line> <call>` for every call of `*.manual_seed*(...)` or `[torch.]Generator(...)` in a module."""
    found: dict[tuple[int, int], str] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name.startswith("manual_seed") or name == "Generator":  # the outer call of Generator().manual_seed()
            found.setdefault(
                (node.lineno, node.col_offset), f"{path.relative_to(root)}:{node.lineno} {ast.unparse(f)}("
            )
    return [found[k] for k in sorted(found)]


def test_no_manual_seed_or_generator_outside_rng():
    """Every seeding goes through symformer._rng (seeded_generator, generator, init_generator, fresh_generator,
    seed_torch), so the rule lives in one module; the tests may seed as they like."""
    calls = [c for p in sorted(SRC.rglob("*.py")) if p.name != "_rng.py" for c in _seeding_calls(p)]
    assert not calls, f"{len(calls)} seeding calls outside symformer/_rng.py:\n" + "\n".join(calls)


def test_the_scan_sees_the_calls_it_forbids(tmp_path):
    """The scan above can fail: it finds each spelling of the forbidden calls (and not a mention in a docstring)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""torch.manual_seed(0) in a docstring"""\nimport torch\nfrom torch import Generator\n'
        "torch.manual_seed(0)\ng = torch.Generator().manual_seed(1)\nh = Generator()\ntorch.cuda.manual_seed_all(2)\n"
        "k = torch.Generator(device='cpu')\n"
    )
    assert sorted(c.split(" ", 1)[1] for c in _seeding_calls(probe, tmp_path)) == [
        "Generator(",
        "torch.Generator(",
        "torch.Generator().manual_seed(",
        "torch.cuda.manual_seed_all(",
        "torch.manual_seed(",
    ]


# ------------------------------------------------------------------ no two layers share a draw
def _core_draws(core) -> torch.Tensor:
    """The random structure of an attention core: FAVOR+'s features, PLASH's prototypes and hashes."""
    names = ("features", "prototypes", "hash_0", "sign_0", "hash_1", "sign_1")
    return torch.cat([getattr(core, n).detach().double().flatten() for n in names if hasattr(core, n)])


def _part_draws(part) -> torch.Tensor:
    return torch.cat([t.detach().double().flatten() for t in itertools.chain(part.parameters(), part.buffers())])


def _all_distinct(draws: list[torch.Tensor]) -> bool:
    return len(draws) > 1 and all(not torch.equal(a, b) for a, b in itertools.combinations(draws, 2))


# positional kwargs whose initial parameters are random: STRING's P, RoPE-mixed's directions, ESPR's noise, signs
RANDOM_PARTS = [
    ("string", {"init_scale": 0.1}, 1),
    ("rope", {"mode": "mixed"}, 2),
    ("espr", {"commuting_init": False}, 1),
    ("circulant_string", {}, 1),
]


@pytest.mark.parametrize("seed", [None, 7])
@pytest.mark.parametrize("positional,pkw,coord_dim", RANDOM_PARTS)
def test_no_two_layers_of_a_model_share_a_positional_draw(positional, pkw, coord_dim, seed):
    """Encoder and decoder layers (self and cross) of one model each draw their own rotary part."""
    kw = dict(pkw, seed=seed) if seed is not None else pkw
    cfg = TransformerConfig(
        d_model=64, n_heads=2, n_layers=2, positional=positional, positional_kwargs=kw, coord_dim=coord_dim
    )
    torch.manual_seed(0)
    model = Forecaster(cfg, n_vars=3, seq_len=8, label_len=4, pred_len=4, dec_layers=2)
    parts = [m.rotary for m in model.modules() if getattr(m, "rotary", None) is not None]
    assert len(parts) == 6 and _all_distinct([_part_draws(p) for p in parts])


@pytest.mark.parametrize("seed", [None, 7])
@pytest.mark.parametrize("attention", ["favor", "plash"])
def test_no_two_layers_of_a_model_share_a_core_draw(attention, seed):
    kw = {"n_features": 16} if attention == "favor" else {"M": 4, "D_k": 16}
    if seed is not None:
        kw["seed"] = seed
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=2, n_layers=2, attention=attention, attention_kwargs=kw)
    forecaster = Forecaster(cfg, n_vars=3, seq_len=8, label_len=4, pred_len=4, dec_layers=1)
    cores = [m.core for m in forecaster.modules() if hasattr(m, "core") and hasattr(m, "rotary")]
    assert len(cores) == 4 and _all_distinct([_core_draws(c) for c in cores])
    icfg = InformerConfig(
        d_model=32, n_heads=2, e_layers=2, d_layers=1, d_ff=32, dropout=0.0, attention=attention, attention_kwargs=kw
    )
    informer = Informer(icfg, n_vars=3, seq_len=8, label_len=4, pred_len=4)
    cores = [m.core for m in informer.modules() if hasattr(m, "core") and hasattr(m, "q_proj")]
    assert len(cores) == 4 and _all_distinct([_core_draws(c) for c in cores])


def test_a_given_seed_fixes_every_layer_whatever_the_global_generator():
    def draws(run_seed):
        torch.manual_seed(run_seed)
        cfg = TransformerConfig(
            d_model=32,
            n_heads=2,
            n_layers=2,
            positional="string",
            positional_kwargs={"init_scale": 0.1, "seed": 3},
            attention="favor",
            attention_kwargs={"n_features": 8, "seed": 3},
        )
        blocks = CausalLM(cfg, vocab_size=11).encoder.blocks
        return [_part_draws(b.attn.rotary) for b in blocks] + [_core_draws(b.attn.core) for b in blocks]

    a = draws(0)
    assert all(torch.equal(x, y) for x, y in zip(a, draws(1), strict=True))
    # layer l's seed is derived_seed("layer<name>.<l>", 3), once, in the builder (_rng.layer_kwargs)
    assert int(CausalLM(TransformerConfig(d_model=32, n_heads=2, attention="favor", attention_kwargs={"seed": 3}), 11)
               .encoder.blocks[1].attn.core.seed) == derived_seed("layerencoder.1", 3)  # fmt: skip


def test_no_two_layers_of_a_patched_hf_model_share_a_draw():
    from tests.integrations._hf_models import transformers_or_skip

    transformers_or_skip()
    from tests.integrations._hf_models import tiny

    from symformer.integrations import hf

    for seed in (None, 5):
        opts = {} if seed is None else {"seed": seed}
        parts = hf.rotary_parts(hf.patch_positional(tiny("llama"), "string", init_scale=0.1, **opts))
        assert len(parts) == 2 and _all_distinct([_part_draws(p) for p in parts])
        for attention, kw in (("favor", {"n_features": 16}), ("plash", {"M": 4, "D_k": 16})):
            model = hf.configure(tiny("llama"), attention, **kw, **opts)
            cores = [layer.self_attn.symformer_core for layer in model.model.layers]
            assert len(cores) == 2 and _all_distinct([_core_draws(c) for c in cores])


# ------------------------------------------------------------------ seed=None follows torch.manual_seed
BUILDERS = {
    "rope_mixed": lambda seed: RoPE(8, 2, mode="mixed", seed=seed).beta,
    "string": lambda seed: STRING(8, 2, init_scale=0.1, seed=seed).skew_param,
    "circulant_string": lambda seed: CirculantSTRING(16, seed=seed).c,
    "espr": lambda seed: ESPR(8, 2, commuting_init=False, seed=seed).gen_param,
    "favor": lambda seed: FavorAttention(8, n_features=8, seed=seed).features,
    "plash": lambda seed: _core_draws(PlashAttention(8, M=4, D_k=16, seed=seed)),
    "count_sketch": lambda seed: CountSketch(16, 8, seed=seed).h,
    "tensor_sketch": lambda seed: TensorSketch(16, 8, 2, seed=seed).h,
    "fact_set": lambda seed: make_fact_set(16, 8, seed=seed).keys,
    "embeddings": lambda seed: sample_embeddings(16, 8, seed=seed),
    "ssfr": lambda seed: make_ssfr(16, 8, seed=seed).embeddings,
    "books": lambda seed: make_books(8, seed=seed).facts,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_seed_none_follows_torch_manual_seed_and_an_int_fixes_the_draw(name):
    build = BUILDERS[name]

    def under(run_seed, seed):
        torch.manual_seed(run_seed)
        return build(seed).detach().clone()

    assert torch.equal(under(0, None), under(0, None))
    assert not torch.equal(under(0, None), under(1, None))
    assert torch.equal(under(0, 4), under(1, 4))
    assert not torch.equal(under(0, 4), under(0, 5))


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("bad", [1.5, "3", True])
def test_a_bad_seed_is_a_type_error_naming_seed(name, bad):
    with pytest.raises(TypeError, match=r"^seed: got "):
        BUILDERS[name](bad)


def test_configs_and_builders_reject_a_bad_seed():
    with pytest.raises(TypeError, match=r"^seed: got 1\.5"):
        TrainConfig(seed=1.5)
    with pytest.raises(TypeError, match=r"^seed: got 'x'"):
        CausalLM(TransformerConfig(d_model=16, n_heads=2, attention="favor", attention_kwargs={"seed": "x"}), 11)
    with pytest.raises(TypeError, match=r"^seed: got 2\.0"):
        layer_kwargs({"seed": 2.0}, 0)
    assert check_seed(None) is None and check_seed(3) == 3


def test_seeded_generator_keeps_the_plain_stream():
    """The data sets' recorded draws: seeded_generator(s) is torch.Generator().manual_seed(s)."""
    ref = torch.randn(5, generator=torch.Generator().manual_seed(11))
    assert torch.equal(torch.randn(5, generator=seeded_generator(11)), ref)


def test_train_config_seed_none_is_drawn_once_from_the_global_generator(tmp_path):
    from symformer.data.base import TensorData
    from symformer.train import LanguageModeling, Trainer

    x = torch.randint(0, 11, (16, 5), generator=torch.Generator().manual_seed(0))
    data = TensorData(x[:, :-1], x[:, 1:])

    def trainer(run_seed):
        torch.manual_seed(run_seed)
        model = CausalLM(TransformerConfig(d_model=16, n_heads=2, n_layers=1), 11)
        return Trainer(model, LanguageModeling(), data, None, TrainConfig(epochs=1, batch_size=4, seed=None))

    a, b, c = trainer(0), trainer(0), trainer(1)
    assert isinstance(a.cfg.seed, int) and a.cfg.seed == b.cfg.seed != c.cfg.seed


def test_seed_none_draws_on_the_cpu_under_a_meta_device():
    """from_pretrained builds models under torch.device("meta"), where no value can be read: the seed a part draws
    from the global generator is drawn on the CPU."""
    with torch.device("meta"):
        favor, plash = FavorAttention(8, n_features=8), PlashAttention(8, M=4, D_k=16)
    assert favor.seed.device.type == "meta" and plash.hash_0.device.type == "meta"

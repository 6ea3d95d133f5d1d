"""The docs pages as the repository shows them (issue 58 items 10, 11): the generated parts of docs/huggingface.md and
docs/index.md (family count, family table, verdict table) are committed between `<!-- gen:NAME -->` and
`<!-- /gen -->` and current (`python docs/gen/symdocs.py pages` rewrites them); no list is glued to the paragraph
above it (Python-Markdown, which builds the site, then renders it as one paragraph: the Hugging Face page's
"Versions" list did); wide tables wrap inside the page (docs/stylesheets/extra.css); and what the Hugging Face page
says about `past_key_values` on transformers 5.24 is what the installed release does."""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "gen" not in p.relative_to(DOCS).parts)


def _symdocs():
    spec = importlib.util.spec_from_file_location("symdocs", DOCS / "gen" / "symdocs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("symdocs", mod)
    spec.loader.exec_module(mod)
    return mod


def test_generated_blocks_are_committed_and_current():
    sd = _symdocs()
    pages = sd.pages_with_blocks()
    assert {DOCS / "huggingface.md", DOCS / "index.md"} <= set(pages)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert sd.refresh(text) == text, f"{page.relative_to(ROOT)}: run `python docs/gen/symdocs.py pages`"
    for page in (DOCS / "huggingface.md", DOCS / "index.md"):  # every marker there holds its content
        text = page.read_text(encoding="utf-8")
        assert not sd.MARKER.search(sd.BLOCK.sub("", text)), page
    from symformer.integrations.hf import FAMILIES

    hf_page = (DOCS / "huggingface.md").read_text(encoding="utf-8")
    assert f"<!-- gen:family-count -->{len(FAMILIES)}<!-- /gen -->" in hf_page
    assert "| family (`model_type`) | models | model class |" in hf_page and "| `llama` |" in hf_page
    assert "| experiment | holds | fails | inconclusive |" in (DOCS / "index.md").read_text(encoding="utf-8")


def test_refresh_and_expand():
    sd = _symdocs()
    stale = "of <!-- gen:family-count -->1<!-- /gen --> families\n\n<!-- gen:families -->\nold\n<!-- /gen -->\n"
    fresh = sd.refresh(stale)
    assert sd.refresh(fresh) == fresh and "old" not in fresh and "| `llama` |" in fresh
    assert fresh.startswith(f"of <!-- gen:family-count -->{sd.render('family-count', None)}<!-- /gen --> families")
    built = sd.expand(fresh)  # the site: the markers gone, the content rendered
    assert "<!--" not in built and "| `llama` |" in built


def glued_lists(text: str) -> list[tuple[int, str]]:
    """Lines opening a list right under a paragraph line (outside code fences): Python-Markdown needs a blank line."""
    bad, fence, prev = [], False, ""
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence, prev = not fence, line
            continue
        opens = re.match(r"(- |\* |\d+\. )", line)
        para = (
            prev.strip() and not re.match(r"\s*(- |\* |\d+\. )", prev) and not prev.startswith((" ", "|", "<!--", "#"))
        )
        if not fence and opens and para:
            bad.append((i, line[:60]))
        prev = line
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_list_is_glued_to_a_paragraph(page):
    assert not glued_lists(page.read_text(encoding="utf-8"))


def test_glued_list_check_sees_the_versions_list():
    assert glued_lists("**Versions.** checked:\n- one;\n- two.\n") == [(2, "- one;")]
    assert not glued_lists("**Versions.** checked:\n\n- one;\n- two.\n")


def test_wide_tables_wrap_in_the_page():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    css = re.search(r"extra_css:\n((?:  - .*\n)+)", config)
    assert css, "mkdocs.yml: no extra_css"
    files = [DOCS / line.strip()[2:] for line in css.group(1).splitlines()]
    rules = "".join(f.read_text(encoding="utf-8") for f in files)
    assert "table:not([class])" in rules and "width: 100%" in rules and "overflow-wrap: anywhere" in rules


def test_past_key_values_is_what_the_page_says():
    """On a release that renamed it (5.24: the forward takes `cache`), `past_key_values` still fills the cache, with a
    FutureWarning; the page says so, and no longer that the name is swallowed."""
    from tests.integrations._hf_models import transformers_or_skip

    transformers_or_skip()
    import inspect

    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    page = " ".join((DOCS / "huggingface.md").read_text(encoding="utf-8").split())
    assert "swallowed" not in page and "the old name still works" in page and "FutureWarning" in page
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    if "cache" not in inspect.signature(model.forward).parameters:
        pytest.skip("this transformers release predates the rename to `cache`")
    ids = torch.randint(0, 64, (1, 6))
    cache = DynamicCache(config=cfg)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        full = model(ids).logits
        model(ids[:, :5], past_key_values=cache, use_cache=True)
        step = model(ids[:, 5:], past_key_values=cache, use_cache=True).logits
    assert cache.get_seq_length() == 6  # the cache was used, not swallowed by **kwargs
    assert torch.allclose(step[:, -1], full[:, -1], atol=1e-5)
    assert any(issubclass(w.category, FutureWarning) and "past_key_values" in str(w.message) for w in caught)

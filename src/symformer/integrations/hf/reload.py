"""Saving and reloading Hugging Face models that carry symformer parts.

`patch_positional` records its patch in `config.symformer_positional` and `configure` its attention core in
`config.symformer_attention`; both are saved in config.json. Each also turns the model's class into a subclass
(same name prefixed `Symformer`) whose constructor re-applies what its config records, positional part first,
then attention cores, before the weights load. How a record is re-applied, settled against the attn_implementation a
load asks for, and named in a save is registered here by the module that writes it (`register_restorer`, a
`Restorer` per record: hf.positional and hf.attention, both above this module, register theirs when imported, which
importing any part of symformer.integrations.hf does). So `type(model).from_pretrained(folder)` or
`symformer.integrations.hf.from_pretrained(LlamaForCausalLM, folder)` rebuilds the model with its parts and
cores in place, and transformers' loader fills their parameters and buffers (FAVOR+ features, PLASH hashes and
weights, the parts' generators) from the checkpoint like any other weight: nothing is drawn again.

`hf.from_pretrained(AutoModelForCausalLM, folder)` resolves the Auto class to the concrete class the folder's
config names (LlamaForCausalLM, ...) and restores onto that.

A plain `LlamaForCausalLM.from_pretrained(folder)` (or `AutoModelForCausalLM.from_pretrained`) never calls this
constructor: transformers builds the class it is given, and config.json cannot name a class outside transformers
without `trust_remote_code`. So such a load fails loudly instead of returning a plain model: a model with cores
saves `attn_implementation` ("symformer_favor" | "symformer_plash") in its config.json, which transformers refuses
as unknown when symformer has not registered it, and which, when registered, reaches the attention function, where
a layer of a model loaded from a folder without its cores raises (hf.attention._core) naming hf.from_pretrained.
A model with a positional patch and no cores saves transformers' own implementation under a symformer name
(`SAVED_POSITIONAL`: "symformer_sdpa", "symformer_eager") to the same end: the restoring constructor runs it as
transformers' one, and a plain load either is refused as unknown or reaches `_unrestored`, which raises.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from symformer._validation import check_choice, fail
from symformer.integrations.hf._common import attention_interface, family_eager, require_transformers, text_config
from symformer.positional.base import RotaryPositional

#: config attribute -> how it is re-applied, in this order (the positional patch changes the attention classes;
#: the cores are attributes of the attention modules and survive that change either way)
RECORDS = ("symformer_positional", "symformer_attention")
_MODEL_CLASSES: dict[type, type] = {}
#: marks the copy of a record saved in a multimodal folder's text config (read by a plain load only; restoring reads
#: the top-level record)
SUB_CONFIG_MARK = "saved_for_the_language_model"
#: the attn_implementation saved by a model with a positional patch and no cores, per transformers implementation it
#: ran ("sdpa" for one not listed here: flash / flex kernels are chosen again at load by attn_implementation=)
SAVED_POSITIONAL = {"sdpa": "symformer_sdpa", "eager": "symformer_eager"}


def _unrestored(base: str):
    def attention(module, *args, **kwargs):
        """A layer that should carry a symformer rotary part: run `base` where it does (set by hand on a patched
        model), raise where it does not (a plain from_pretrained of a positional folder)."""
        if not isinstance(getattr(module, "rotary", None), RotaryPositional):
            fail(
                "model",
                f"a model loaded from {module.config._name_or_path!r} without its symformer positional part (a plain "
                "from_pretrained: the part's parameters were dropped as unexpected keys, and the layers would rotate "
                "with the model's own RoPE)",
                "symformer.integrations.hf.from_pretrained(ModelClass or AutoModelForCausalLM, folder), which "
                "restores it",
                RuntimeError,
            )
        return attention_interface(base, family_eager(module))(module, *args, **kwargs)

    return attention


def register_positional() -> None:
    """Add SAVED_POSITIONAL's names to transformers' AttentionInterface and AttentionMaskInterface (idempotent)."""
    tf = require_transformers()
    for base, name in SAVED_POSITIONAL.items():
        tf.AttentionInterface.register(name, _unrestored(base))
    try:
        from transformers.masking_utils import AttentionMaskInterface  # optional dependency: imported on use
    except ImportError:  # 4.48-4.52 build masks from _attn_implementation without a registry
        return
    for base, name in SAVED_POSITIONAL.items():
        AttentionMaskInterface.register(name, AttentionMaskInterface._global_mapping[base])


@dataclass(frozen=True)
class Restorer:
    """How the module that writes one config record (RECORDS) restores it.

    apply(model, **spec): re-apply the record on a model just built from its config (patch_positional, configure).
    settle(config): before that model is built, register the implementation names its config may name and settle an
    attn_implementation passed to from_pretrained against the record (the highest record a config holds settles it:
    its implementation is the one the folder's save named, `_saved_implementation`).
    saved_implementation(model, spec): the attn_implementation a save of the model names for this record."""

    apply: Callable[..., Any]
    settle: Callable[[Any], None]
    saved_implementation: Callable[[nn.Module, dict], str | None]


#: record -> its Restorer, filled by the modules that write the records (register_restorer)
RESTORERS: dict[str, Restorer] = {}


def register_restorer(record: str, restorer: Restorer) -> Restorer:
    """Register how `record` (one of RECORDS) is restored; returns the restorer."""
    check_choice("record", record, RECORDS)
    if not isinstance(restorer, Restorer):
        fail("restorer", type(restorer).__name__, "a Restorer", TypeError)
    RESTORERS[record] = restorer
    return restorer


def _highest_record(config) -> tuple[str, dict] | None:
    """(record, spec) of the last record in RECORDS the config holds, or None."""
    for record in reversed(RECORDS):
        spec = getattr(config, record, None)
        if spec:
            return record, spec
    return None


def _requested(config) -> None:
    """Before the model is built: its highest record registers the symformer implementations and settles an
    attn_implementation passed to from_pretrained (Restorer.settle)."""
    found = _highest_record(config)
    if found is not None:
        RESTORERS[found[0]].settle(config)


def _restoring_init(self, config, *args, **kwargs):
    _requested(config)
    type(self).__mro__[1].__init__(self, config, *args, **kwargs)
    for record in RECORDS:
        spec = getattr(config, record, None)
        if spec:
            spec = dict(spec)
            setattr(config, record, None)  # patch_positional / configure record it again
            RESTORERS[record].apply(self, **spec)


def _saving(self, save_directory, *args, **kwargs):
    """save_pretrained, then config.json given `attn_implementation`: the symformer one this model runs (module
    doc: a plain from_pretrained of the folder then fails loudly instead of dropping the cores)."""
    out = type(self).__mro__[1].save_pretrained(self, save_directory, *args, **kwargs)
    name = _saved_implementation(self)
    path = os.path.join(os.fspath(save_directory), "config.json")
    if name and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        tc = text_config(self)
        key = next((k for k in getattr(self.config, "sub_configs", {}) if getattr(self.config, k, None) is tc), None)
        target = saved if tc is self.config or key is None or key not in saved else saved[key]
        target["attn_implementation"] = name
        if target is not saved:  # a load sets the top-level implementation on every sub-config unless it names theirs
            saved["attn_implementation"] = {key: name}
            for record in RECORDS:  # what the language model's layers find on their sub-config in a plain load
                if getattr(self.config, record, None):
                    target[record] = {**getattr(self.config, record), SUB_CONFIG_MARK: True}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(saved, f, indent=2, sort_keys=True)
            f.write("\n")
    return out


def _saved_implementation(model: nn.Module) -> str | None:
    """The attn_implementation a save names: the highest record's (the symformer core's, else SAVED_POSITIONAL's for
    a positional patch), None for a model without records."""
    found = _highest_record(model.config)
    return None if found is None else RESTORERS[found[0]].saved_implementation(model, found[1])


def restoring_class(cls: type) -> type:
    """The subclass of an HF model class whose constructor re-applies the symformer records of its config (the
    class itself when it is one already)."""
    if cls in _MODEL_CLASSES.values():
        return cls
    if cls not in _MODEL_CLASSES:
        _MODEL_CLASSES[cls] = type(
            "Symformer" + cls.__name__,
            (cls,),
            {"__init__": _restoring_init, "save_pretrained": _saving, "__module__": __name__},
        )
    return _MODEL_CLASSES[cls]


def from_pretrained(model_class: type, path, **kwargs) -> nn.Module:
    """`model_class.from_pretrained(path, **kwargs)` that re-applies the recorded symformer positional patch and
    attention cores before the weights load, so their parameters and buffers load too (local folders; nothing is
    downloaded unless `path` is a hub id). `dtype=torch.bfloat16` rounds the model's weights as `.to` would; the
    float32 masters (positional parts, FAVOR+ features) stay float32. `attn_implementation`: see `_requested`."""
    require_transformers()
    return restoring_class(_concrete_class(model_class, path, kwargs)).from_pretrained(path, **kwargs)


_CONFIG_KWARGS = ("revision", "cache_dir", "local_files_only", "token", "subfolder", "trust_remote_code")


def _concrete_class(model_class: type, path, kwargs: dict) -> type:
    """An Auto class (AutoModelForCausalLM, ...) resolved to the model class the folder's config maps it to, so
    that the restoring constructor runs; any other class as given."""
    mapping = getattr(model_class, "_model_mapping", None)
    if mapping is None:
        return model_class
    tf = require_transformers()
    config = kwargs.get("config")
    if not isinstance(config, tf.PretrainedConfig):
        config = tf.AutoConfig.from_pretrained(
            path if config is None else config, **{k: kwargs[k] for k in _CONFIG_KWARGS if k in kwargs}
        )
    try:
        from transformers.models.auto.auto_factory import _get_model_class  # optional dependency: imported on use

        return _get_model_class(config, mapping)
    except ImportError:  # older releases: the mapping alone
        return mapping[type(config)]


__all__ = [
    "RECORDS",
    "RESTORERS",
    "Restorer",
    "SAVED_POSITIONAL",
    "SUB_CONFIG_MARK",
    "from_pretrained",
    "register_positional",
    "register_restorer",
    "restoring_class",
]

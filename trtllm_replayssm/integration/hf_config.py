"""SSM geometry of a hybrid model from its Hugging Face ``config.json`` (Nemotron-H /
Nemotron-3 and Qwen3-Next / Qwen3.5), or from the built-in table by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union

from ..cache import GDNGeometry, Mamba2Geometry
from ..models import GDNModel, Mamba2Model, model

SSMModel = Union[Mamba2Model, GDNModel]


def _gdn_layer_count(cfg: dict) -> int:
    if "layer_types" in cfg:
        return sum(t == "linear_attention" for t in cfg["layer_types"])
    interval = cfg.get("full_attention_interval", 4)
    return sum((i + 1) % interval != 0 for i in range(cfg["num_hidden_layers"]))


def _fields(cfg: dict, name: str, kind: str, *keys: str) -> list:
    """``cfg[key]`` for each key, or a ValueError naming the first one missing."""
    missing = [k for k in keys if k not in cfg]
    if missing:
        raise ValueError(f"{name}: a {kind} config needs {missing[0]}")
    return [cfg[k] for k in keys]


def from_hf_config(cfg: dict, name: str = "config.json") -> SSMModel:
    """Nemotron-H style (``mamba_num_heads``, ``hybrid_override_pattern``) or Qwen3-Next
    style (``linear_num_value_heads``, ``layer_types`` / ``full_attention_interval``);
    Qwen3.5's nested ``text_config`` is looked into."""
    cfg = cfg.get("text_config", cfg)
    if "mamba_num_heads" in cfg:
        heads, headdim, dstate, pattern = _fields(cfg, name, "Mamba2 hybrid", "mamba_num_heads", "mamba_head_dim",
                                                  "ssm_state_size", "hybrid_override_pattern")
        geom = Mamba2Geometry(nheads=heads, headdim=headdim, dstate=dstate, ngroups=cfg.get("n_groups", 1))
        return Mamba2Model(name, pattern.count("M"), geom)
    if "linear_num_value_heads" in cfg:
        k_heads, v_heads, k_dim, v_dim = _fields(cfg, name, "Gated DeltaNet hybrid", "linear_num_key_heads",
                                                 "linear_num_value_heads", "linear_key_head_dim",
                                                 "linear_value_head_dim")
        if "layer_types" not in cfg:
            _fields(cfg, name, "Gated DeltaNet hybrid (without layer_types)", "num_hidden_layers")
        geom = GDNGeometry(num_k_heads=k_heads, num_v_heads=v_heads, head_k_dim=k_dim, head_v_dim=v_dim)
        return GDNModel(name, _gdn_layer_count(cfg), geom)
    raise ValueError(f"{name}: neither a Nemotron-H (mamba_num_heads) nor a Qwen3-Next/Qwen3.5 "
                     "(linear_num_value_heads) config")


def load_ssm_model(name_or_path: str) -> SSMModel:
    """A built-in model name, a ``config.json`` path, or a folder holding one."""
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    if p.is_file():
        try:
            cfg = json.loads(p.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{p}: not a JSON config ({error})") from None
        return from_hf_config(cfg, str(p))
    return model(name_or_path)

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


def from_hf_config(cfg: dict, name: str = "config.json") -> SSMModel:
    """Nemotron-H style (``mamba_num_heads``, ``hybrid_override_pattern``) or Qwen3-Next
    style (``linear_num_value_heads``, ``layer_types`` / ``full_attention_interval``);
    Qwen3.5's nested ``text_config`` is looked into."""
    cfg = cfg.get("text_config", cfg)
    if "mamba_num_heads" in cfg:
        geom = Mamba2Geometry(nheads=cfg["mamba_num_heads"], headdim=cfg["mamba_head_dim"],
                              dstate=cfg["ssm_state_size"], ngroups=cfg.get("n_groups", 1))
        pattern = cfg.get("hybrid_override_pattern")
        if pattern is None:
            raise ValueError(f"{name}: a Mamba2 hybrid config needs hybrid_override_pattern")
        return Mamba2Model(name, pattern.count("M"), geom)
    if "linear_num_value_heads" in cfg:
        geom = GDNGeometry(num_k_heads=cfg["linear_num_key_heads"], num_v_heads=cfg["linear_num_value_heads"],
                           head_k_dim=cfg["linear_key_head_dim"], head_v_dim=cfg["linear_value_head_dim"])
        return GDNModel(name, _gdn_layer_count(cfg), geom)
    raise ValueError(f"{name}: neither a Nemotron-H (mamba_num_heads) nor a Qwen3-Next/Qwen3.5 "
                     "(linear_num_value_heads) config")


def load_ssm_model(name_or_path: str) -> SSMModel:
    """A built-in model name, a ``config.json`` path, or a folder holding one."""
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    if p.is_file():
        return from_hf_config(json.loads(p.read_text()), str(p))
    return model(name_or_path)

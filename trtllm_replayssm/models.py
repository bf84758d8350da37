"""SSM layer geometries of the supported models (from their public config.json files)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .cache import GDNGeometry, Mamba2Geometry


@dataclass(frozen=True)
class Mamba2Model:
    name: str
    num_ssm_layers: int
    geom: Mamba2Geometry
    family: str = "mamba2"


@dataclass(frozen=True)
class GDNModel:
    name: str
    num_ssm_layers: int
    geom: GDNGeometry
    family: str = "gdn"


MAMBA2_MODELS = {
    m.name: m
    for m in (
        Mamba2Model("nemotron-3-nano-4b", 21, Mamba2Geometry(nheads=96, headdim=80, dstate=128, ngroups=8)),
        Mamba2Model("nemotron-h-8b", 24, Mamba2Geometry(nheads=128, headdim=64, dstate=128, ngroups=8)),
        Mamba2Model("nemotron-3-super", 40, Mamba2Geometry(nheads=128, headdim=64, dstate=128, ngroups=8)),
    )
}
GDN_MODELS = {
    m.name: m
    for m in (
        GDNModel("qwen3.5-4b", 24, GDNGeometry(num_k_heads=16, num_v_heads=32, head_k_dim=128, head_v_dim=128)),
        GDNModel("qwen3-next-80b", 36, GDNGeometry(num_k_heads=16, num_v_heads=32, head_k_dim=128, head_v_dim=128)),
        GDNModel("qwen3.5-122b", 36, GDNGeometry(num_k_heads=16, num_v_heads=64, head_k_dim=128, head_v_dim=128)),
    )
}
# Geometries small enough for the CPU interpreter (CLI defaults there, tests).
TINY_MAMBA2 = Mamba2Model("tiny", 2, Mamba2Geometry(nheads=8, headdim=16, dstate=16, ngroups=2))
TINY_GDN = GDNModel("tiny-gdn", 2, GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16))
MODELS = {**MAMBA2_MODELS, **GDN_MODELS, TINY_MAMBA2.name: TINY_MAMBA2, TINY_GDN.name: TINY_GDN}


def model(name: str) -> Union[Mamba2Model, GDNModel]:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def mamba2_model(name: str) -> Mamba2Model:
    m = model(name)
    if m.family != "mamba2":
        raise ValueError(f"{name!r} is not a Mamba2 model; Mamba2 models: {', '.join(MAMBA2_MODELS)}, tiny")
    return m

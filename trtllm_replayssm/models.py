"""SSM layer geometries of the supported models (from their public config.json files)."""

from __future__ import annotations

from dataclasses import dataclass

from .cache import Mamba2Geometry


@dataclass(frozen=True)
class Mamba2Model:
    name: str
    num_ssm_layers: int
    geom: Mamba2Geometry


MAMBA2_MODELS = {
    m.name: m
    for m in (
        Mamba2Model("nemotron-3-nano-4b", 21, Mamba2Geometry(nheads=96, headdim=80, dstate=128, ngroups=8)),
        Mamba2Model("nemotron-h-8b", 24, Mamba2Geometry(nheads=128, headdim=64, dstate=128, ngroups=8)),
        Mamba2Model("nemotron-3-super", 40, Mamba2Geometry(nheads=128, headdim=64, dstate=128, ngroups=8)),
    )
}
# A geometry small enough for the CPU interpreter (CLI default there, tests).
TINY_MAMBA2 = Mamba2Model("tiny", 2, Mamba2Geometry(nheads=8, headdim=16, dstate=16, ngroups=2))


def mamba2_model(name: str) -> Mamba2Model:
    if name == TINY_MAMBA2.name:
        return TINY_MAMBA2
    try:
        return MAMBA2_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown Mamba2 model {name!r}; known: {', '.join(MAMBA2_MODELS)}, tiny") from None

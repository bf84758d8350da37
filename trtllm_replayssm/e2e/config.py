"""Geometry of a hybrid decoder: the layer pattern and the sizes of each block.

A pattern has one character per block, each a pre-norm residual block: ``M`` a Mamba2
mixer, ``G`` a Gated DeltaNet mixer, ``*`` attention, ``-`` an MLP (``models.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..cache import GDNGeometry, Mamba2Geometry
from ..models import GDN_MODELS, MAMBA2_MODELS


@dataclass(frozen=True)
class HybridConfig:
    name: str
    pattern: str
    hidden: int
    vocab: int
    ssm: Union[Mamba2Geometry, GDNGeometry]
    attn_heads: int
    kv_heads: int
    head_dim: int
    mlp_hidden: int
    mlp_act: str  # "relu2" (Nemotron) or "swiglu" (Qwen)
    conv_kernel: int = 4

    def __post_init__(self):
        if set(self.pattern) - set("MG*-"):
            raise ValueError(f"pattern may hold only M, G, * and -, got {self.pattern!r}")
        if self.mlp_act not in ("relu2", "swiglu"):
            raise ValueError(f"mlp_act must be relu2 or swiglu, got {self.mlp_act!r}")

    @property
    def family(self) -> str:
        return "gdn" if isinstance(self.ssm, GDNGeometry) else "mamba2"

    @property
    def num_ssm_layers(self) -> int:
        return sum(c in "MG" for c in self.pattern)


NANO_PATTERN = "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-"
QWEN35_PATTERN = "G-G-G-*-" * 8  # full attention every 4th decoder layer, each layer mixer + MLP

HYBRID_MODELS = {
    c.name: c
    for c in (
        HybridConfig("nemotron-3-nano-4b", NANO_PATTERN, hidden=3136, vocab=131072,
                     ssm=MAMBA2_MODELS["nemotron-3-nano-4b"].geom, attn_heads=40, kv_heads=8, head_dim=128,
                     mlp_hidden=12544, mlp_act="relu2"),
        HybridConfig("qwen3.5-4b", QWEN35_PATTERN, hidden=2560, vocab=248320, ssm=GDN_MODELS["qwen3.5-4b"].geom,
                     attn_heads=16, kv_heads=4, head_dim=256, mlp_hidden=9216, mlp_act="swiglu"),
        # Small enough for the CPU interpreter (tests, the main job without a GPU).
        HybridConfig("tiny-hybrid", "M-M*-M-", hidden=64, vocab=256,
                     ssm=Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2), attn_heads=4, kv_heads=2,
                     head_dim=16, mlp_hidden=128, mlp_act="relu2"),
        HybridConfig("tiny-hybrid-gdn", "G-G-*-", hidden=64, vocab=256,
                     ssm=GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16), attn_heads=4,
                     kv_heads=2, head_dim=16, mlp_hidden=128, mlp_act="swiglu"),
    )
}


def hybrid_config(name: str) -> HybridConfig:
    try:
        return HYBRID_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown hybrid model {name!r}; known: {', '.join(HYBRID_MODELS)}") from None

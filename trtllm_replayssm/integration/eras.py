"""Which TensorRT-LLM is installed, and whether this project can patch it.

Two eras (``trtllm.md``): 1.2.x (autoregressive decode; Nemotron-H, Qwen3-Next) and
1.3+ / main (adds Qwen3.5 and MTP speculative decode; the cache manager moved). An era is
chosen by version *and* by checking that every hook its adapter patches exists; anything
else is refused with a message listing what is supported (never a partial patch).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple


class UnsupportedTensorRTLLM(RuntimeError):
    pass


@dataclass(frozen=True)
class Hook:
    """``module.attr``: a function or class this adapter patches or wraps."""

    module: str
    attr: str
    family: str  # mamba2 | gdn | cache

    def resolve(self):
        return getattr(importlib.import_module(self.module), self.attr)


@dataclass(frozen=True)
class Era:
    name: str
    versions: str  # human-readable range
    min_version: Tuple[int, int]
    max_version: Optional[Tuple[int, int]]  # exclusive; None: open-ended
    hooks: Tuple[Hook, ...]
    speculative: bool
    adapter: str  # the module of this package that extends the era's cache manager

    def covers(self, version: Tuple[int, int]) -> bool:
        return version >= self.min_version and (self.max_version is None or version < self.max_version)


_MIXER = "tensorrt_llm._torch.modules.mamba.mamba2_mixer"
_KV_MAMBA = "tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager"
_KV_V2 = "tensorrt_llm.runtime.kv_cache_manager_v2"
ERAS = (
    Era("trtllm-1.2", "1.2.x", (1, 2), (1, 3), (
        Hook(_MIXER, "selective_state_update", "mamba2"),
        Hook("tensorrt_llm._torch.models.modeling_qwen3_next", "fused_sigmoid_gating_delta_rule_update", "gdn"),
        Hook("tensorrt_llm._torch.pyexecutor.mamba_cache_manager", "MambaCacheManager", "cache"),
    ), speculative=False, adapter="era_v1_2"),
    # Main: the mixer binds one of two state-update functions at construction (FlashInfer's
    # for headdim 64/128, the Triton one otherwise), so both are replaced; the cache side is
    # the V2 hybrid manager with its Mamba cache features.
    Era("trtllm-main", ">= 1.3 (main)", (1, 3), None, (
        Hook(_MIXER, "selective_state_update_native", "mamba2"),
        Hook(_MIXER, "selective_state_update_fi", "mamba2"),
        Hook("tensorrt_llm._torch.modules.mamba.gdn_mixer", "fused_sigmoid_gating_delta_rule_update", "gdn"),
        Hook(_KV_MAMBA, "MambaHybridCacheManagerV2", "cache"),
        Hook(_KV_MAMBA, "MambaAuxCacheExtension", "cache"),
        Hook(_KV_MAMBA, "MambaStateUpdateStrategy", "cache"),
        Hook(_KV_MAMBA + ".common", "register_mamba_aux_cache_estimator", "cache"),
        Hook(_KV_V2, "BufferConfig", "cache"),
        Hook(_KV_V2, "DataRole", "cache"),
    ), speculative=True, adapter="era_main"),
)


def parse_version(text: str) -> Tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text)
    if not m:
        raise UnsupportedTensorRTLLM(f"cannot read TensorRT-LLM version {text!r}; {supported()}")
    return int(m.group(1)), int(m.group(2))


def supported() -> str:
    return "supported: " + "; ".join(f"TensorRT-LLM {e.versions} ({e.name})" for e in ERAS)


def missing_hooks(era: Era, families: Tuple[str, ...]) -> List[str]:
    out = []
    for h in era.hooks:
        if h.family in families or h.family == "cache":
            try:
                h.resolve()
            except (ImportError, AttributeError) as e:
                out.append(f"{h.module}.{h.attr} ({type(e).__name__})")
    return out


def detect_era(families: Tuple[str, ...] = ("mamba2", "gdn"), version: Optional[str] = None) -> Era:
    """The era of the installed TensorRT-LLM, after checking every hook it needs."""
    if version is None:
        try:
            version = importlib.import_module("tensorrt_llm").__version__
        except ImportError:
            raise UnsupportedTensorRTLLM(f"TensorRT-LLM is not installed; {supported()}") from None
    v = parse_version(version)
    era = next((e for e in ERAS if e.covers(v)), None)
    if era is None:
        raise UnsupportedTensorRTLLM(f"TensorRT-LLM {version} is not supported; {supported()}")
    missing = missing_hooks(era, families)
    if missing:
        raise UnsupportedTensorRTLLM(f"TensorRT-LLM {version} ({era.name}) lacks hooks this project patches: "
                                     f"{', '.join(missing)}; nothing was patched. {supported()}")
    return era


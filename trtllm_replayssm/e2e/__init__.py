"""Model-level decode rig: a hybrid decoder (Mamba2 or GDN mixers, attention, MLPs) at a
real model's shapes with random weights, to measure what the SSM kernels change in a
whole decode step. TensorRT-LLM cannot run here; this rig does the same per-token work."""

from .config import HYBRID_MODELS, HybridConfig, hybrid_config
from .model import DecodeCaches, HybridDecoder
from .runner import DecodeRunner

__all__ = ["HYBRID_MODELS", "HybridConfig", "hybrid_config", "HybridDecoder", "DecodeCaches", "DecodeRunner"]

"""What ReplaySSM adds to a deployment's memory: rings and cursors per slot, in total."""

from __future__ import annotations

from typing import Dict

import torch

from ..cache import gdn_bytes_per_slot, mamba2_bytes_per_slot
from .hf_config import SSMModel

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def replay_memory(m: SSMModel, max_batch: int, buffer_len: int, state_dtype: str = "fp32",
                  ring_dtype: str = "bf16") -> Dict[str, int]:
    """Bytes per slot over all SSM layers (``checkpoint``: the state the engine holds
    anyway; ``extra``: rings + cursors) and for ``max_batch`` slots. ``ring_dtype``: the
    activation dtype for Mamba2 rings; GDN rings are fp32 (the drift study's choice)."""
    if m.family == "gdn":
        per = gdn_bytes_per_slot(m.geom, buffer_len, m.num_ssm_layers, DTYPES[state_dtype], torch.float32)
    else:
        per = mamba2_bytes_per_slot(m.geom, buffer_len, m.num_ssm_layers, DTYPES[state_dtype], DTYPES[ring_dtype])
    return {**{f"{k}_per_slot": v for k, v in per.items()}, "extra_total": per["extra"] * max_batch,
            "checkpoint_total": per["checkpoint"] * max_batch}

"""What ReplaySSM adds to a deployment's memory: rings and cursors per slot, in total."""

from __future__ import annotations

from typing import Dict, Optional

import torch

from ..cache import gdn_bytes_per_slot, gdn_ring_dtype, mamba2_bytes_per_slot
from ..ops.mamba2.spec import ring_capacity
from .hf_config import SSMModel

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def replay_memory(m: SSMModel, max_batch: int, buffer_len: int, state_dtype: str = "fp32",
                  ring_dtype: str = "bf16", spec_tokens: Optional[int] = None) -> Dict[str, int]:
    """Bytes per slot over all SSM layers (``checkpoint``: the state the engine holds
    anyway; ``extra``: rings + cursors) and for ``max_batch`` slots. ``ring_dtype``: the
    activation dtype for Mamba2 rings; GDN rings take the state dtype's (the drift study's
    choice, ``cache.gdn_ring_dtype``).
    ``spec_tokens``: T of speculative decoding; the rings are then circular,
    ``ring_capacity(T, buffer_len)`` entries (the buffer length is the history budget),
    its cursors take 9 bytes a slot (``origin`` and ``is_flush`` beside ``write_pos``), and
    ``standard_spec_total`` is what the standard spec path keeps instead: T intermediate
    states for each of ``max_batch`` rows."""
    ring_len = buffer_len if spec_tokens is None else ring_capacity(spec_tokens, buffer_len)
    if m.family == "gdn":
        per = gdn_bytes_per_slot(m.geom, ring_len, m.num_ssm_layers, DTYPES[state_dtype],
                                 gdn_ring_dtype(DTYPES[state_dtype], speculative=spec_tokens is not None))
    else:
        per = mamba2_bytes_per_slot(m.geom, ring_len, m.num_ssm_layers, DTYPES[state_dtype], DTYPES[ring_dtype])
    extra_totals = {}
    if spec_tokens is not None:
        more = 4 + 1  # origin (int32), is_flush (int8)
        per = {**per, "cursors": per["cursors"] + more, "extra": per["extra"] + more, "total": per["total"] + more}
        extra_totals["standard_spec_total"] = spec_tokens * per["checkpoint"] * max_batch
    return {**{f"{k}_per_slot": v for k, v in per.items()}, "ring_len": ring_len,
            "extra_total": per["extra"] * max_batch, "checkpoint_total": per["checkpoint"] * max_batch, **extra_totals}

"""The cycle rig of a model's family (``models.md`` geometry by name)."""

from __future__ import annotations

import torch

from ..models import GDNGeometry, model
from .gdn_ar import GDNCase, make_gdn_rig
from .mamba2_ar import Mamba2Case, make_rig
from .rig import CycleRig


def make_model_rig(name: str, batch: int, buffer_len: int, state_dtype: torch.dtype) -> CycleRig:
    """A Mamba2 or GDN rig (enough layers for a cold L2) of model ``name`` at this batch."""
    geom = model(name).geom
    if isinstance(geom, GDNGeometry):
        return make_gdn_rig(GDNCase(name, geom, batch, buffer_len, state_dtype))
    return make_rig(Mamba2Case(name, geom, batch, buffer_len, state_dtype))

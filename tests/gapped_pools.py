"""Pools whose slots lie further apart than a slot's block, as an engine's paged pool
lays them out (TensorRT-LLM's KV cache manager V2 keeps a slot's state, conv state and
other per-slot buffers of a layer together in one page)."""

from __future__ import annotations

import math

import torch

GAP_FILL = 1234.5


class GappedPool:
    """``(slots, *block)`` zeros at a slot stride of ``block + gap`` elements, the gaps
    filled with :data:`GAP_FILL`."""

    def __init__(self, shape, dtype, device, gap: int = 24):
        block = math.prod(shape[1:])
        self.backing = torch.full((shape[0], block + gap), GAP_FILL, dtype=dtype, device=device)
        self.view = self.backing[:, :block].view(shape[0], *shape[1:])
        self.view.zero_()
        self.block = block
        self.fill = torch.full((), GAP_FILL, dtype=dtype).item()  # as the dtype holds it (int: 1234)

    def gaps_untouched(self) -> bool:
        return bool((self.backing[:, self.block:] == self.fill).all())


def gapped_rings(layout, num_layers: int, num_slots: int, device, gap: int = 24):
    """Per-layer gapped pools for a ring layout (``mamba2_ring_layout`` / ``gdn_ring_layout``):
    ``(pools, views)``, each a dict ring name -> list over layers."""
    pools = {name: [GappedPool((num_slots, *block), dtype, device, gap) for _ in range(num_layers)]
             for name, (block, dtype) in layout.items()}
    return pools, {name: [p.view for p in ps] for name, ps in pools.items()}

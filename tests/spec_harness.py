"""Shared by the speculative verify's tests of both families."""

from typing import Callable, Dict, List

import torch

from mamba2_harness import DEVICE, rel_err


def check_accepted_tokens(out: torch.Tensor, rows: List[int], accepted: torch.Tensor, num_tokens: int, pad: int,
                          decode_step: Callable[[int, torch.Tensor], Dict[str, torch.Tensor]], tol: float,
                          where: str) -> None:
    """Decode a verify's accepted tokens one at a time and compare. For token ``t``, the
    rows that accepted more than ``t`` tokens step (their slots in ``live``; the others
    are ``pad``) through ``decode_step(t, live)``, which returns each kernel's outputs by
    name ``(B, ...)``; every stepping row's verify output ``out[r, t]`` must equal each
    within ``tol``."""
    for t in range(num_tokens):
        live = torch.tensor([s if t < int(accepted[r]) else pad for r, s in enumerate(rows)], dtype=torch.int32,
                            device=DEVICE)
        for name, y in decode_step(t, live).items():
            for r, s in enumerate(live.tolist()):
                if s != pad:
                    err = rel_err(out[r, t].cpu(), y[r].double().cpu())
                    assert err <= tol, f"{where} row {r} token {t}: the {name} kernel differs by {err:.3g}"


# Slot cursors a verify step must refuse (NaN outputs, state and ring untouched), as
# (cursor, its value given Bh and the ring's length buf), for T = 2: the first write_pos
# whose drafts overflow the ring's capacity Bh + T, and each cursor just outside its range.
BAD_SPEC_CURSORS = {
    "drafts_past_capacity": ("write_pos", lambda Bh, buf: Bh + 1),
    "write_pos_below_0": ("write_pos", lambda Bh, buf: -1),
    "origin_past_ring": ("origin", lambda Bh, buf: buf),
    "origin_below_0": ("origin", lambda Bh, buf: -1),
}


def cursors_with_bad_row(bad_cursor, Bh: int, buf: int, slots: int = 3) -> Dict[str, torch.Tensor]:
    """Verify cursors of ``slots`` slots, every slot flushing from an empty history, but
    slot 1 with ``bad_cursor`` (an entry of :data:`BAD_SPEC_CURSORS`)."""
    cur = dict(write_pos=torch.zeros(slots, dtype=torch.int32, device=DEVICE),
               origin=torch.zeros(slots, dtype=torch.int32, device=DEVICE),
               is_flush=torch.ones(slots, dtype=torch.int8, device=DEVICE))
    name, value = bad_cursor
    cur[name][1] = value(Bh, buf)
    return cur

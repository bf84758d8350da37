"""Slot / cursor lifecycle of ReplaySSM beside an engine-owned state pool, against the
standard kernel on a copy of the pool: prefill -> decode (flushes) -> a slot joins ->
a mixed batch needs the exact state -> a slot is freed and reused -> padding rows."""

import pytest
import torch

from mamba2_harness import DEVICE
from trtllm_replayssm.cache import GDNGeometry, Mamba2Geometry
from trtllm_replayssm.integration import lifecycle
from trtllm_replayssm.integration.lifecycle import ReplaySlots
from trtllm_replayssm.ops.gdn import fused_sigmoid_gating_delta_rule_update
from trtllm_replayssm.ops.mamba2 import selective_state_update

PAD = -1
SLOTS = 4


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


RING_LEN = 4


class Mamba2Engine:
    """Two Mamba2 layers; the engine's pool and a standard twin of it."""

    geom = Mamba2Geometry(nheads=4, headdim=8, dstate=16, ngroups=2)

    def __init__(self, g):
        self.g = g
        self.pool = torch.randn(2, SLOTS, 4, 8, 16, generator=g).to(DEVICE)
        self.twin = self.pool.clone()
        self.A = [-(torch.rand(4, generator=g) + 0.5).to(DEVICE) for _ in range(2)]
        self.D = torch.randn(4, generator=g).to(DEVICE)

    def prefill(self, slot):
        s = torch.randn(2, 4, 8, 16, generator=self.g).to(DEVICE)
        self.pool[:, slot], self.twin[:, slot] = s, s

    def step(self, replay: ReplaySlots, rows):
        idx = torch.tensor(rows, dtype=torch.int32, device=DEVICE)
        n = len(rows)
        ys = []
        for i in range(2):
            kw = dict(x=torch.randn(n, 4, 8, generator=self.g).to(DEVICE),
                      dt=torch.randn(n, 4, generator=self.g).to(DEVICE), A=self.A[i],
                      B=torch.randn(n, 2, 16, generator=self.g).to(DEVICE),
                      C=torch.randn(n, 2, 16, generator=self.g).to(DEVICE), D=self.D, dt_softplus=True,
                      state_batch_indices=idx, pad_slot_id=PAD)
            y_std = selective_state_update(self.twin[i], **kw)
            y_rep = replay.mamba2_step(i, self.pool[i], **kw, disable_state_update=False)
            ys.append((y_rep, y_std))
        replay.after_step(idx)
        return ys

    def replay_slots(self, **kw) -> ReplaySlots:
        return ReplaySlots(self.geom, 2, SLOTS, RING_LEN, act_dtype=torch.float32, device=DEVICE, **kw)

    def make_exact(self, replay: ReplaySlots, slots):
        replay.make_exact(list(self.pool), torch.tensor(slots, device=DEVICE), A=self.A)


class GDNEngine:
    """One GDN layer, as :class:`Mamba2Engine` (its pool random from the start)."""

    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=8)

    def __init__(self, g):
        self.g = g
        self.pool = (torch.randn(1, SLOTS, 2, 8, 16, generator=g) * 0.3).to(DEVICE)
        self.twin = self.pool.clone()
        self.A_log, self.dt_bias = torch.randn(2, generator=g).to(DEVICE) * 0.5, torch.randn(2, generator=g).to(DEVICE)

    def step(self, replay: ReplaySlots, rows):
        idx = torch.tensor(rows, dtype=torch.int32, device=DEVICE)
        args = [torch.randn(len(rows), *s, generator=self.g).to(DEVICE) for s in ((1, 16), (1, 16), (2, 8), (2,), (2,))]
        o_std = fused_sigmoid_gating_delta_rule_update(self.twin[0], *args, self.A_log, self.dt_bias,
                                                       initial_state_indices=idx)
        o_rep = replay.gdn_step(0, self.pool[0], *args, self.A_log, self.dt_bias, initial_state_indices=idx)
        replay.after_step(idx)
        return [(o_rep, o_std)]

    def replay_slots(self, **kw) -> ReplaySlots:
        return ReplaySlots(self.geom, 1, SLOTS, RING_LEN, device=DEVICE, **kw)

    def make_exact(self, replay: ReplaySlots, slots):
        replay.make_exact(list(self.pool), torch.tensor(slots, device=DEVICE))


def _check(ys, rows, step):
    for y_rep, y_std in ys:
        for r, s in enumerate(rows):
            if s != PAD:
                assert _rel(y_rep[r], y_std[r]) < 1e-4, f"step {step} row {r}"


def test_mamba2_slot_lifecycle():
    g = torch.Generator().manual_seed(0)
    eng = Mamba2Engine(g)
    replay = eng.replay_slots()
    assert replay.extra_bytes() > 0
    for s in (2, 0):
        eng.prefill(s)
    replay.on_slots_assigned(torch.tensor([2, 0], dtype=torch.int32, device=DEVICE))
    rows = [2, 0, PAD]
    for step in range(6):  # crosses a flush
        _check(eng.step(replay, rows), rows, step)
    # Slot 1 joins mid-cycle.
    eng.prefill(1)
    replay.on_slots_assigned(torch.tensor([1], dtype=torch.int32, device=DEVICE))
    rows = [2, 1, 0, PAD]
    for step in range(3):
        _check(eng.step(replay, rows), rows, 10 + step)
    # A mixed batch: slot 0's exact state is needed (the chunked kernel reads the pool).
    assert int(replay.write_pos[0]) > 0
    eng.make_exact(replay, [0, PAD])
    assert _rel(eng.pool[:, 0], eng.twin[:, 0]) < 1e-5 and int(replay.write_pos[0]) == 0
    # Slot 2 is freed and given to a new request.
    eng.prefill(2)
    replay.on_slots_assigned(torch.tensor([2], dtype=torch.int32, device=DEVICE))
    wp3 = int(replay.write_pos[3])
    for step in range(5):
        _check(eng.step(replay, rows), rows, 20 + step)
    assert int(replay.write_pos[3]) == wp3  # the unused slot never moved


def test_gdn_decode_step_against_standard():
    eng = GDNEngine(torch.Generator().manual_seed(1))
    pool, twin = eng.pool, eng.twin
    replay = eng.replay_slots()
    replay.on_slots_assigned(torch.tensor([3, 1], dtype=torch.int32, device=DEVICE))
    rows = [3, PAD, 1]
    for step in range(7):
        _check(eng.step(replay, rows), rows, step)
    # A padding row's -1 is no slot: as an index it would be the last slot (3, with entries
    # in its ring), folded and left in its ring to be folded again.
    assert int(replay.write_pos[3]) > 0
    last = pool[0, 3].clone()
    eng.make_exact(replay, [1, PAD])
    assert torch.equal(pool[0, 3], last) and int(replay.write_pos[1]) == 0
    eng.make_exact(replay, [3, 1])
    assert _rel(pool[0, 3], twin[0, 3]) < 1e-5 and _rel(pool[0, 1], twin[0, 1]) < 1e-5


def _routes_by_batch(rows_from: int):
    """A stand-in for the measured dispatcher, which switches route by batch size:
    ``standard_step`` from ``rows_from`` rows on, ``output_only`` below."""
    return lambda state, x, _: "standard_step" if x.shape[0] >= rows_from else "output_only"


# Steps of two rows (a replay route) and of four (the dispatcher's standard_step), so that
# slots reach a standard step with entries in their rings, across several flushes.
SMALL, LARGE = [2, 0], [2, PAD, 1, 0]
AUTO_STEPS = [SMALL] * 2 + [LARGE] + [SMALL] * 5 + [LARGE] + [SMALL] * 3


@pytest.mark.parametrize("engine, dispatcher", [(Mamba2Engine, "choose_route"), (GDNEngine, "choose_gdn_route")],
                         ids=["mamba2", "gdn"])
def test_auto_route_follows_the_batch(monkeypatch, engine, dispatcher):
    """``route="auto"``: a step takes the dispatcher's route for its batch, and its
    ``standard_step`` runs as ``always_flush``: a slot may come from replay steps with a
    non-empty ring, which ``standard_step`` would ignore and ``always_flush`` folds."""
    monkeypatch.setattr(lifecycle, dispatcher, _routes_by_batch(3))
    eng = engine(torch.Generator().manual_seed(4))
    replay = eng.replay_slots(route="auto")
    replay.on_slots_assigned(torch.tensor([2, 0, 1], dtype=torch.int32, device=DEVICE))
    for step, rows in enumerate(AUTO_STEPS):
        _check(eng.step(replay, rows), rows, step)
    assert int(replay.write_pos[0]) > 0  # (the last steps left entries to fold)
    eng.make_exact(replay, [0, 1, 2])
    assert _rel(eng.pool, eng.twin) < 1e-5


def test_speculative_verify_and_commit():
    """spec=(T, Bh): verify writes the drafts, commit moves by the accepted count; a padding
    row (accepted 0) and unused slots stay put; outputs match the standard spec path."""
    from trtllm_replayssm.ops.mamba2.spec_standard import promote_spec_state, selective_state_update_spec_standard

    geom, T, Bh = Mamba2Geometry(nheads=2, headdim=8, dstate=16, ngroups=1), 2, 4
    g = torch.Generator().manual_seed(2)
    pool = torch.randn(1, SLOTS, 2, 8, 16, generator=g).to(DEVICE)
    twin = pool.clone()
    inter = torch.zeros(SLOTS, T, 2, 8, 16, device=DEVICE)
    replay = ReplaySlots(geom, 1, SLOTS, act_dtype=torch.float32, device=DEVICE, spec=(T, Bh))
    idx = torch.tensor([1, PAD, 2], dtype=torch.int32, device=DEVICE)
    replay.on_slots_assigned(idx)
    A = -(torch.rand(2, generator=g) + 0.5).to(DEVICE)
    flushes = 0
    for step in range(6):
        flushes += int(replay.is_flush[2])
        kw = dict(x=torch.randn(3, T, 2, 8, generator=g).to(DEVICE), dt=torch.randn(3, T, 2, generator=g).to(DEVICE),
                  A=A, B=torch.randn(3, T, 1, 16, generator=g).to(DEVICE),
                  C=torch.randn(3, T, 1, 16, generator=g).to(DEVICE), dt_softplus=True, state_batch_indices=idx,
                  pad_slot_id=PAD)
        y_rep = replay.mamba2_verify(0, pool[0], **kw)
        y_std = selective_state_update_spec_standard(twin[0], **kw, intermediate_states=inter)
        for r in (0, 2):
            assert _rel(y_rep[r], y_std[r]) < 1e-4, f"step {step} row {r}"
        accepted = torch.tensor([1 + step % 2, 0, 2], dtype=torch.int32, device=DEVICE)
        before = replay.write_pos.clone()
        replay.commit(accepted, idx)
        promote_spec_state(twin[0], inter, accepted, idx, PAD)
        assert int(replay.write_pos[0]) == int(before[0]) and int(replay.write_pos[3]) == int(before[3])
    assert flushes >= 2  # slot 2's ring went round


def test_cursors_come_back_from_the_mirror():
    """An engine that moves a request's pages to another slot moves its row of the cursor
    mirror with them; ``restore_cursors`` gives the new slot each of the old slot's
    verify cursors (write_pos, origin, is_flush) and leaves the other slots alone."""
    geom = Mamba2Geometry(nheads=2, headdim=8, dstate=16, ngroups=1)
    mirror = torch.zeros(SLOTS, 4, dtype=torch.int32, device=DEVICE)
    replay = ReplaySlots(geom, 1, SLOTS, act_dtype=torch.float32, device=DEVICE, spec=(2, 4), cursor_mirror=mirror)
    idx = torch.tensor([1, 2], dtype=torch.int32, device=DEVICE)
    replay.on_slots_assigned(idx)
    for accepted in ([2, 1], [1, 2], [2, 2], [1, 1], [2, 1]):
        replay.commit(torch.tensor(accepted, dtype=torch.int32, device=DEVICE), idx)

    def cursors(slot):
        return [int(replay.write_pos[slot]), int(replay.origin[slot]), int(replay.is_flush[slot])]

    moved, kept = cursors(1), cursors(2)
    assert len(set(moved)) == 3  # (three different values: a column read for another cannot pass)
    mirror[3] = mirror[1]
    replay.restore_cursors(torch.tensor([3], device=DEVICE))
    assert cursors(3) == moved and cursors(2) == kept


def test_bad_arguments_raise_at_construction():
    """A route or a speculative size no step could take raises when the engine builds its
    ReplaySlots, not at the first decode step inside the engine's forward; restoring
    cursors without a mirror says what is missing."""
    m2, gdn = Mamba2Geometry(nheads=4, headdim=8, dstate=16, ngroups=2), GDNGeometry(2, 4, 16, 16)
    with pytest.raises(ValueError, match="route must be one of"):
        ReplaySlots(m2, 1, 4, device=DEVICE, route="fastest")
    with pytest.raises(ValueError, match="route must be one of"):
        ReplaySlots(gdn, 1, 4, device=DEVICE, route="state_and_output")  # a Mamba2-only route
    with pytest.raises(ValueError, match="T \\(tokens per verify step\\)"):
        ReplaySlots(m2, 1, 4, device=DEVICE, spec=(9, 16))
    with pytest.raises(ValueError, match="history budget"):
        ReplaySlots(gdn, 1, 4, device=DEVICE, spec=(4, 2))
    slots = ReplaySlots(m2, 1, 4, device=DEVICE)
    with pytest.raises(ValueError, match="cursor_mirror"):
        slots.restore_cursors(torch.tensor([1], device=DEVICE))

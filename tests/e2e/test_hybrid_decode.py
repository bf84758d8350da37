"""Model-level correctness: standard and ReplaySSM decoding of the same hybrid decoder
pick the same greedy tokens for several ring cycles (flushes included)."""

import pytest
import torch

from conftest import requires_cuda
from mamba2_harness import DEVICE
from trtllm_replayssm.e2e import DecodeRunner, HybridDecoder, hybrid_config

L = 4


def decode_both(name: str, steps: int, batch: int = 3, dtype=torch.float32, state_dtype=torch.float32,
                max_len: int = 32, graphs: bool = False, teacher_forced: bool = False, staggered: bool = False):
    model = HybridDecoder(hybrid_config(name), dtype=dtype, device=DEVICE)
    runs = {}
    for replay in (False, True):
        r = DecodeRunner(model, batch, replay, max_len, buffer_len=L, state_dtype=state_dtype, staggered=staggered)
        if graphs:
            r.capture()
        feed = runs[False][1] if replay and teacher_forced else None
        runs[replay] = (r, r.run(steps, feed=feed))
    return runs


@pytest.mark.parametrize("name", ["tiny-hybrid", "tiny-hybrid-gdn"])
def test_greedy_tokens_identical_over_cycles(name):
    runs = decode_both(name, steps=3 * L + 2)  # 3 flushes per row
    std, rep = runs[False][1], runs[True][1]
    assert torch.stack(std).unique().numel() > 3, "degenerate decode (always the same token)"
    for t, (a, b) in enumerate(zip(std, rep)):
        assert torch.equal(a, b), f"step {t}: standard {a.tolist()} != replay {b.tolist()}"
    # Same logits within fp32 rounding, and the cursors went round the ring.
    r_std, r_rep = runs[False][0], runs[True][0]
    torch.testing.assert_close(r_rep.logits.float(), r_std.logits.float(), rtol=1e-4, atol=1e-4)
    assert (r_rep.caches.ssm.write_pos == (3 * L + 2) % L).all()  # went round the ring 3 times


@pytest.mark.parametrize("name", ["tiny-hybrid", "tiny-hybrid-gdn"])
def test_staggered_cursors_pick_the_same_tokens(name):
    """``staggered``: the ReplaySSM path's rows are force-flushed once each over the first L
    steps, which spreads their cursors over the phases (a server's requests); over the next
    cycle and a half (a natural flush for every row) the tokens stay those of the standard
    path, and the rows flush at different steps."""
    runs = decode_both(name, steps=2 * L + 2, staggered=True)
    for t, (a, b) in enumerate(zip(runs[False][1], runs[True][1])):
        assert torch.equal(a, b), f"step {t}: standard {a.tolist()} != replay {b.tolist()}"
    torch.testing.assert_close(runs[True][0].logits.float(), runs[False][0].logits.float(), rtol=1e-4, atol=1e-4)
    assert len(set(runs[True][0].caches.ssm.write_pos.tolist())) == 3  # 3 rows, 3 phases


def test_a_staggered_runner_is_captured_only_after_its_staggering_steps():
    model = HybridDecoder(hybrid_config("tiny-hybrid"), dtype=torch.float32, device=DEVICE)
    r = DecodeRunner(model, 2, True, 16, buffer_len=L, staggered=True)
    r.run(L - 1)
    with pytest.raises(RuntimeError, match="staggering steps"):
        r.capture()


@pytest.mark.parametrize("name", ["tiny-hybrid", "tiny-hybrid-gdn"])
def test_speculative_replay_matches_standard_spec(name):
    """T = 4 verify steps with 3 tokens accepted: the replay path (circular ring, cursor
    commits, flushes) and the standard path (T intermediate states, promote) choose the
    same tokens and give the same logits."""
    model = HybridDecoder(hybrid_config(name), dtype=torch.float32, device=DEVICE)
    runs = {}
    for replay in (False, True):
        r = DecodeRunner(model, 2, replay, 64, buffer_len=8, num_tokens=4, accepted=3)
        runs[replay] = (r, r.run(8))
    for t, (a, b) in enumerate(zip(runs[False][1], runs[True][1])):
        assert torch.equal(a, b), f"step {t}: standard {a.tolist()} != replay {b.tolist()}"
    torch.testing.assert_close(runs[True][0].logits.float(), runs[False][0].logits.float(), rtol=1e-4, atol=1e-4)
    assert int(runs[True][0].caches.origin.max()) > 0, "no flush happened"


def test_staggered_speculative_replay_matches_standard_spec():
    """``staggered`` speculative decode: both paths hold rows back (one accepted token a
    step) over the first steps, which spreads the rows over their flush period; the replay
    path still chooses the standard path's tokens, and its rows flush at different steps."""
    model = HybridDecoder(hybrid_config("tiny-hybrid"), dtype=torch.float32, device=DEVICE)
    runs, flush_rows = {}, []
    for replay in (False, True):
        r = DecodeRunner(model, 3, replay, 64, buffer_len=8, num_tokens=4, accepted=3, staggered=True)
        tokens = []
        for _ in range(len(r._accept_schedule) + 4):
            tokens += r.run(1)
            flush_rows.append(r.caches.is_flush.tolist() if replay else None)
        runs[replay] = (r, tokens)
    for t, (a, b) in enumerate(zip(runs[False][1], runs[True][1])):
        assert torch.equal(a, b), f"step {t}: standard {a.tolist()} != replay {b.tolist()}"
    torch.testing.assert_close(runs[True][0].logits.float(), runs[False][0].logits.float(), rtol=1e-4, atol=1e-4)
    assert any(f and len(set(f)) > 1 for f in flush_rows), f"the rows flush together: {flush_rows}"
    with pytest.raises(RuntimeError, match="staggering steps"):
        DecodeRunner(model, 3, True, 64, buffer_len=8, num_tokens=4, accepted=3, staggered=True).capture()


def test_corrupted_ring_changes_the_logits():
    """A test that can fail: one cached ring value corrupted mid-cycle moves the logits."""
    model = HybridDecoder(hybrid_config("tiny-hybrid"), dtype=torch.float32, device=DEVICE)
    r_std = DecodeRunner(model, 2, False, 32, buffer_len=L)
    r_rep = DecodeRunner(model, 2, True, 32, buffer_len=L)
    r_std.run(2), r_rep.run(2)  # rings now hold 2 entries
    r_rep.caches.ssm.x_cache[0, 0, :, 0] += 10.0
    r_std.run(1), r_rep.run(1)
    assert not torch.allclose(r_rep.logits[0], r_std.logits[0], rtol=1e-3, atol=1e-3)


@requires_cuda
@pytest.mark.parametrize("name", ["nemotron-3-nano-4b", "qwen3.5-4b"])
def test_cuda_real_shapes_logits_agree_in_graphs(name):
    """Real shapes in fp32 (weights, activations, state), CUDA graphs, teacher forced: the
    replay path's logits equal the standard path's to 1e-3 (relative L2) over two ring
    cycles. (In bf16 the two paths round differently and 42 random-weight layers amplify
    that to ~2%, which would hide a real error.)"""
    runs = decode_both(name, steps=2 * 16 + 2, batch=4, dtype=torch.float32, max_len=64, graphs=True,
                       teacher_forced=True)
    a, b = runs[True][0].logits.float(), runs[False][0].logits.float()
    assert ((a - b).norm() / b.norm()).item() < 1e-3

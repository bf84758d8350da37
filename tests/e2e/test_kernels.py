"""The decoder's fused non-SSM kernels against their PyTorch references."""

import pytest
import torch

from mamba2_harness import DEVICE
from trtllm_replayssm.e2e.kernels import (causal_conv_update, causal_conv_update_ref, decode_attention,
                                          decode_attention_ref, gated_rms_norm,
                                          gated_rms_norm_ref, mlp_activation, mlp_activation_ref, rms_norm,
                                          rms_norm_ref)

DTYPES = [torch.float32, torch.bfloat16]


def tol(dtype):
    return dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("T,in_place", [(1, True), (1, False), (3, False)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_conv_update(monkeypatch, T, in_place, dtype):
    """The tile form. 300 channels: three blocks, the last partly masked. ``x`` is a column
    slice of a wider projection (as the mixers pass it) and the window a slice of a longer
    buffer; in place (T = 1) the conv state itself moves on by the token."""
    from trtllm_replayssm.e2e import kernels

    monkeypatch.setattr(kernels, "FLAT_CONV_UPDATE", False)
    g = torch.Generator().manual_seed(0)
    B, C, K = 2, 300, 4
    conv = torch.randn(B, C, K - 1, generator=g).to(dtype).to(DEVICE)
    convs = [conv, conv.clone()]
    proj = torch.randn(B, T, C + 17, generator=g).to(dtype).to(DEVICE)
    x = proj[..., 5:5 + C]
    w = torch.randn(C, K, generator=g).to(dtype).to(DEVICE)
    b = torch.randn(C, generator=g).to(dtype).to(DEVICE)
    windows = [torch.zeros(B, C, K + 4, dtype=dtype, device=DEVICE) for _ in range(2)]
    win = [None, None] if in_place else [wi[..., :K - 1 + T] for wi in windows]
    before = convs[0].clone()
    out = causal_conv_update(convs[0], x, w, b, win[0])
    ref = causal_conv_update_ref(convs[1], x, w, b, win[1])
    torch.testing.assert_close(out, ref, **tol(dtype))
    # The window and the new conv state are copies: exact, and nothing past them is written.
    assert torch.equal(windows[0], windows[1]) and torch.equal(convs[0], convs[1])
    assert torch.equal(convs[0], before) != in_place  # (the test can fail: in place the state moved)


@pytest.mark.parametrize("K", [4, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_conv_update_flat(monkeypatch, K, dtype):
    """``FLAT_CONV_UPDATE`` (the default): the in-place update moves the kept inputs as one
    flat array a row; 300 channels (three blocks, the last partly masked), rows 2(K - 1) bytes apart."""
    from trtllm_replayssm.e2e import kernels

    monkeypatch.setattr(kernels, "FLAT_CONV_UPDATE", True)
    g = torch.Generator().manual_seed(1)
    B, C = 2, 300
    conv = torch.randn(B + 1, C, K - 1, generator=g).to(dtype).to(DEVICE)
    convs = [conv, conv.clone()]
    x = torch.randn(B, 1, C + 17, generator=g).to(dtype).to(DEVICE)[..., 5:5 + C]
    w = torch.randn(C, K, generator=g).to(dtype).to(DEVICE)
    b = torch.randn(C, generator=g).to(dtype).to(DEVICE)
    out = causal_conv_update(convs[0][:B], x, w, b)
    ref = causal_conv_update_ref(convs[1][:B], x, w, b)
    torch.testing.assert_close(out, ref, **tol(dtype))
    assert torch.equal(convs[0], convs[1])  # the moved state exactly, and the row past the batch untouched


@pytest.mark.parametrize("act", ["swiglu", "relu2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp_activation(act, dtype):
    g = torch.Generator().manual_seed(3)
    u = torch.randn(3, 1, 2 * 1500, generator=g).to(dtype).to(DEVICE)  # inner 1500 (swiglu): 2 blocks
    out = mlp_activation(u, act)
    torch.testing.assert_close(out, mlp_activation_ref(u, act), **tol(dtype))
    assert out.shape[-1] == (1500 if act == "swiglu" else 3000)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 2, 48, generator=g).to(dtype).to(DEVICE)
    w = torch.randn(48, generator=g).to(dtype).to(DEVICE)
    torch.testing.assert_close(rms_norm(x, w), rms_norm_ref(x, w), **tol(dtype))


@pytest.mark.parametrize("norm_before_gate,shared_weight", [(False, False), (True, True), (True, False)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_rms_norm(norm_before_gate, shared_weight, dtype):
    """Groups of 24 features (not a power of two); ``z`` a column slice of a projection."""
    g = torch.Generator().manual_seed(2)
    G, size = 4, 24
    x = torch.randn(3, 1, G * size, generator=g).to(dtype).to(DEVICE)
    z = torch.randn(3, 1, G * size + 9, generator=g).to(dtype).to(DEVICE)[..., 9:]
    w = torch.randn(size if shared_weight else G * size, generator=g).to(dtype).to(DEVICE)
    args = (x, z, w, size, norm_before_gate)
    out = gated_rms_norm(*args, out_dtype=torch.float32)
    ref = gated_rms_norm_ref(*args, out_dtype=torch.float32)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)  # fp32 out: only the inputs were rounded
    # The gate's place matters: the other order gives another result (the test can fail).
    other = gated_rms_norm_ref(x, z, w, size, not norm_before_gate, out_dtype=torch.float32)
    assert not torch.allclose(out, other, atol=1e-3)


@pytest.mark.parametrize("T,heads,kv_heads", [(1, 5, 1), (3, 4, 2)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_attention(T, heads, kv_heads, dtype):
    """Rows at different positions (one in the first key block, one past it), GQA; the
    cache beyond each row's tokens holds garbage that must not be read."""
    g = torch.Generator().manual_seed(4)
    B, S, D = 2, 80, 16
    pos = torch.tensor([3, 70], device=DEVICE)
    kc = torch.randn(B, S, kv_heads, D, generator=g).to(dtype).to(DEVICE)
    vc = torch.randn(B, S, kv_heads, D, generator=g).to(dtype).to(DEVICE)
    qkv = torch.randn(B, T, (heads + 2 * kv_heads) * D, generator=g).to(dtype).to(DEVICE)
    q = qkv[..., :heads * D].view(B, T, heads, D)  # a slice of the projection, as the block passes it
    out = decode_attention(q, kc, vc, pos)
    ref = decode_attention_ref(q, kc, vc, pos)
    torch.testing.assert_close(out, ref, **tol(dtype))
    kc[0, 3 + T:] = 1e4  # past row 0's last token: invisible
    torch.testing.assert_close(decode_attention(q, kc, vc, pos), out, atol=0, rtol=0)
    kc[0, 1] += 1.0  # a visible key: the output moves (the test can fail)
    assert not torch.allclose(decode_attention(q, kc, vc, pos)[0], out[0], atol=1e-3)

"""The interpreter's skips (``trtllm_replayssm/_interpreter.py``): one patch of
``triton.language`` a launch, the language restored after it, no overflow checks whose
asserts are dropped, and the same results."""

import pytest
import torch
import triton
import triton.language as tl

from trtllm_replayssm._runtime import INTERPRETED

pytestmark = pytest.mark.skipif(not INTERPRETED, reason="the Triton CPU interpreter is not in use")


@triton.jit
def _scaled(x, s):
    return x * s


@triton.jit
def _twice_scaled(x, s):
    return _scaled(_scaled(x, s), 2.0)


@triton.jit
def _helpers_kernel(x_ptr, out_ptr, s, N: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    for _ in range(0, 3):
        x = _twice_scaled(x, s)
    tl.store(out_ptr + offs, tl.sum(x, axis=0) + x)


def test_a_launch_patches_the_language_once_and_restores_it(monkeypatch):
    from triton.runtime import interpreter

    from trtllm_replayssm import _interpreter

    assert _interpreter.skip_nested_patches() and interpreter._patch_lang._skips_nested
    patches = []
    triton_patch = _interpreter._triton_patch_lang
    monkeypatch.setattr(_interpreter, "_triton_patch_lang", lambda fn: patches.append(fn.__name__) or triton_patch(fn))
    load = tl.load
    x = torch.arange(8, dtype=torch.float32)
    out = torch.empty_like(x)
    _helpers_kernel[(2,)](x, out, 1.5, N=4)
    # The kernel's patch covers its helpers (9 calls a program); tl.sum sees triton.language.core,
    # which the kernel does not, so its first call (of 2, a program each) patches that too.
    assert patches == ["_helpers_kernel", "sum"], patches
    assert tl.load is load  # the launch put the language back
    y = x.view(2, 4) * (1.5 * 2.0) ** 3
    torch.testing.assert_close(out, (y.sum(1, keepdim=True) + y).flatten())
    _helpers_kernel[(1,)](x, out, 1.0, N=8)  # a second launch patches again
    assert patches == ["_helpers_kernel", "sum"] * 2


@triton.jit
def _int32_product_kernel(out_ptr, a, b):
    tl.store(out_ptr, a * b + 1)


def test_overflow_checks_that_would_be_dropped_are_not_computed():
    """With debug off the interpreter drops its overflow asserts (as the compiler does), so
    the checks are off, and an int32 product still wraps as on the GPU."""
    from triton.runtime import interpreter

    options = interpreter.interpreter_builder.options
    assert not options.debug and not options.sanitize_overflow
    out = torch.zeros(1, dtype=torch.int32)
    _int32_product_kernel[(1,)](out, 100_000, 1_000_000)
    assert out.item() == (100_000 * 1_000_000 + 1 + 2**31) % 2**32 - 2**31

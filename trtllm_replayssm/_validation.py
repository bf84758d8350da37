"""Argument checks shared by every op wrapper.

Each check raises before any kernel runs, naming the argument and what was expected, so a
wrong layout is an error rather than a silently corrupted recurrent state. Nothing here
reads device memory (no host synchronisation): shapes, dtypes and strides only.
"""

from __future__ import annotations

import argparse
import numbers
from typing import Iterable, Optional, Sequence

import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
FLAG_DTYPES = (torch.bool, torch.int8, torch.uint8, torch.int32)  # per-row force-flush flags


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    name: str,
    t: torch.Tensor,
    shape: Sequence[Optional[int]],
    dtypes: Sequence[torch.dtype],
    device: Optional[torch.device] = None,
) -> None:
    """Check type, rank, sizes (``None`` = any size), dtype and device of ``t``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype in ({_dtype_names(dtypes)}), got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")


def check_vector(
    name: str,
    t: torch.Tensor,
    length: Optional[int],
    dtypes: Sequence[torch.dtype],
    device: Optional[torch.device] = None,
) -> None:
    """A 1-D tensor the kernels read as ``ptr + i`` (slot indices, flush flags, accepted
    counts, GDN's per-head ``A_log`` and ``dt_bias``; ``length`` None: any):
    :func:`check_tensor`, and unit stride, which a slice such as ``t[::2]`` lacks; read
    as packed, it would put rows on other rows' slots, or heads on other heads' gates."""
    check_tensor(name, t, (length,), dtypes, device)
    if t.shape[0] > 1 and t.stride(0) != 1:
        raise ValueError(f"{name} must have unit stride (the kernels read it packed), got stride {t.stride(0)}")


def check_last_dim_contiguous(name: str, t: torch.Tensor) -> None:
    """Vector loads need unit stride along the innermost dimension."""
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have stride 1 along its last dimension, got strides {t.stride()}")


def check_contiguous(name: str, t: torch.Tensor) -> None:
    """Cursor tensors are indexed with unit stride."""
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (a cache tensor), got strides {t.stride()} for shape {tuple(t.shape)}")


def is_slot_major(t: torch.Tensor) -> bool:
    """A pool of per-slot blocks: every dimension after the first packed row-major, and
    slots at least a block apart. The slot stride may exceed the block: an engine's pool
    can interleave other per-slot buffers between two slots' states (TensorRT-LLM's KV
    cache manager V2 does). Kernels index slots with ``stride(0)``."""
    if t.dim() < 2:
        return t.is_contiguous()
    packed = 1
    for size, stride in reversed(list(zip(t.shape[1:], t.stride()[1:]))):
        if size != 1 and stride != packed:
            return False
        packed *= size
    return t.shape[0] <= 1 or t.stride(0) >= packed


def check_slot_major(name: str, t: torch.Tensor) -> None:
    """State pools and rings: see :func:`is_slot_major`."""
    if not is_slot_major(t):
        raise ValueError(f"{name} must hold each slot's block packed (every dimension after the first contiguous, "
                         f"slots at least a block apart), got strides {t.stride()} for shape {tuple(t.shape)}")


def check_broadcast_dims(name: str, t: torch.Tensor, dims: Sequence[int], why: str) -> None:
    """The given dimensions must be expanded views (stride 0) or of size 1."""
    for d in dims:
        if t.shape[d] > 1 and t.stride(d) != 0:
            raise ValueError(f"{name} must not vary along dimension {d} ({why}); got shape {tuple(t.shape)}, strides {t.stride()}")


def check_same_dtype(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.dtype != ref.dtype:
        raise TypeError(f"{name} must have the dtype of {ref_name} ({ref.dtype}), got {t.dtype}")


def check_dtype(name: str, dtype: torch.dtype, dtypes: Sequence[torch.dtype]) -> None:
    """A dtype given as an argument (a cache's state or ring dtype)."""
    if dtype not in dtypes:
        raise TypeError(f"{name} must be in ({_dtype_names(dtypes)}), got {dtype}")


def _check_int(name: str, value) -> None:
    """A size given as a Python int (a bool or a float is a mistake, not a size)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def check_count(name: str, value, least: int = 1) -> None:
    _check_int(name, value)
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value}")


def check_buffer_len(buffer_len: int, max_len: int = 64) -> None:
    _check_int("ring buffer length L", buffer_len)
    if not 1 <= buffer_len <= max_len:
        raise ValueError(f"ring buffer length L must be in [1, {max_len}], got {buffer_len}")


def positive_int(text: str) -> int:
    """argparse type of the command lines' size options: an int >= 1 (in the CLI a 0 had
    meant the default, a negative size a nonsense table or a traceback from deep inside)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value

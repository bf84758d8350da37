"""Load ``libreplayssm_trt_plugins`` and add its layers to a TensorRT network (TensorRT 10.x / 11.x
Python API). Nothing here runs without TensorRT; the plugin sources themselves are
``plugins/tensorrt/replayssm_plugins.cpp``.

    import tensorrt as trt
    from trtllm_replayssm.aot import tensorrt as rs_trt
    rs_trt.load_plugins()                                   # the .so next to the kernel library
    y, state, x_cache, dt_cache, B_cache = rs_trt.add_mamba2_step(
        network, state, x, dt, A, B, C, D, dt_bias, slot_idx,
        rings=(x_cache, dt_cache, B_cache, write_pos), route="output_only")
    (write_pos,) = rs_trt.add_advance(network, write_pos, slot_idx, buffer_len=16, route="output_only")
    (write_pos,) = rs_trt.add_reset(network, write_pos, new_slots)  # before the step's layers

State, rings and cursors are updated in place: the builder config needs
``config.set_preview_feature(trt.PreviewFeature.ALIASED_PLUGIN_IO_10_03, True)``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..ops.cursors import FLUSH_EVERY_STEP
from .library import ROUTE_CODES, find_library

NAMESPACE, VERSION = "replayssm", "1"
PLUGIN_LIB = "libreplayssm_trt_plugins.so"


def _trt():
    try:
        import tensorrt as trt
    except ImportError as e:  # pragma: no cover - TensorRT is not installable on the project's machines
        raise ImportError("the TensorRT Python package is needed to add ReplaySSM layers to a network") from e
    return trt


def load_plugins(path: Optional[str] = None):
    """Load the plugin library (its kernel library first, globally) and register its creators."""
    trt = _trt()
    kernels = find_library()
    if path is None:
        if kernels is None:
            raise FileNotFoundError("libreplayssm_kernels.so not found (cmake -S . -B build && cmake --build build)")
        path = str(Path(kernels).with_name(PLUGIN_LIB))
    if kernels is not None:
        ctypes.CDLL(str(kernels), mode=ctypes.RTLD_GLOBAL)
    trt.get_plugin_registry().load_library(str(path))
    return path


def _fields(**values):
    trt = _trt()
    fields = []
    for name, v in values.items():
        if isinstance(v, float):
            fields.append(trt.PluginField(name, np.array([v], dtype=np.float32), trt.PluginFieldType.FLOAT32))
        else:
            fields.append(trt.PluginField(name, np.array([int(v)], dtype=np.int32), trt.PluginFieldType.INT32))
    return trt.PluginFieldCollection(fields)


def _route_code(route: str) -> int:
    if route not in ROUTE_CODES:
        raise ValueError(f"route must be one of {tuple(ROUTE_CODES)}, got {route!r}")
    return ROUTE_CODES[route]


def _add(network, plugin_name: str, inputs: Sequence, **fields):
    trt = _trt()
    creator = trt.get_plugin_registry().get_creator(plugin_name, VERSION, NAMESPACE)
    if creator is None:
        raise RuntimeError(f"{NAMESPACE}::{plugin_name} is not registered: call load_plugins() first")
    plugin = creator.create_plugin(plugin_name, _fields(**fields), trt.TensorRTPhase.BUILD)
    if plugin is None:  # (the creator printed which rule the fields broke)
        raise RuntimeError(f"{NAMESPACE}::{plugin_name} refused its fields {fields}")
    layer = network.add_plugin_v3(list(inputs), [], plugin)
    return [layer.get_output(i) for i in range(layer.num_outputs)]


def add_mamba2_step(network, state, x, dt, A, B, C, D, dt_bias, slot_idx, rings=None, z=None, force_flush=None,
                    new_slots=None, route: str = "output_only", pad_slot_id: int = -1, max_slots: int = 0,
                    buffer_len: int = 16):
    """One Mamba2 decode step. ``rings=(x_cache, dt_cache, B_cache, write_pos)`` as network
    tensors, or None: the plugin owns rings and cursors for ``max_slots`` slots (the engine
    path where the runtime passes only the state); then ``new_slots (B,) int32`` names the
    slots entering decode at this step (``pad_slot_id`` elsewhere), whose rings are emptied
    first. Returns the output, then the updated state (and rings) that alias the inputs."""
    if new_slots is not None and rings is not None:
        raise ValueError("new_slots is for plugin-owned rings; with network rings reset them with the cursor op")
    if rings is None and max_slots < 1:
        raise ValueError(f"plugin-owned rings (rings=None) need max_slots, the state pool's slots; got {max_slots}")
    if rings is not None and len(rings) != 4:
        raise ValueError(f"rings must be (x_cache, dt_cache, B_cache, write_pos), got {len(rings)} tensors")
    extra = [t for t in (z, force_flush, new_slots) if t is not None]
    inputs = [state, x, dt, A, B, C, D, dt_bias, slot_idx] + list(rings or []) + extra
    return _add(network, "ReplaySSMMamba2Step", inputs, route=_route_code(route), pad_slot_id=pad_slot_id,
                has_z=z is not None, has_force_flush=force_flush is not None, has_reset=new_slots is not None,
                owns_rings=rings is None, max_slots=max_slots, buffer_len=buffer_len)


def add_gdn_step(network, state, q, k, v, a, b, A_log, dt_bias, slot_idx, d_cache, k_cache, g_cache, write_pos,
                 force_flush=None, route: str = "output_only", scale: float = 0.0, pad_slot_id: int = -1):
    """One Gated DeltaNet decode step; returns the output, then state and rings (aliased).
    ``d_cache`` and ``k_cache`` in the state dtype's ring dtype
    (:func:`~trtllm_replayssm.cache.gdn_ring_dtype`: bf16 beside a bf16 state, else fp32)."""
    inputs = [state, q, k, v, a, b, A_log, dt_bias, slot_idx, d_cache, k_cache, g_cache, write_pos]
    inputs += [force_flush] if force_flush is not None else []
    return _add(network, "ReplaySSMGDNStep", inputs, route=_route_code(route), pad_slot_id=pad_slot_id,
                has_force_flush=force_flush is not None, scale=float(scale))


def add_advance(network, write_pos, slot_idx, buffer_len: int, force_flush=None, route: str = "output_only",
                pad_slot_id: int = -1):
    """The cursor advance, once per step after every layer; returns the cursors (aliased).
    ``route``: the steps' route, as for :meth:`~trtllm_replayssm.cache.Mamba2ReplayCache.advance`.
    On ``standard_step`` and ``always_flush`` every row stored its state, so the cursors go to
    0; a cursor advanced instead would have the next step replay stale ring entries onto the state."""
    if _route_code(route) == ROUTE_CODES["standard"]:
        raise ValueError("the standard route keeps no ring: its steps need no cursor advance")
    inputs = [write_pos, slot_idx] + ([force_flush] if force_flush is not None else [])
    return _add(network, "ReplaySSMAdvance", inputs, buffer_len=buffer_len, flush_all=route in FLUSH_EVERY_STEP,
                has_force_flush=force_flush is not None, pad_slot_id=pad_slot_id)


def add_reset(network, write_pos, new_slots, pad_slot_id: int = -1):
    """Slots entering decode (``new_slots (B,) int32``, ``pad_slot_id`` elsewhere) start with
    empty rings: their cursors go to 0 (on network-owned cursors; before the step's layers).
    Returns the cursors (aliased)."""
    return _add(network, "ReplaySSMReset", [write_pos, new_slots], pad_slot_id=pad_slot_id)

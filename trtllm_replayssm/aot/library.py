"""ctypes bindings of ``libreplayssm_kernels`` (``plugins/replayssm_kernels/replayssm_kernels.h``).

Where the library is looked for, first found wins: ``TRTLLM_REPLAYSSM_LIBRARY`` (a file),
the package's ``lib/`` folder, then ``build/`` beside the sources (``cmake -B build``).
"""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path
from typing import List, Optional

LIB_NAME = "libreplayssm_kernels.so"
PACKAGE_DIR = Path(__file__).resolve().parents[1]

STATUS = {0: "RS_SUCCESS", 1: "RS_ERR_INVALID_ARGUMENT", 2: "RS_ERR_UNSUPPORTED", 3: "RS_ERR_NO_KERNEL_FOR_ARCH",
          4: "RS_ERR_NO_DRIVER", 5: "RS_ERR_NO_CONTEXT", 6: "RS_ERR_CUDA", 7: "RS_ERR_MISALIGNED"}
DTYPE_CODES = {"fp32": 0, "bf16": 1, "fp16": 2}
ROUTE_CODES = {"output_only": 0, "standard_step": 1, "always_flush": 2, "standard": 3}


class RSValue(ctypes.Union):
    _fields_ = [("p", ctypes.c_void_p), ("i", ctypes.c_int64), ("f", ctypes.c_double)]


_p, _i64, _i32, _f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float


class Mamba2StepArgs(ctypes.Structure):
    """``rs_mamba2_step_args``."""

    _fields_ = ([(n, _p) for n in ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "out", "slot_idx",
                                    "x_cache", "dt_cache", "B_cache", "write_pos", "force_flush")]
                + [(n, _i64) for n in ("batch", "num_slots", "nheads", "headdim", "dstate", "ngroups", "buffer_len",
                                       "pad_slot_id")]
                + [("stride_state", _i64 * 3), ("stride_x", _i64 * 2), ("stride_dt", _i64 * 2), ("stride_A", _i64),
                   ("stride_B", _i64 * 2), ("stride_C", _i64 * 2), ("stride_D", _i64 * 2), ("stride_z", _i64 * 2),
                   ("stride_dt_bias", _i64), ("stride_out", _i64 * 2), ("stride_x_cache", _i64 * 3),
                   ("stride_dt_cache", _i64 * 2), ("stride_B_cache", _i64 * 3)]
                + [(n, _i32) for n in ("state_dtype", "act_dtype", "dt_softplus", "route")])


class GDNStepArgs(ctypes.Structure):
    """``rs_gdn_step_args``."""

    _fields_ = ([(n, _p) for n in ("state", "q", "k", "v", "a", "b", "A_log", "dt_bias", "out", "slot_idx", "d_cache",
                                    "k_cache", "g_cache", "write_pos", "force_flush")]
                + [(n, _i64) for n in ("batch", "num_slots", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim",
                                       "buffer_len", "pad_slot_id")]
                + [("stride_state", _i64 * 3), ("stride_q", _i64 * 2), ("stride_k", _i64 * 2), ("stride_v", _i64 * 2),
                   ("stride_a", _i64 * 2), ("stride_b", _i64 * 2), ("stride_out", _i64 * 2),
                   ("stride_d_cache", _i64 * 3), ("stride_k_cache", _i64 * 3), ("stride_g_cache", _i64 * 2)]
                + [(n, _f) for n in ("scale", "softplus_beta", "softplus_threshold")]
                + [(n, _i32) for n in ("state_dtype", "act_dtype", "route", "ring_dtype")])


class Mamba2SpecArgs(ctypes.Structure):
    """``rs_mamba2_spec_args``."""

    _fields_ = ([(n, _p) for n in ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "out", "slot_idx", "x_ring",
                                    "dt_ring", "B_ring", "write_pos", "origin", "is_flush")]
                + [(n, _i64) for n in ("batch", "num_tokens", "history_len", "num_slots", "nheads", "headdim", "dstate",
                                       "ngroups", "pad_slot_id")]
                + [("stride_state", _i64 * 3), ("stride_x", _i64 * 3), ("stride_dt", _i64 * 3), ("stride_A", _i64),
                   ("stride_B", _i64 * 3), ("stride_C", _i64 * 3), ("stride_D", _i64 * 2), ("stride_z", _i64 * 3),
                   ("stride_dt_bias", _i64), ("stride_out", _i64 * 3), ("stride_x_ring", _i64 * 3),
                   ("stride_dt_ring", _i64 * 2), ("stride_B_ring", _i64 * 3)]
                + [(n, _i32) for n in ("state_dtype", "act_dtype", "dt_softplus")]
                + [("workspace", _p)])


class GDNSpecArgs(ctypes.Structure):
    """``rs_gdn_spec_args``."""

    _fields_ = ([(n, _p) for n in ("state", "q", "k", "v", "a", "b", "A_log", "dt_bias", "out", "slot_idx", "d_ring",
                                    "k_ring", "g_ring", "write_pos", "origin", "is_flush")]
                + [(n, _i64) for n in ("batch", "num_tokens", "history_len", "num_slots", "num_k_heads", "num_v_heads",
                                       "head_k_dim", "head_v_dim", "pad_slot_id")]
                + [(f"stride_{n}", _i64 * 3) for n in ("state", "q", "k", "v", "a", "b", "out", "d_ring", "k_ring")]
                + [("stride_g_ring", _i64 * 2)]
                + [(n, _f) for n in ("scale", "softplus_beta", "softplus_threshold")]
                + [(n, _i32) for n in ("state_dtype", "act_dtype")]
                + [("workspace", _p)])


def candidate_paths() -> List[Path]:
    paths = []
    if os.environ.get("TRTLLM_REPLAYSSM_LIBRARY"):
        paths.append(Path(os.environ["TRTLLM_REPLAYSSM_LIBRARY"]))
    paths += [PACKAGE_DIR / "lib" / LIB_NAME, PACKAGE_DIR.parent / "build" / LIB_NAME]
    return paths


def find_library() -> Optional[Path]:
    return next((p for p in candidate_paths() if p.is_file()), None)


class KernelLibrary:
    """The loaded library, with typed entry points."""

    def __init__(self, path: Path):
        self.path = Path(path)
        lib = self.lib = ctypes.CDLL(str(path))
        lib.rs_launch_kernel.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                         ctypes.POINTER(RSValue), ctypes.c_int, ctypes.c_void_p]
        lib.rs_mamba2_step.argtypes = [ctypes.POINTER(Mamba2StepArgs), ctypes.c_void_p]
        lib.rs_gdn_step.argtypes = [ctypes.POINTER(GDNStepArgs), ctypes.c_void_p]
        lib.rs_advance_write_pos.argtypes = [_p, _i64, _i64, _p, _p, _i64, _i64, ctypes.c_int, _p]
        lib.rs_reset_write_pos.argtypes = [_p, _i64, _p, _i64, _i64, _p]
        lib.rs_mamba2_spec_verify.argtypes = [ctypes.POINTER(Mamba2SpecArgs), ctypes.c_void_p]
        lib.rs_mamba2_spec_workspace_size.argtypes = [_i64, _i64, _i64, _i64]
        lib.rs_mamba2_spec_workspace_size.restype = _i64
        lib.rs_gdn_spec_workspace_size.argtypes = [_i64, _i64, _i64, _i64]
        lib.rs_gdn_spec_workspace_size.restype = _i64
        lib.rs_gdn_spec_verify.argtypes = [ctypes.POINTER(GDNSpecArgs), ctypes.c_void_p]
        lib.rs_commit_spec.argtypes = [_p, _p, _p, _i64, _p, _p, _i64, _i64, _i64, _i64, _p]
        lib.rs_reset_spec.argtypes = [_p, _p, _p, _i64, _p, _i64, _i64, _i64, _i64, _p]
        lib.rs_status_string.restype = ctypes.c_char_p
        lib.rs_last_error_message.restype = ctypes.c_char_p
        lib.rs_kernel_key.restype = ctypes.c_char_p
        lib.rs_kernel_arch.argtypes = lib.rs_has_arch.argtypes = lib.rs_table_tag.argtypes = [ctypes.c_int]
        lib.rs_table_tag.restype = ctypes.c_char_p
        lib.rs_kernel_key.argtypes = [ctypes.c_int]
        lib.rs_kernel_programmatic.argtypes = lib.rs_set_programmatic_launches.argtypes = [ctypes.c_int]

    def kernel_keys(self, arch: int) -> set:
        return {self.lib.rs_kernel_key(i).decode() for i in range(self.lib.rs_num_kernels())
                if self.lib.rs_kernel_arch(i) == arch}

    def programmatic_keys(self, arch: int) -> set:
        """Keys of the kernels the library launches as programmatic dependent launches."""
        return {self.lib.rs_kernel_key(i).decode() for i in range(self.lib.rs_num_kernels())
                if self.lib.rs_kernel_arch(i) == arch and self.lib.rs_kernel_programmatic(i)}

    def set_programmatic_launches(self, enabled: bool) -> bool:
        """Launch the programmatic kernels as such (True) or plainly; returns the previous
        setting (``rs_set_programmatic_launches``)."""
        return bool(self.lib.rs_set_programmatic_launches(int(enabled)))

    def has_arch(self, arch: int) -> bool:
        return bool(self.lib.rs_has_arch(arch))

    def table_tag(self, arch: int) -> Optional[str]:
        """The tuned tables the build took its configs from for ``arch`` (e.g. 90):
        ``sm90``, or a GPU's own (``aot build --gpu``); None for an arch not built."""
        tag = self.lib.rs_table_tag(arch)
        return tag.decode() if tag else None

    def last_error(self) -> str:
        return self.lib.rs_last_error_message().decode()

    def check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what}: {STATUS.get(status, status)}: {self.last_error()}")


@lru_cache(maxsize=None)
def load(path: Optional[str] = None) -> Optional[KernelLibrary]:
    """The library at ``path`` (default: :func:`find_library`), or None if there is none."""
    p = Path(path) if path else find_library()
    return KernelLibrary(p) if p is not None else None

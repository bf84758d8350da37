"""The TensorRT plugins' shape check (``plugins/tensorrt/replayssm_plugin_shapes.h``), compiled
on its own: TensorRT is not needed for it. The C launchers size every tensor from one
tensor's dims (heads from x, dstate from the state, L from the x ring), so each dim of each
input must be checked against the others or a launch reads and writes past an end."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

HEADER_DIR = Path(__file__).resolve().parents[2] / "plugins" / "tensorrt"

WRAPPER = r"""
#include "replayssm_plugin_shapes.h"
#include <cstdio>
extern "C" int check_shapes(int kind, int owns_rings, int has_z, int has_force_flush, int has_reset, int max_slots,
                            int nb, int const* nb_dims, long long const* dims, char* msg, int len) {
  replayssm::Params p;
  p.owns_rings = owns_rings; p.has_z = has_z; p.has_force_flush = has_force_flush; p.has_reset = has_reset;
  p.max_slots = max_slots;
  std::vector<int64_t> all(dims, dims + 64);
  std::vector<replayssm::Shape> shapes;
  int64_t const* d = all.data();
  for (int i = 0; i < nb; d += nb_dims[i], ++i) shapes.push_back({nb_dims[i], d});
  std::string const bad = replayssm::checkShapes(static_cast<replayssm::Kind>(kind), p, shapes.data(), nb);
  std::snprintf(msg, len, "%s", bad.c_str());
  return bad.empty() ? 0 : 1;
}
"""

MAMBA2, GDN, ADVANCE, RESET = 0, 1, 2, 3
# Sizes that differ from each other, so that a dim taken from the wrong axis shows.
SLOTS, BATCH, L = 9, 3, 4
H, P, N, G = 8, 5, 6, 2  # Mamba2
HV, HK, V, K = 6, 2, 7, 10  # GDN


def mamba2_inputs(owns_rings=False, has_z=False, has_force_flush=False, has_reset=False):
    ins = [("state", [SLOTS, H, P, N]), ("x", [BATCH, H, P]), ("dt", [BATCH, H]), ("A", [H]),
           ("B", [BATCH, G, N]), ("C", [BATCH, G, N]), ("D", [H]), ("dt_bias", [H]), ("slot_idx", [BATCH])]
    if not owns_rings:
        ins += [("x_cache", [SLOTS, H, L, P]), ("dt_cache", [SLOTS, H, L]), ("B_cache", [SLOTS, G, L, N]),
                ("write_pos", [SLOTS])]
    ins += [("z", [BATCH, H, P])] * has_z + [("force_flush", [BATCH])] * has_force_flush
    return ins + [("new_slots", [BATCH])] * has_reset


def gdn_inputs(has_force_flush=False):
    return [("state", [SLOTS, HV, V, K]), ("q", [BATCH, HK, K]), ("k", [BATCH, HK, K]), ("v", [BATCH, HV, V]),
            ("a", [BATCH, HV]), ("b", [BATCH, HV]), ("A_log", [HV]), ("dt_bias", [HV]), ("slot_idx", [BATCH]),
            ("d_cache", [SLOTS, HV, L, V]), ("k_cache", [SLOTS, HK, L, K]), ("g_cache", [SLOTS, HV, L]),
            ("write_pos", [SLOTS])] + [("force_flush", [BATCH])] * has_force_flush


def advance_inputs(has_force_flush=False):
    return [("write_pos", [SLOTS]), ("slot_idx", [BATCH])] + [("force_flush", [BATCH])] * has_force_flush


CASES = {  # name: (kind, flags, inputs)
    "mamba2": (MAMBA2, {}, mamba2_inputs()),
    "mamba2_z_ff": (MAMBA2, dict(has_z=1, has_force_flush=1), mamba2_inputs(has_z=True, has_force_flush=True)),
    "mamba2_owned": (MAMBA2, dict(owns_rings=1, has_reset=1, has_z=1, max_slots=SLOTS),
                     mamba2_inputs(owns_rings=True, has_z=True, has_reset=True)),
    "gdn": (GDN, {}, gdn_inputs()),
    "gdn_ff": (GDN, dict(has_force_flush=1), gdn_inputs(has_force_flush=True)),
    "advance_ff": (ADVANCE, dict(has_force_flush=1), advance_inputs(has_force_flush=True)),
    "reset": (RESET, {}, [("write_pos", [SLOTS]), ("new_slots", [BATCH])]),
}


@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on this machine (the check is compiled from plugins/tensorrt)")
    out = tmp_path_factory.mktemp("plugin_shapes")
    (out / "wrapper.cpp").write_text(WRAPPER)
    so = out / "libshapes.so"
    subprocess.run([cxx, "-std=c++17", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{HEADER_DIR}",
                    str(out / "wrapper.cpp"), "-o", str(so)], check=True, timeout=120)
    fn = ctypes.CDLL(str(so)).check_shapes
    fn.restype = ctypes.c_int

    def check(kind, flags, inputs):
        dims = [d for _, shape in inputs for d in shape]
        msg = ctypes.create_string_buffer(512)
        status = fn(kind, flags.get("owns_rings", 0), flags.get("has_z", 0), flags.get("has_force_flush", 0),
                    flags.get("has_reset", 0), flags.get("max_slots", 0), len(inputs),
                    (ctypes.c_int * max(1, len(inputs)))(*[len(s) for _, s in inputs]),
                    (ctypes.c_longlong * 64)(*dims), msg, len(msg))
        text = msg.value.decode()
        assert (status == 0) == (text == "")
        return text

    return check


def _with(inputs, i, shape):
    out = list(inputs)
    out[i] = (inputs[i][0], shape)
    return out


@pytest.mark.parametrize("case", CASES)
def test_consistent_shapes_pass(checker, case):
    kind, flags, inputs = CASES[case]
    assert checker(kind, flags, inputs) == ""
    # an empty batch is a valid step
    assert checker(kind, flags, [(n, [0 if d == BATCH and n != "state" else d for d in s]) for n, s in inputs]) == ""


@pytest.mark.parametrize("case", CASES)
def test_every_dim_of_every_input_is_checked(checker, case):
    """One dim off by one, anywhere, is an error; the cursor ops' slot count and the reset's
    row count alone are free (no other input shares them)."""
    kind, flags, inputs = CASES[case]
    for i, (name, shape) in enumerate(inputs):
        for axis in range(len(shape)):
            if (kind == ADVANCE and name == "write_pos") or kind == RESET:
                continue
            bad = _with(inputs, i, shape[:axis] + [shape[axis] + 1] + shape[axis + 1:])
            assert checker(kind, flags, bad), f"{name} axis {axis} unchecked"


def test_the_message_names_the_input_and_the_size(checker):
    kind, flags, inputs = CASES["mamba2"]
    msg = checker(kind, flags, _with(inputs, 4, [BATCH, G, N + 1]))
    assert msg == "input 4 (B) must be (batch, groups, dstate), got (3, 2, 7): dstate is 6 in state"
    msg = checker(GDN, {}, _with(gdn_inputs(), 10, [SLOTS, HV, L, K]))  # k ring with value heads
    assert msg.startswith("input 10 (k_cache) must be (slots, k_heads, L, head_k_dim)") and "k_heads is 2 in q" in msg


@pytest.mark.parametrize("case", CASES)
def test_wrong_rank_or_input_count_is_an_error(checker, case):
    kind, flags, inputs = CASES[case]
    for i, (name, shape) in enumerate(inputs):
        assert f"({name}) must be" in checker(kind, flags, _with(inputs, i, shape + [1]))
    assert "inputs with these fields" in checker(kind, flags, inputs[:-1])


def test_unknown_dims_are_not_compared_at_build_time(checker):
    kind, flags, inputs = CASES["mamba2_z_ff"]
    dynamic = [(n, [-1 if d == BATCH and n != "state" else d for d in s]) for n, s in inputs]
    assert checker(kind, flags, dynamic) == ""
    assert checker(kind, flags, _with(dynamic, 2, [-1, H + 1]))  # a known dim still must agree
    assert checker(kind, flags, _with(dynamic, 2, [-1, -1])) == ""


def test_sizes_the_kernels_cannot_take(checker):
    kind, flags, inputs = CASES["mamba2"]
    bad_groups = [(n, [3 if a == "groups" else d for a, d in zip(_axes(n, s), s)]) for n, s in inputs]
    assert checker(kind, flags, bad_groups) == "groups (3) must divide heads (8)"
    long_ring = [(n, [65 if n.endswith("_cache") and i == 2 else d for i, d in enumerate(s)]) for n, s in inputs]
    assert "at most 64" in checker(kind, flags, long_ring)
    assert "must be (slots, heads, headdim, dstate), got (0, 8, 5, 6)" in checker(
        kind, flags, [(n, [0 if d == SLOTS else d for d in s]) for n, s in inputs])
    gdn = gdn_inputs()
    assert checker(GDN, {}, [(n, [4 if d == HK and n in ("q", "k", "k_cache") and i == 1 else d
                                  for i, d in enumerate(s)]) for n, s in gdn]) == "k_heads (4) must divide v_heads (6)"
    kind, flags, owned = CASES["mamba2_owned"]
    assert "more than the rings' max_slots (9)" in checker(kind, flags, _with(owned, 0, [SLOTS + 1, H, P, N]))


def _axes(name, shape):
    """Which sizes a Mamba2 input's axes hold where groups appear (B, C, B_cache)."""
    return {"B": ["batch", "groups", "dstate"], "C": ["batch", "groups", "dstate"],
            "B_cache": ["slots", "groups", "L", "dstate"]}.get(name, [""] * len(shape))

"""The ahead-of-time build and the C library, on a machine without a GPU."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from conftest import BUILT_SPEC_TOKENS
from trtllm_replayssm.ops.gdn.spec import gdn_spec_batches, gdn_spec_plan, gdn_spec_workspace_numel
from trtllm_replayssm.ops.launch import BATCH_POINTS, nearest_batch_point
from trtllm_replayssm.ops.mamba2.spec import SPEC_PLANS, spec_config, spec_workspace_numel
from trtllm_replayssm.aot.backend import AOTLauncher
from trtllm_replayssm.aot.specs import SPEC_TOKENS
from trtllm_replayssm.aot.library import (ROUTE_CODES, GDNSpecArgs, GDNStepArgs, KernelLibrary, Mamba2SpecArgs,
                                          Mamba2StepArgs)

ELF_MAGIC = b"\x7fELF"
STEP_ROUTES = {"output_only", "standard_step", "always_flush", "standard"}


def test_build_covers_every_op_case(aot_build, manifest):
    kernels = {(k["arch"], k["key"]): k for k in manifest["kernels"]}
    assert manifest["archs"] == [90] and kernels
    for k in kernels.values():
        assert {"kernel", "key", "arch", "name", "num_warps", "shared", "params", "constexprs", "cubin"} <= set(k)
        assert (aot_build / k["cubin"]).read_bytes()[:4] == ELF_MAGIC, k["key"]
        assert k["global_scratch_size"] == 0 and k["profile_scratch_size"] == 0
    for case in manifest["cases"]:
        assert case["launches"], case["key"]
        for launch in case["launches"]:
            assert (case["arch"], launch["spec"]) in kernels, case["key"]
    # Every route of both families, both state dtypes, the cursor ops, at every batch point.
    ops = {c["op"] for c in manifest["cases"]}
    assert ops == {"mamba2_step", "gdn_step", "advance_write_pos", "reset_write_pos", "mamba2_spec", "gdn_spec",
                   "commit_spec", "reset_spec"}
    assert manifest["spec_tokens"] == [BUILT_SPEC_TOKENS]  # (conftest: one draft length)
    for op in ("mamba2_spec", "gdn_spec", "commit_spec", "reset_spec"):
        assert {spec_tokens(c) for c in manifest["cases"] if c["op"] == op} == {BUILT_SPEC_TOKENS}, op
    for op in ("mamba2_step", "gdn_step"):
        keys = [c["key"] for c in manifest["cases"] if c["op"] == op]
        assert {r for r in STEP_ROUTES if any(f"route={r}|" in k for k in keys)} == STEP_ROUTES
        assert all(any(f"state={sd}" in k for k in keys) for sd in ("fp32", "bf16"))
    assert {c["batch"] for c in manifest["cases"] if c["op"] == "mamba2_step"} == set(BATCH_POINTS)
    # The non-flush step and the fold are distinct compiles; the standard kernel is built
    # plain (standard, standard_step) and with the in-kernel drain of always_flush.
    kernels = [(k["kernel"].rsplit(".", 1)[-1], dict(map(tuple, k["constexprs"]))) for k in manifest["kernels"]]
    assert {c.get("MODE") for name, c in kernels if name == "_replay_step_kernel"} == {1}
    assert {c.get("DRAIN", False) for name, c in kernels if name == "_selective_state_update_kernel"} == {False, True}


def out_of_interpreter(snippet: str, *args: str, timeout: int = 300) -> str:
    """``python -c snippet args`` with Triton's interpreter off (kernels imported for the
    compiler, as the build records them), and its standard output; it must exit 0."""
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    run = subprocess.run([sys.executable, "-c", snippet, *args], capture_output=True, text=True, env=env,
                         timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def spec_tokens(case: dict) -> int:
    """The verify's T of a speculative case (its key's ``T=``)."""
    return int(case["key"].split("|T=")[1].split("|")[0])


DRAFT_LENGTHS_CHECK = """
import json
from trtllm_replayssm.aot.specs import op_cases
print(json.dumps([[c.op, c.key["T"]] for c in op_cases("sm90") if c.op.endswith("_spec")]))
"""


GPU_TABLES_CHECK = """
import json
from trtllm_replayssm.aot.specs import op_cases
def launches(tag):
    return {(c.op, c.key_string(), c.batch, c.kernels_only): [s.key for s, _ in c.launches]
            for c in op_cases(tag, spec_tokens=(4,))}
arch, gpu = launches("sm90"), launches("sm90_h100_80gb_hbm3")
assert arch.keys() == gpu.keys()
print(json.dumps([list(k) for k in arch if arch[k] != gpu[k]]))
"""


def test_a_build_for_a_gpu_takes_that_gpus_tables():
    """``aot build --gpu 'NVIDIA H100 80GB HBM3'`` records every case on the H100's own
    tables: the cases whose configs the H100's tables changed (the standard kernel's and
    ``always_flush``'s tiles at batch 1-32, GDN's and Mamba2's) get other kernels than the
    architecture's build, and every other case the same ones."""
    differ = json.loads(out_of_interpreter(GPU_TABLES_CHECK))
    assert {op for op, *_ in differ} == {"gdn_step", "mamba2_step"}
    for op, key, batch, _ in differ:
        route = re.search(r"route=(\w+)", key).group(1)
        assert batch <= 32 and route in ("standard", "standard_step", "always_flush"), key


def test_default_build_covers_every_draft_length():
    """The default build (what ``aot build`` makes without ``--spec-tokens``) has the
    speculative cases of every T of ``SPEC_TOKENS``, for both families and the cursor ops;
    ``--spec-tokens`` takes the verify's range, 1 to MAX_T. (Recorded, not compiled: the
    tests build T = 4 only. Out of the interpreter, as the build records.)"""
    from trtllm_replayssm.aot.build import main as build_main

    counts = Counter(map(tuple, json.loads(out_of_interpreter(DRAFT_LENGTHS_CHECK))))
    assert SPEC_TOKENS == (2, 3, 4, 6)
    for op in ("mamba2_spec", "gdn_spec", "commit_spec", "reset_spec"):
        assert {T for o, T in counts if o == op} == set(SPEC_TOKENS), (op, counts)
    assert counts[("commit_spec", 4)] == counts[("reset_spec", 4)] == 1
    for bad in ("0", "9"):
        with pytest.raises(SystemExit):
            build_main(["--spec-tokens", bad, "--out", "/nonexistent"])


def test_gdn_spec_cases_carry_the_plan_of_each_batch(manifest):
    """The GDN verify's default changes with the batch (``gdn_spec_plan``: split_fold 2 or
    3, the register caps): the build records a case at every batch point, and the one the
    C library takes for a batch (the nearest batch point in log scale, the first on a tie)
    makes the launches the JIT path makes at that batch."""
    kernels = {k["key"]: k for k in manifest["kernels"]}
    caps, state_apart = defaultdict(set), defaultdict(set)
    for c in manifest["cases"]:
        if c["op"] == "gdn_spec":
            names = [kernels[launch["spec"]]["kernel"] for launch in c["launches"]]
            caps[c["batch"]] |= {kernels[launch["spec"]].get("maxnreg") for launch in c["launches"]}
            state_apart[c["batch"]].add(any(n.endswith("_gdn_spec_ring_part_kernel") for n in names))
    points = sorted(caps)
    assert points == sorted(gdn_spec_batches())
    seen = set()
    for batch in (1, 8, 16, 22, 23, 32, 33, 48, 63, 64, 65, 90, 91, 128, 512):
        nearest = nearest_batch_point(points, batch)  # (the C library's find_case)
        plan = gdn_spec_plan(batch)
        assert (caps[nearest] != {None}) == plan.register_caps, (batch, nearest, caps[nearest])
        assert state_apart[nearest] == {plan.config.split_fold == 3}, (batch, nearest)
        seen.add((plan.config.split_fold, plan.register_caps))
    assert seen == {(2, False), (3, False), (3, True)}


def test_mamba2_spec_cases_serve_each_default_config(manifest):
    """The Mamba2 verify's default config changes with the batch (``spec_config``): every
    model's cases include each config's batch point, and away from a config's bounds the
    case the C library takes for a batch (nearest in log scale) is of the config the JIT
    path takes."""
    points = defaultdict(set)
    for c in manifest["cases"]:
        if c["op"] == "mamba2_spec":
            points[c["key"]].add(c["batch"])
    assert points
    for key, batches in points.items():
        assert set(SPEC_PLANS) <= batches, key
        for batch in (1, 2, 6, 24, 32, 40, 100, 128, 512):
            nearest = nearest_batch_point(sorted(batches), batch)
            assert spec_config(nearest) == spec_config(batch), (key, batch, nearest)


EVERY_BATCH_CHECK = """
import json, sys, torch
from trtllm_replayssm.aot.specs import Recorder, _gdn_calls, _mamba2_calls, _spec_calls, spec_of
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import recording_for_arch
built = {k["key"] for k in json.load(open(sys.argv[1]))["kernels"]}
family, name = sys.argv[2:4]
geom = model(name).geom
for batch in list(range(1, 400)) + [511, 512, 1024]:
    with Recorder() as rec, recording_for_arch(90):  # (as the AOT backend launches on an H200)
        _spec_calls(family, geom, torch.float32, torch.bfloat16, batch, 4, 16, False)()
        for state in (torch.float32, torch.bfloat16):
            if family == "mamba2":
                _mamba2_calls(geom, state, torch.bfloat16, batch, 16, False, False, "output_only", "sm90")()
            else:
                _gdn_calls(geom, state, torch.bfloat16, batch, 16, False, "output_only", "sm90")()
    missing = sorted({spec_of(l.kernel, l.kwargs).key for l in rec.launches} - built)
    if missing:
        sys.exit(f"batch {batch}: {missing}")
"""


@pytest.mark.parametrize("family,name", [("mamba2", "nemotron-3-super"), ("mamba2", "nemotron-3-nano-4b"),
                                         ("gdn", "qwen3.5-122b"), ("gdn", "qwen3.5-4b")])
def test_every_batch_meets_the_kernels_its_jit_path_launches(aot_build, family, name):
    """The AOT backend looks each launch's kernel up exactly: the verify's kernels at every
    batch (its default config and the flush rows' row block change with the batch), and
    the output_only step's at every batch (its fold is a programmatic dependent launch up
    to a number of batch rows x heads that falls between batch points: Super at 33-64),
    are built, including those of batches that are no point of the C library's. (Out of
    the interpreter, whose launches take other precisions, as the build does.)"""
    out_of_interpreter(EVERY_BATCH_CHECK, str(aot_build / "manifest.json"), family, name, timeout=600)


def test_sm90_build_makes_the_jits_programmatic_launches(manifest):
    """On sm_90 the fold launch is a programmatic dependent launch of the non-flush launch
    at small batches, as under the JIT (ops.launch.FOLD_PDL): the case launches the
    non-flush kernel that lets it start, then the fold kernel marked ``programmatic`` that
    waits for it; at batch 512 (beyond the limit) both launch plainly."""
    kernels = {k["key"]: k for k in manifest["kernels"]}

    def launches(batch):
        case = next(c for c in manifest["cases"] if c["op"] == "mamba2_step" and c["batch"] == batch
                    and "|H=128|" in c["key"] and "route=output_only" in c["key"] and "state=fp32" in c["key"])
        return [(kernels[l["spec"]].get("programmatic", False), dict(map(tuple, kernels[l["spec"]]["constexprs"])))
                for l in case["launches"]]

    (p0, c0), (p1, c1) = launches(8)
    assert not p0 and c0.get("LAUNCH_DEPENDENTS") and p1 and c1.get("WAIT_PRIMARY")
    assert all(not p and not c.get("LAUNCH_DEPENDENTS") and not c.get("WAIT_PRIMARY") for p, c in launches(512))
    assert all(dict(map(tuple, k["constexprs"])).get("WAIT_PRIMARY") or dict(map(tuple, k["constexprs"])).get(
        "WAIT_RING_PART") for k in manifest["kernels"] if k.get("programmatic"))


def test_large_batch_cases_fold_on_the_side_stream(aot_build, manifest):
    """Beyond the programmatic launch's limit the fold goes on a side stream (ops.streams):
    the case launches the fold first, marked ``side_stream``, then the non-flush kernel on
    the caller's stream; at small batches nothing is on the side stream. The C table
    carries the marks in launch order."""
    kernels = {k["key"]: k for k in manifest["kernels"]}

    def launches(op, batch, heads):
        case = next(c for c in manifest["cases"] if c["op"] == op and c["batch"] == batch
                    and f"|{heads}|" in c["key"] and "route=output_only" in c["key"] and "state=fp32" in c["key"])
        return [(kernels[l["spec"]]["kernel"].rsplit(".", 1)[-1], dict(map(tuple, kernels[l["spec"]]["constexprs"])),
                 l["side_stream"]) for l in case["launches"]]

    assert [(name, side) for name, _, side in launches("mamba2_step", 512, "H=128")] == [
        ("_replay_fold_kernel", True), ("_replay_step_kernel", False)]
    assert [side for _, _, side in launches("mamba2_step", 8, "H=128")] == [False, False]
    assert [(c.get("MODE"), side) for _, c, side in launches("gdn_step", 512, "HV=64")] == [(2, True), (1, False)]
    assert [side for _, _, side in launches("gdn_step", 32, "HV=64")] == [False, False]
    assert not any(l["side_stream"] for c in manifest["cases"] if "route=output_only" not in c["key"]
                   for l in c["launches"])
    table = (aot_build / "replayssm_kernels_table.c").read_text()
    assert table.count("static const int rs_case_side_") == len(manifest["cases"])
    assert "{1, 0}" in table and "{0, 0}" in table


def test_pdl_flip_batches():
    """The batch served from a batch point but launched otherwise as to PDL: Super (128
    heads, PDL up to 4096 rows x heads, so batch <= 32) at 33 (point 32); none where the
    flip falls between two points' batches; the batch with PDL where the point has none."""
    from trtllm_replayssm.aot.specs import pdl_flip_batches

    assert pdl_flip_batches(BATCH_POINTS, 128, 4096) == [33]
    assert pdl_flip_batches(BATCH_POINTS, 96, 4096) == [43]  # Nano: <= 42
    assert pdl_flip_batches((8, 32, 128), 8, 128) == []  # 16 | 17: 16 is 8's, 17 is 32's
    assert pdl_flip_batches(BATCH_POINTS, 1, 100) == [100]  # 100 is point 128's, which has no PDL
    assert pdl_flip_batches(BATCH_POINTS, 128, 64) == []  # (no batch has PDL)


def test_generated_tables_embed_every_cubin(aot_build, manifest):
    table = (aot_build / "replayssm_kernels_table.c").read_text()
    asm = (aot_build / "replayssm_cubins.S").read_text()
    assert f"rs_num_kernels_built = {len(manifest['kernels'])};" in table
    assert asm.count(".incbin") == len(manifest["kernels"])


def test_c_table_block_covers_a_programs_run_of_blocks(aot_build, manifest):
    """The C launcher's grid divides the inner dimension by a kernel's ``block``: for a
    kernel whose program runs CHUNKS blocks one after another (``loop_blocks``) that is
    BLOCK * CHUNKS, as in ``ops.launch.grid``; a bare BLOCK launched programs past the
    head's rows (out of bounds where the tile has no masks)."""
    table = (aot_build / "replayssm_kernels_table.c").read_text()
    rows = [line for line in table.splitlines() if line.startswith('  {"') and "rs_params_" in line]
    assert len(rows) == len(manifest["kernels"])
    chunked = 0
    for k, row in zip(manifest["kernels"], rows):
        cx = dict(map(tuple, k["constexprs"]))
        block = cx.get("BLOCK_P", cx.get("BLOCK_V", cx.get("BLOCK", 1))) * cx.get("CHUNKS", 1)
        chunked += cx.get("CHUNKS", 1) > 1
        assert row.split(", ")[5] == str(block), (k["key"], row)
    assert chunked > 0  # the tuned tables pick loop_blocks > 1 somewhere (Super fp32 fold at batch 128, 512)


def test_c_grid_rows_axis_is_the_jit_grid(aot_build, manifest):
    """The C launcher's third grid axis for a step op's kernels: ``row_progs`` programs for
    a fold that shares the batch's flushing rows, else a program a block of ``row_block``
    rows (``launch_step_case``; ``ops.launch.fold_row_programs``), which must be the grid
    the JIT launch recorded at each case's batch."""
    table = (aot_build / "replayssm_kernels_table.c").read_text()
    rows = [line for line in table.splitlines() if line.startswith('  {"') and "rs_params_" in line]
    desc = {k["key"]: row.split(", ") for k, row in zip(manifest["kernels"], rows)}
    shared = 0
    for case in manifest["cases"]:
        if case["op"] not in ("mamba2_step", "gdn_step"):
            continue
        for launch in case["launches"]:
            row_block, row_progs = int(desc[launch["spec"]][7]), int(desc[launch["spec"]][8])
            shared += row_progs > 0
            rows_axis = row_progs or -(-case["batch"] // row_block)
            assert launch["grid"][2] == rows_axis, (case["key"], launch["spec"])
    assert shared > 0  # the tuned tables share rows at batch >= 128


def test_c_case_keys_name_the_fields_the_build_writes(manifest):
    """The C library finds a call's case by a key it formats itself (``snprintf`` in
    ``replayssm_kernels.c``); its fields must be the ones the build writes
    (``OpCase.key_string``: the head counts included), or every call of that op misses, and
    only on a GPU."""
    c_source = Path(__file__).resolve().parents[2] / "plugins/replayssm_kernels/replayssm_kernels.c"
    formats = dict(re.findall(r'"(\w+)\|([^"]*)"', c_source.read_text()))  # op -> "A=%lld|B=%s|..."
    checked = set()
    for case in manifest["cases"]:
        op, *fields = case["key"].split("|")
        if fields:
            assert op in formats, f"{op}: no key format in {c_source.name}"
            assert [f.split("=")[0] for f in formats[op].split("|")] == [f.split("=")[0] for f in fields], op
            checked.add(op)
    assert {"mamba2_step", "gdn_step", "mamba2_spec", "gdn_spec"} <= checked


@pytest.fixture(scope="module")
def lib(kernel_library):
    return KernelLibrary(kernel_library)


def test_c_library_lists_the_built_kernels(lib, manifest):
    assert lib.lib.rs_num_kernels() == len(manifest["kernels"])
    assert lib.has_arch(90) and not lib.has_arch(80)
    # the tables the build took its configs from, which the Python backend then reads too
    assert manifest["table_tags"] == {"90": "sm90"} and lib.table_tag(90) == "sm90" and lib.table_tag(80) is None
    launcher = AOTLauncher(lib, strict=True)
    assert launcher.tables_for("sm90") == "sm90" and launcher.tables_for("sm80") == "sm80"
    assert lib.kernel_keys(90) == {k["key"] for k in manifest["kernels"]}
    # the C table carries which kernels are programmatic dependent launches
    assert lib.programmatic_keys(90) == {k["key"] for k in manifest["kernels"] if k.get("programmatic")} != set()


def _mamba2_args(**over):
    a = Mamba2StepArgs()
    for name in ("state", "x", "dt", "A", "B", "C", "D", "dt_bias", "out", "slot_idx", "x_cache", "dt_cache", "B_cache",
                 "write_pos"):
        setattr(a, name, 4096)  # never dereferenced on the host
    a.batch, a.num_slots, a.nheads, a.headdim, a.dstate, a.ngroups, a.buffer_len, a.pad_slot_id = 4, 8, 128, 64, 128, 8, 16, -1
    a.dt_softplus, a.state_dtype, a.act_dtype, a.route = 1, 0, 1, ROUTE_CODES["output_only"]
    for k, v in over.items():
        setattr(a, k, v)
    return a


NO_DRIVER = 4  # a valid call on a machine without the CUDA driver: it got past every argument check
HAS_DRIVER = ctypes.util.find_library("cuda") is not None


def _status(fn, args, expected: int) -> int:
    if expected == NO_DRIVER and HAS_DRIVER:
        pytest.skip("this machine has a CUDA driver: valid calls go on to launch (tests/aot/test_aot_cuda.py)")
    return fn(ctypes.byref(args), None)


@pytest.mark.parametrize("over, status", [
    (dict(state=None), 1),            # a required pointer is NULL
    (dict(x_cache=None), 1),          # a replay route's ring
    (dict(write_pos=None), 1),
    (dict(buffer_len=65), 1),         # L outside [1, 64]
    (dict(buffer_len=0), 1),
    (dict(nheads=12, ngroups=8), 1),  # groups must divide heads
    (dict(route=9), 1),               # unknown route
    (dict(D=None), 2),                # outside the AOT build's call (TensorRT-LLM's: D, dt_bias, ...)
    (dict(dt_softplus=0), 2),
    (dict(), NO_DRIVER),
    (dict(buffer_len=64), NO_DRIVER),
    (dict(route=ROUTE_CODES["standard"], x_cache=None, dt_cache=None, B_cache=None, write_pos=None, buffer_len=0),
     NO_DRIVER),                      # the standard kernel has no ring
])
def test_c_abi_rejects_bad_calls_with_codes(lib, over, status):
    got = _status(lib.lib.rs_mamba2_step, _mamba2_args(**over), status)
    assert got == status, lib.last_error()
    assert lib.last_error()


def _gdn_args(**over):
    a = GDNStepArgs()
    for name in ("state", "q", "k", "v", "a", "b", "A_log", "dt_bias", "out", "slot_idx", "d_cache", "k_cache",
                 "g_cache", "write_pos"):
        setattr(a, name, 4096)
    a.batch, a.num_slots, a.num_k_heads, a.num_v_heads, a.head_k_dim, a.head_v_dim = 2, 4, 16, 32, 128, 128
    a.buffer_len, a.pad_slot_id, a.route = 16, -1, ROUTE_CODES["output_only"]
    a.stride_state[:] = (32 * 128 * 128, 128 * 128, 128)
    for k, v in over.items():
        setattr(a, k, v)  # (a tuple fills an array field such as stride_state)
    return a


@pytest.mark.parametrize("over, status, says", [
    (dict(num_k_heads=3), 1, "divide"),  # H does not divide HV
    (dict(buffer_len=65), 1, "buffer_len"),
    (dict(g_cache=None), 1, "ring"),
    (dict(state_dtype=7), 1, "dtype"),
    (dict(ring_dtype=7), 1, "dtype"),
    (dict(slot_idx=None), 2, "slot indices"),
    # the kernels take each slot's (HV, V, K) block packed: padded rows, padded heads, slots that overlap
    (dict(stride_state=(32 * 128 * 136, 128 * 136, 136)), 2, "packed"),
    (dict(stride_state=(32 * 128 * 128, 128 * 128, 136)), 2, "packed"),
    (dict(stride_state=(32 * 136 * 128, 136 * 128, 128)), 2, "packed"),
    (dict(stride_state=(32 * 128 * 128 - 128, 128 * 128, 128)), 2, "packed"),
    (dict(stride_state=(32 * 128 * 128 + 512, 128 * 128, 128)), NO_DRIVER, ""),  # slots apart: fine
    (dict(), NO_DRIVER, ""),
    (dict(route=ROUTE_CODES["standard"], d_cache=None, k_cache=None, g_cache=None, write_pos=None, buffer_len=0),
     NO_DRIVER, ""),
])
def test_c_abi_gdn_checks(lib, over, status, says):
    assert _status(lib.lib.rs_gdn_step, _gdn_args(**over), status) == status, lib.last_error()
    assert says in lib.last_error()


def test_c_abi_cursor_checks(lib):
    assert lib.lib.rs_advance_write_pos(None, 8, 16, 4096, None, 4, -1, 0, None) == 1
    for L in (0, 65):
        assert lib.lib.rs_advance_write_pos(4096, 8, L, 4096, None, 4, -1, 0, None) == 1, L
    assert lib.lib.rs_advance_write_pos(4096, 0, 16, 4096, None, 4, -1, 0, None) == 1  # no slots
    assert lib.lib.rs_reset_write_pos(4096, 8, None, 4, -1, None) == 1
    assert lib.lib.rs_reset_write_pos(4096, 8, 4096, -1, -1, None) == 1
    if not HAS_DRIVER:
        assert lib.lib.rs_advance_write_pos(4096, 8, 64, 4096, None, 4, -1, 0, None) == NO_DRIVER


def test_tensorrt_plugins_compile(trt_plugins):
    """The IPluginV3 sources build against TensorRT's headers and export the registry's entry."""
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(trt_plugins.library)],
                             check=True, capture_output=True, text=True).stdout
    assert " getCreators" in symbols


def test_tensorrt_plugins_as_the_builder_calls_them(trt_plugins, tmp_path):
    """``trt_plugin_harness.cpp`` loads the plugin library and calls its creators and
    plugins as TensorRT's builder and runtime do (no TensorRT, no GPU, no enqueue): field
    checks, aliases, output types, formats, shape checks, serialisation round trip."""
    harness = trt_plugins.compile(Path(__file__).with_name("trt_plugin_harness.cpp"), tmp_path / "harness")
    run = subprocess.run([str(harness), str(trt_plugins.library)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all checks held" in run.stdout
    # the shape check said what was wrong, naming the input
    assert "input 4 (B) must be (batch, groups, dstate)" in run.stderr
    assert "more than the rings' max_slots" in run.stderr


def test_c_abi_speculative_ops_check_their_arguments(lib):
    m = Mamba2SpecArgs()
    for name in ("state", "x", "dt", "A", "B", "C", "D", "dt_bias", "out", "slot_idx", "x_ring", "dt_ring", "B_ring",
                 "write_pos", "origin", "is_flush", "workspace"):
        setattr(m, name, 4096)
    m.batch, m.num_tokens, m.history_len, m.num_slots, m.nheads, m.headdim, m.dstate, m.ngroups = 4, 4, 16, 8, 128, 64, 128, 8
    m.dt_softplus, m.state_dtype, m.act_dtype = 1, 0, 1
    bad = Mamba2SpecArgs.from_buffer_copy(m)
    bad.num_tokens = 9  # T > 8
    assert lib.lib.rs_mamba2_spec_verify(ctypes.byref(bad), None) == 1 and "num_tokens" in lib.last_error()
    bad = Mamba2SpecArgs.from_buffer_copy(m)
    bad.history_len = 2  # history shorter than T
    assert lib.lib.rs_mamba2_spec_verify(ctypes.byref(bad), None) == 1
    bad = Mamba2SpecArgs.from_buffer_copy(m)
    bad.origin = None
    assert lib.lib.rs_mamba2_spec_verify(ctypes.byref(bad), None) == 1
    bad = Mamba2SpecArgs.from_buffer_copy(m)
    bad.workspace = None  # the verify's default split needs its scratch
    assert lib.lib.rs_mamba2_spec_verify(ctypes.byref(bad), None) == 1 and "workspace" in lib.last_error()
    assert lib.lib.rs_mamba2_spec_workspace_size(4, 4, 128, 64) == 4 * spec_workspace_numel(4, 4, 128, 64)
    g = GDNSpecArgs()
    g.num_tokens, g.history_len = 4, 16
    assert lib.lib.rs_gdn_spec_verify(ctypes.byref(g), None) == 1  # null pointers
    for name in ("state", "q", "k", "v", "a", "b", "A_log", "dt_bias", "out", "slot_idx", "d_ring", "k_ring", "g_ring",
                 "write_pos", "origin", "is_flush"):
        setattr(g, name, 4096)
    assert lib.lib.rs_gdn_spec_verify(ctypes.byref(g), None) == 1 and "workspace" in lib.last_error()
    assert lib.lib.rs_gdn_spec_workspace_size(4, 4, 64, 128) == 4 * gdn_spec_workspace_numel(4, 4, 64, 128)
    assert lib.lib.rs_commit_spec(4096, 4096, 4096, 8, None, 4096, 4, 4, 16, -1, None) == 1
    assert lib.lib.rs_commit_spec(4096, 4096, 4096, 8, 4096, 4096, 4, 9, 16, -1, None) == 1  # T > 8
    assert lib.lib.rs_reset_spec(4096, 4096, 4096, 8, 4096, 2, 4, 65, -1, None) == 1  # history > 64
    assert lib.lib.rs_reset_spec(4096, 4096, 4096, 8, 4096, 2, 4, 3, -1, None) == 1  # history < T
    if not HAS_DRIVER:  # valid: they need the driver
        assert lib.lib.rs_mamba2_spec_verify(ctypes.byref(m), None) == NO_DRIVER
        assert lib.lib.rs_reset_spec(4096, 4096, 4096, 8, 4096, 2, 8, 64, -1, None) == NO_DRIVER
        assert lib.lib.rs_commit_spec(4096, 4096, 4096, 8, 4096, 4096, 4, 8, 8, -1, None) == NO_DRIVER



GLUON_BUILD = """
import os, sys
os.environ["TRITON_INTERPRET"] = "0"  # compile for the GPU, as the AOT build does
import torch
from trtllm_replayssm.aot.build import _compile_one, spec_job
from trtllm_replayssm.aot.specs import Recorder, _mamba2_calls, spec_of
from trtllm_replayssm.models import model
sys.path.insert(0, sys.argv[1])
import probe_gluon_folds
fold = probe_gluon_folds.GluonFold("mamba2")
with Recorder() as rec:
    _mamba2_calls(model("nemotron-3-super").geom, torch.float32, torch.bfloat16, 128, 16, True, False,
                  "output_only", "sm90")()
recorded = next(r for r in rec.launches if fold.takes(r.kernel, r.kwargs))
fn, grid, args = fold.launch(recorded.kwargs)
from trtllm_replayssm.aot.build import source_type
from triton.experimental.gluon._runtime import GluonASTSource
assert source_type(fn) is GluonASTSource  # the front end Gluon's JIT uses
spec = spec_of(fn, args)
os.makedirs(os.path.join(sys.argv[2], "sm90"))
facts = _compile_one((spec_job("gluon_fold", spec), 90, sys.argv[2]))
print(facts["num_warps"], facts["cubin_bytes"] > 0, dict(spec.constexprs)["ROW_BLOCK"], grid)
"""


def test_a_gluon_kernel_builds_like_the_others(tmp_path):
    """``aot.build`` compiles a ``@gluon.jit`` kernel with Gluon's front end and the same
    spec (named arguments, constexprs, the grid constexprs the C launcher reads): the
    Gluon Mamba2 fold of ``benchmarks/probe_gluon_folds.py``, specialised from the
    package's fold launch as the AOT build records it."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.ampere", reason="this Triton has no Gluon")
    repo = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", GLUON_BUILD, str(repo / "benchmarks"), str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=repo,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split()[-6:] == ["8", "True", "1", "(1,", "128,", "128)"]


NARROW_CHUNK_BUILD = """
import os, sys
os.environ["TRITON_INTERPRET"] = "0"  # compile for the GPU, as the AOT build does
import torch
from trtllm_replayssm.aot.build import _compile_one, spec_job
from trtllm_replayssm.aot.specs import Recorder, _spec_calls, spec_of
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import LaunchConfig
family, name, out = sys.argv[1:4]
config = LaunchConfig(16 if family == "mamba2" else 64, 2, split_fold=2, key_chunk=8)
with Recorder() as rec:
    _spec_calls(family, model(name).geom, torch.float32, torch.bfloat16, 128, 4, 16, False, config)()
os.makedirs(os.path.join(out, "sm90"))
chunked = 0
for launch in rec.launches:
    spec = spec_of(launch.kernel, launch.kwargs)
    constexprs = dict(spec.constexprs)
    if min(constexprs.get("STATE_CHUNK", 16), constexprs.get("KEY_CHUNK", 16)) >= 16:
        continue
    chunked += 1
    _compile_one((spec_job(spec.key, spec), 90, out))
print("chunked", chunked)
"""


@pytest.mark.parametrize("family,name", [("mamba2", "nemotron-3-super"), ("gdn", "qwen3.5-122b")])
def test_verify_with_key_chunks_narrower_than_a_dot_compiles_for_the_gpu(tmp_path, family, name):
    """``LaunchConfig.key_chunk`` 8 on the speculative verify at a model's shapes, whose
    tiles take tensor-core dots: a chunk of 8 columns cannot be a dot's K (16 at least), so
    its product takes the broadcast form. The interpreter takes a dot of any K, so only a
    compile for sm_90 shows it (without the guard: a CompilationError, K >= 16). That the
    broadcast form stays fp32 on the GPU is the next test's; the verify's outputs at such a
    chunk are checked on the GPU by ``test_tiles_whose_rows_or_columns_run_past_the_sizes``."""
    repo = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", NARROW_CHUNK_BUILD, family, name, str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=repo,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert int(run.stdout.split()[-1]) >= 1  # a launch with a narrow chunk was compiled


BROADCAST_PRODUCT = """
import triton
import triton.language as tl
from trtllm_replayssm.ops.common import small_matmul


@triton.jit
def product(a_ptr, b_ptr, o_ptr, M: tl.constexpr, J: tl.constexpr, N: tl.constexpr):
    a = tl.load(a_ptr + tl.arange(0, M)[:, None] * J + tl.arange(0, J)[None, :])
    b = tl.load(b_ptr + tl.arange(0, J)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(o_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :],
             small_matmul(a, b, False, False, "tf32x3", "tf32"))
"""

BROADCAST_COMPILE = """
import os, sys
os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from broadcast_product import product
sig = {"a_ptr": "*fp32", "b_ptr": "*fp32", "o_ptr": "*fp32", "M": "constexpr", "J": "constexpr", "N": "constexpr"}
for M, J, N in ((16, 8, 16), (64, 4, 16), (16, 16, 16)):
    ttir = triton.compile(ASTSource(fn=product, signature=sig, constexprs={"M": M, "J": J, "N": N}),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ttir"]
    print(M, J, N, "tt.dot" in ttir)
"""


def test_the_broadcast_product_stays_fp32_when_compiled_for_the_gpu(tmp_path):
    """``small_matmul``'s broadcast form is the fp32 product of tiles a dot cannot take.
    Triton's combine pass turns ``sum(a[:, :, None] * b[None, :, :], axis=1)`` into a
    one-pass TF32 dot where both outer sides are >= 16 (triton 3.6, sm_90): an fp32 caller
    then got TF32's error (the Mamba2 verify's state in chunks of 8: 5-8e-4 relative on
    the GPU, where its tolerance is 2e-5). The compiled form must hold no dot."""
    (tmp_path / "broadcast_product.py").write_text(BROADCAST_PRODUCT)
    repo = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", BROADCAST_COMPILE, str(tmp_path)], capture_output=True, text=True,
                         timeout=600, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["16", "8", "16", "False", "64", "4", "16", "False", "16", "16", "16", "False"]

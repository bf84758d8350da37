"""The GPU benchmark scripts run end to end on the CPU (``--dry-run``: nothing is measured),
so their flow and record schema are checked between GPU sessions."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCHEMA = {"gpu", "model", "state_dtype", "act_dtype", "batch", "L", "route", "us_per_step", "baseline_us_per_step",
          "speedup", "achieved_gbps", "copy_gbps", "commit"}


def load_script(name: str):
    """``benchmarks/<name>.py`` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / f"benchmarks/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dry_run(script: str, *args: str, **env: str) -> str:
    """``benchmarks/<script> --dry-run ARGS`` (with ``env`` on top of this process's), and
    its standard output: the scripts' CPU flow (the interpreter, the ``cpu`` table, the tiny
    models), whatever machine runs the tests. A dry run that sees a GPU measures there
    instead (compiling every candidate, writing the ``sm90`` table), which is not what these
    tests check, so the GPU is hidden from it."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", **env}
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--dry-run", *args], check=True,
                          capture_output=True, text=True, timeout=900, env=env).stdout


def test_bench_mamba2_ar_dry_run(tmp_path):
    out = tmp_path / "mamba2.json"
    dry_run("bench_mamba2_ar.py", "--models", "tiny",
            "--batches", "2", "--state-dtypes", "fp32", "--buffer-len", "2", "--l-sweep", "--replays", "1",
            "--rounds", "1", "--max-candidates", "1", "--out", str(out), "--table-dir", str(tmp_path),
            "--tried-out", str(tmp_path / "tried.json"))
    records = json.loads(out.read_text())
    assert {r["route"] for r in records} == {"standard", "output_only", "state_and_output", "standard_step", "always_flush",
                                           "auto"}
    # --tried-out: a record per tuned kernel and case (the L sweep's cases too), one candidate each here
    tried = json.loads((tmp_path / "tried.json").read_text())
    assert {(t["L"], t["kernel"]) for t in tried} >= {(2, "standard"), (2, "fold"), (2, "output_only")}
    assert all(len(t["tried"]) == 1 and t["tried"][0]["us"] == t["best_us"] for t in tried)
    assert all(SCHEMA | {"baseline"} <= set(r) for r in records)
    table = json.loads((tmp_path / "mamba2_cpu.json").read_text())
    routes = [rows for key, rows in table.items() if key.startswith("route|")]
    assert routes
    # the dispatcher was timed on the table this run wrote (--table-dir), not the package's
    assert next(r for r in records if r["route"] == "auto")["chosen_route"] == routes[0][0]["route"]

    # --from-table: the same table's configs measured again (in rounds), the table left alone
    table_text = (tmp_path / "mamba2_cpu.json").read_text()
    again = tmp_path / "again.json"
    dry_run("bench_mamba2_ar.py", "--models", "tiny",
            "--batches", "2", "--state-dtypes", "fp32", "--buffer-len", "2", "--l-sweep", "--replays", "1",
            "--rounds", "2", "--from-table", "--out", str(again), "--table-dir", str(tmp_path))
    assert (tmp_path / "mamba2_cpu.json").read_text() == table_text
    measured = {r["route"]: r["config"] for r in json.loads(again.read_text())}
    standard = next(rows for key, rows in table.items() if key.startswith("standard|"))[0]
    assert all(measured["standard"][k] == v for k, v in standard.items() if k in measured["standard"])


def test_bench_gdn_ar_dry_run(tmp_path):
    out = tmp_path / "gdn.json"
    dry_run("bench_gdn_ar.py", "--models", "tiny-gdn",
            "--batches", "2", "--state-dtypes", "fp32", "--buffer-len", "2", "--replays", "1",
            "--rounds", "1", "--max-candidates", "1", "--out", str(out), "--table-dir", str(tmp_path))
    records = json.loads(out.read_text())
    assert {r["route"] for r in records} >= {"standard", "output_only", "standard_step", "always_flush", "auto"}
    assert all(SCHEMA | {"baseline", "ring_dtype"} <= set(r) for r in records)
    table = json.loads((tmp_path / "gdn_cpu.json").read_text())
    # --tune standard: the other launches keep the table's entries
    dry_run("bench_gdn_ar.py", "--models", "tiny-gdn",
            "--batches", "2", "--state-dtypes", "fp32", "--buffer-len", "2", "--replays", "1",
            "--rounds", "1", "--max-candidates", "2", "--tune", "standard", "--out", str(out),
            "--table-dir", str(tmp_path), "--tried-out", str(tmp_path / "tried.json"))
    again = json.loads((tmp_path / "gdn_cpu.json").read_text())
    assert {k: v for k, v in again.items() if not k.startswith(("standard|", "route|"))} == \
        {k: v for k, v in table.items() if not k.startswith(("standard|", "route|"))}
    # --tried-out: each candidate the tuner timed, and the winner the table took among them
    [tried] = json.loads((tmp_path / "tried.json").read_text())
    assert (tried["kernel"], tried["model"], tried["batch"], tried["ring_dtype"]) == ("standard", "tiny-gdn", 2, "fp32")
    assert len(tried["tried"]) == 2 and tried["best_us"] == min(t["us"] for t in tried["tried"])
    won = next(t for t in tried["tried"] if t["us"] == tried["best_us"])
    assert {k: won[k] for k in tried["best"]} == tried["best"]
    entry = next(rows for key, rows in again.items() if key.startswith("standard|"))[0]
    assert all(entry[k] == v for k, v in tried["best"].items())


def test_side_by_side_timing_alternates_and_takes_medians():
    """``time_phases_side_by_side``: the timings take turns in every round (a capture each)
    and each reports the median of its rounds, so one slow capture does not decide a ratio;
    a launch with a ring is timed in both phases, one without is timed once for both."""
    from trtllm_replayssm.benchmarking.rig import Launch, time_phases_side_by_side, worst_phase

    class FakeRig:
        def __init__(self):
            self.calls = []
            self.times = {("a", False): iter([5.0, 1.0, 3.0]), ("a", True): iter([6.0, 7.0, 8.0]),
                          ("b", False): iter([2.0, 9.0, 4.0])}

        def keeps_ring(self, launch):
            return launch.kernel == "a"

        def time_cycle_us(self, launch, replays, staggered=False):
            self.calls.append((launch.kernel, staggered))
            return next(self.times[(launch.kernel, staggered)])

    rig = FakeRig()
    us = time_phases_side_by_side(rig, {"a": Launch("a"), "b": Launch("b")}, replays=1, rounds=3)
    assert rig.calls == [("a", False), ("a", True), ("b", False)] * 3
    assert us == {"aligned": {"a": 3.0, "b": 4.0}, "staggered": {"a": 7.0, "b": 4.0}}
    assert worst_phase(us) == {"a": 7.0, "b": 4.0}


def test_tuning_a_subset_times_only_those_launches():
    """``tune_table_kernels``: each named launch on its own route; "replay" tunes the fold
    first, then the non-flush launch with the fold it chose; "fold" and "nonflush" tune
    one of the two under the table's other."""
    import types

    import torch

    from trtllm_replayssm.benchmarking.rig import tune_table_kernels
    from trtllm_replayssm.ops.launch import LaunchConfig

    class FakeRig:
        cache = types.SimpleNamespace(write_pos=torch.zeros(1))

        def __init__(self):
            self.timed = []

        def table_configs(self, arch):
            return {"output_only": {"config": LaunchConfig(2, 1)}, "fold": {"config": LaunchConfig(64, 1)}}

        def time_worst_phase_us(self, launch, replays):
            self.timed.append(launch)
            return launch.config.block_p if launch.kernel != "output_only" or launch.fold_config is None \
                else launch.config.block_p + launch.fold_config.block_p

    candidates = {k: [LaunchConfig(8, 1), LaunchConfig(4, 1)] for k in ("standard", "always_flush", "fold", "output_only")}
    rig = FakeRig()
    best = tune_table_kernels(rig, candidates.__getitem__, ["always_flush"], LaunchConfig(32, 1))
    assert set(best) == {"always_flush"} and best["always_flush"]["config"] == LaunchConfig(4, 1)
    assert {lc.kernel for lc in rig.timed} == {"always_flush"}
    rig = FakeRig()
    best = tune_table_kernels(rig, candidates.__getitem__, ["replay"], LaunchConfig(32, 1))
    assert set(best) == {"fold", "output_only"}
    folds = [lc for lc in rig.timed if lc.config == LaunchConfig(32, 1)]
    assert [lc.fold_config for lc in folds] == candidates["fold"]  # the fold tuned under the fixed non-flush launch
    assert all(lc.fold_config == LaunchConfig(4, 1) for lc in rig.timed[len(folds):])
    rig = FakeRig()  # the fold alone: under the table's non-flush launch, which stays
    best = tune_table_kernels(rig, candidates.__getitem__, ["fold"], LaunchConfig(32, 1))
    assert set(best) == {"fold"} and best["fold"]["config"] == LaunchConfig(4, 1)
    assert [(lc.config, lc.fold_config) for lc in rig.timed] == [(LaunchConfig(2, 1), c) for c in candidates["fold"]]
    rig = FakeRig()  # the non-flush launch alone: under the table's fold, which stays
    best = tune_table_kernels(rig, candidates.__getitem__, ["nonflush"], LaunchConfig(32, 1))
    assert set(best) == {"output_only"} and best["output_only"]["config"] == LaunchConfig(4, 1)
    assert [(lc.config, lc.fold_config) for lc in rig.timed] == [(c, LaunchConfig(64, 1)) for c in candidates["output_only"]]


@pytest.mark.parametrize("family", ["mamba2", "gdn"])
def test_a_fresh_table_dir_starts_from_the_package_table(family, tmp_path, monkeypatch):
    """``open_table``: a ``--table-dir`` with no table of the GPU's arch starts as a copy of
    the package's, which the dispatcher then reads from there (so ``--tune nonflush`` tunes
    under the package's fold, not the untuned default); a table already there is kept;
    an arch with no package table starts empty."""
    from trtllm_replayssm.benchmarking.records import open_table
    from trtllm_replayssm.ops import launch

    monkeypatch.setenv(launch.TUNED_DIR_ENV, "")  # restored after the test: open_table points it at tmp_path
    package = json.loads((REPO / f"trtllm_replayssm/tuned/{family}_sm90.json").read_text())
    try:
        table, path = open_table(str(tmp_path / "fresh"), family, "sm90")
        assert path == tmp_path / "fresh" / f"{family}_sm90.json" and table == package
        assert json.loads(path.read_text()) == package
        assert os.environ[launch.TUNED_DIR_ENV] == str(tmp_path / "fresh")
        assert launch._load_table("sm90", family) == package  # what the tuner's table_configs read
        path.write_text(json.dumps({"kept": []}))
        assert open_table(str(tmp_path / "fresh"), family, "sm90")[0] == {"kept": []}
        assert launch._load_table("sm90", family) == {"kept": []}
        table, path = open_table(str(tmp_path / "cpu"), family, "cpu")
        assert table == {} and not path.exists()
        # A GPU measured apart from its arch's reference GPU: its own table, started from the
        # package's for that GPU where it has one, else from the arch's.
        for tag in ("sm90_h100_80gb_hbm3", "sm90_h100_pcie"):
            shipped = REPO / f"trtllm_replayssm/tuned/{family}_{tag}.json"
            table, path = open_table(str(tmp_path / tag), family, tag)
            assert path == tmp_path / tag / f"{family}_{tag}.json"
            assert not (tmp_path / tag / f"{family}_sm90.json").exists()
            assert table == (json.loads(shipped.read_text()) if shipped.exists() else package)
    finally:
        launch._load_table.cache_clear()


def test_baseline_is_the_fastest_launch_that_writes_the_state_every_step():
    """A speedup is against the fastest standard launch measured, never against a replay
    route that skips state writes, and not against a slower standard kernel."""
    from trtllm_replayssm.benchmarking.rig import fastest_baseline

    us = {"standard": 10.0, "output_only": 6.0, "state_and_output": 5.0, "always_flush": 9.5, "auto": 6.0}
    assert fastest_baseline(us) == "always_flush"
    assert fastest_baseline({**us, "fla": 9.0}) == "fla"
    assert fastest_baseline({"standard": 10.0, "output_only": 6.0}) == "standard"


@pytest.mark.parametrize("tuning", [[], ["--tune-batch", "2", "--max-candidates", "1"]], ids=["default", "tuned"])
def test_bench_spec_dry_run(tmp_path, tuning):
    out = tmp_path / "spec.json"
    dry_run("bench_spec.py", "--models", "tiny", "tiny-gdn",
            "--batches", "2", "--tokens", "2", "--history-len", "2", "--acceptance", "all", "--steps", "3",
            "--replays", "1", "--rounds", "1", *tuning, "--out", str(out))
    records = json.loads(out.read_text())
    assert {r["route"] for r in records} == {"replay_spec", "standard_spec"}
    assert {r["model"] for r in records} == {"tiny", "tiny-gdn"}
    assert all(SCHEMA | {"T", "B", "acceptance"} <= set(r) for r in records)
    assert all("staggered_speedup" in r for r in records if r["route"] == "replay_spec")


def test_spec_staggered_start_spreads_the_rows_over_their_flush_period():
    """``SpecRig.staggered_start``: the rows' cursors at every point of their flush period
    (T = 4, Bh = 16, 3 accepted: a flush every 5 steps), and a period of commits brings
    every row's cursor back, so the flushes stay spread over the run."""
    import torch

    from trtllm_replayssm.benchmarking.spec import SpecCase, flush_period, make_spec_rig
    from trtllm_replayssm.models import model
    from trtllm_replayssm.ops.mamba2.spec import commit_replayssm_spec

    rig = make_spec_rig(SpecCase("tiny", model("tiny").geom, 10, 4, 16, 3))
    period = flush_period(4, 16, 3)
    assert period == 5
    wp, origin, flush = (t.clone() for t in rig.staggered_start())
    assert len(set(zip(wp.tolist(), flush.tolist()))) == period
    assert int(flush.sum()) == 2  # 2 of the 10 rows flush at the run's first step
    for _ in range(period):
        commit_replayssm_spec(rig.wp, rig.origin, rig.flush, rig.accepted, 4, 16, rig.slots)
    assert torch.equal(rig.wp, wp) and torch.equal(rig.flush, flush)


def test_every_spec_candidate_compiles_for_sm90():
    """``kernel_registers.py --family spec`` compiles every speculative tuning candidate for
    sm_90 (no GPU needed): the interpreter runs code the GPU compiler rejects (a tile used
    in a branch a constexpr should have pruned), which would otherwise show only on the
    device."""
    run = subprocess.run([sys.executable, str(REPO / "benchmarks/kernel_registers.py"), "--family", "spec"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("regs") >= 2 * 6


@pytest.mark.parametrize("headdim", [64, 80])
def test_non_flush_launches_in_the_table_stay_under_96_registers(headdim):
    """The non-flush launch's configs in the tuned table compile for sm_90 to at most 96
    registers a thread (63-80 now, both state dtypes), or, for a tile whose state alone
    holds more than 64 values a thread (32 rows on one warp, tuned at batch 2), at most 32
    over those values. A kernel change that keeps a tile live across the cursor's checks
    went unseen by every other test: at 884d6d6 Super's 32-row tile on 4 warps (32 values
    a thread) took 112 and Nano-4B fp32 at batch 128 fell from 1.64x to 1.55x."""
    dstate = 128  # both geometries'
    for state_dtype in ("fp32", "bf16"):
        run = subprocess.run([sys.executable, str(REPO / "benchmarks/kernel_registers.py"), "--family", "mamba2",
                              "--kernels", "output_only", "--tuned", "--headdim", str(headdim),
                              "--state-dtype", state_dtype], capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
        launches = re.findall(r"block_p=(\d+), num_warps=(\d+).*?(\d+) regs", run.stdout)
        assert len(launches) >= 2 and "spilled" not in run.stdout, run.stdout
        assert len(launches) == run.stdout.count(" regs"), run.stdout  # every launch's count is bounded below
        for block_p, num_warps, regs in launches:
            tile_values = int(block_p) * dstate // (32 * int(num_warps))
            assert int(regs) <= max(96, tile_values + 32), run.stdout


def test_kernel_registers_reports_sass_size_and_shared_memory():
    """``kernel_registers.py --sass``: every compile's line also gives its static SASS
    instruction count and shared memory (how a change meant to leave a launch as it was
    is checked without a GPU)."""
    run = subprocess.run([sys.executable, str(REPO / "benchmarks/kernel_registers.py"), "--family", "mamba2",
                          "--kernels", "output_only", "--tuned", "--headdim", "64", "--sass"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    sizes = re.findall(r"(\d+) regs.*?, (\d+) SASS, (\d+) B shared", run.stdout)
    assert len(sizes) >= 2 and len(sizes) == run.stdout.count(" regs"), run.stdout
    assert all(int(n) > 100 for _, n, _ in sizes), run.stdout


GDN_ROWS_SNIPPET = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("kr", sys.argv[1])
kr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kr)
assert kr.GDN_RING_PTRS <= set(kr.gdn_replay._gdn_replay_kernel.arg_names)
calls = []
kr.registers = lambda fn, c, warps, sd, maxnreg=None, ring_dtype="fp32": calls.append(
    [c["MODE"], c["DOT_PRECISION"], ring_dtype] if "MODE" in c else ["standard", None, None]) or ""
for state_dtype, ring in (("fp32", None), ("bf16", None), ("bf16", "fp32")):
    calls.clear()
    list(kr.gdn_rows(state_dtype, ring_dtype=ring))
    print(json.dumps([state_dtype, ring, sorted(set(map(tuple, calls)), key=str)]))
"""


def test_kernel_registers_gdn_rows_compile_what_runs():
    """``kernel_registers.py --family gdn`` compiles the replay kernel as the package launches
    it: on the state dtype's ``d``/``k`` ring (``cache.gdn_ring_dtype``: bf16 beside a bf16
    state) and with the fold's one TF32 pass into a bf16 checkpoint (``common.one_pass_fold``).
    It had compiled fp32 rings and tf32x3 for both state dtypes, so its bf16 figures were not
    the launches in use; ``--ring-dtype`` still picks the other ring. (In a subprocess: the
    script switches the interpreter off for its process.)"""
    run = subprocess.run([sys.executable, "-c", GDN_ROWS_SNIPPET, str(REPO / "benchmarks/kernel_registers.py")],
                         capture_output=True, text=True, timeout=300, check=True)
    seen = {(sd, ring): {tuple(c) for c in calls} for sd, ring, calls in map(json.loads, run.stdout.splitlines())}
    nonflush, fold = 1, 2  # the replay kernel's MODE of each launch
    DOT_PRECISION, ONE_PASS_PRECISION = "tf32x3", "tf32"  # compiled for sm_90 (common.fold_precision)
    assert seen[("fp32", None)] == {("standard", None, None), (nonflush, DOT_PRECISION, "fp32"),
                                    (fold, DOT_PRECISION, "fp32")}
    assert seen[("bf16", None)] == {("standard", None, None), (nonflush, DOT_PRECISION, "bf16"),
                                    (fold, ONE_PASS_PRECISION, "bf16")}
    assert seen[("bf16", "fp32")] == {("standard", None, None), (nonflush, DOT_PRECISION, "fp32"),
                                      (fold, ONE_PASS_PRECISION, "fp32")}


def test_gluon_fold_probes_compile_for_sm90():
    """``probe_gluon_folds.py --compile-only``: the Gluon folds (GPU-only, no interpreter)
    still compile for sm_90, so the probe is ready to run on the device."""
    pytest.importorskip("triton.experimental.gluon.language.nvidia.ampere", reason="this Triton has no Gluon")
    # Compiled by Triton's compiler, not the interpreter (under TRITON_INTERPRET=1 Gluon's
    # reductions reference interpreted functions; a warm Triton cache had hidden that).
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(REPO / "benchmarks/probe_gluon_folds.py"), "--compile-only"],
                         capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if "regs" in line]  # (a variant that fails raises)
    assert {line.split()[0] for line in lines} == {"mamba2", "gdn"} and len(lines) >= 10, run.stdout


def test_bench_gapped_pools_dry_run(tmp_path):
    out = tmp_path / "gapped.json"
    dry_run("bench_gapped_pools.py", "--models", "tiny",
            "tiny-gdn", "--batches", "2", "--buffer-len", "2", "--replays", "1", "--out", str(out))
    records = json.loads(out.read_text())["records"]
    assert {(r["layout"], r["kernel"]) for r in records} == {
        (lay, k) for lay in ("packed", "gap_16", "gap_odd") for k in ("replay_nonflush", "replay_flush", "standard")}
    assert all(r["vs_packed"] == 1.0 for r in records if r["layout"] == "packed")


@pytest.mark.parametrize("script,extra,routes", [
    # (few steps, every row flushing among them: each step runs the tiny model on the interpreter for both
    # paths and for the standard step with each block kind left out)
    ("e2e_decode_speedup.py", ["--num-steps", "3", "--warmup-steps", "2", "--buffer-len", "2", "--route", "auto",
                               "--staggered"], {"standard", "auto"}),
    ("e2e_spec_decode_throughput.py", ["--num-steps", "2", "--warmup-steps", "1", "--buffer-len", "4",
                                       "--num-spec", "2", "--acceptance", "2", "--staggered"],
     {"standard_spec", "replay_spec"}),
])
def test_e2e_scripts_dry_run(tmp_path, script, extra, routes):
    out = tmp_path / "e2e.json"
    dry_run(script, "--batch-size", "2", *extra, "--out", str(out))
    records = json.loads(out.read_text())
    assert {r["route"] for r in records} == routes
    assert all(r["logits_rel_err"] < 2e-2 for r in records)
    std = next(r for r in records if r["route"] in ("standard", "standard_spec"))
    assert {"ssm_share", "attention_share", "mlp_share"} <= set(std)
    assert all({"model", "batch", "T", "state_dtype", "L", "ms_per_step", "tokens_per_s", "baseline_tokens_per_s",
                "speedup", "gpu", "commit"} <= set(r) for r in records)
    if "--staggered" in extra:  # autoregressive: the standard path has no phase; speculative: both paths stagger
        phases = {"standard": None, "auto": "staggered", "standard_spec": "staggered", "replay_spec": "staggered"}
        assert {r["route"]: r.get("phases") for r in records} == {k: phases[k] for k in routes}


def test_a_dry_run_without_out_leaves_the_committed_results_alone(tmp_path):
    """The scripts' docstrings run ``--dry-run`` with no ``--out``: its records (and a
    ``cpu`` table) go under the scratch folder, never over ``benchmarks/results`` or the
    package's tuned tables."""
    from trtllm_replayssm.benchmarking.records import PACKAGE_TABLES, RESULTS, committed_or_scratch

    committed = RESULTS / "gapped_pools.json"  # (the cheapest script's dry run: they share the rule)
    before = committed.read_bytes()
    printed = dry_run("bench_gapped_pools.py", "--models", "tiny", "--batches", "2", "--buffer-len", "2",
                      "--replays", "1", TMPDIR=str(tmp_path))
    assert committed.read_bytes() == before
    scratch = tmp_path / "trtllm_replayssm_dry_runs"
    assert {r["layout"] for r in json.loads((scratch / "gapped_pools.json").read_text())["records"]} == {
        "packed", "gap_16", "gap_odd"}
    assert str(scratch) in printed
    # what was given is taken as it is; a measured run keeps the committed places
    assert committed_or_scratch("x/y.json", committed, True) == Path("x/y.json")
    assert committed_or_scratch(None, committed, False) == committed
    assert committed_or_scratch(None, PACKAGE_TABLES, False) == PACKAGE_TABLES


def test_plot_e2e(tmp_path):
    recs = [dict(model="m", batch=b, T=T, acceptance=3 if T else None, state_dtype="fp32", L=16, route=route,
                 speedup=s) for b in (128, 512) for T, route, s in ((0, "standard", 1.0), (0, "output_only", 1.2),
                                                                     (4, "replay_spec", 1.5))]
    (tmp_path / "e2e.json").write_text(json.dumps(recs))
    subprocess.run([sys.executable, str(REPO / "benchmarks/plot_e2e.py"), str(tmp_path / "e2e.json"), "--out",
                    str(tmp_path / "e2e.png")], check=True, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "e2e.png").stat().st_size > 1000


def test_model_rig_by_family_and_its_faster_baseline():
    """``benchmarking.rigs.make_model_rig``: the family's rig of a model by name, and the
    baseline it times against (fla-core for GDN where it is installed)."""
    import torch

    from trtllm_replayssm.benchmarking.gdn_ar import GDNRig
    from trtllm_replayssm.benchmarking.mamba2_ar import Mamba2Rig
    from trtllm_replayssm.benchmarking.rigs import make_model_rig

    mamba2 = make_model_rig("nemotron-3-nano-4b", 2, 4, torch.float32)
    gdn = make_model_rig("qwen3.5-4b", 2, 4, torch.float32)
    assert isinstance(mamba2, Mamba2Rig) and isinstance(gdn, GDNRig) and gdn.case.buffer_len == 4
    assert mamba2.baseline_launch().kernel == "standard"
    assert gdn.baseline_launch().kernel == ("fla" if gdn.fla is not None else "standard")


def test_staggered_cycles_spread_the_flushes_and_come_back_to_their_start():
    """``CycleRig.start_cursors``: in phase, every cursor at 0; staggered, 1/L of the slots at
    each phase (1/L of the rows flush at every step), and L steps bring every cursor back,
    so the replays of a captured cycle all time the same cycle. Routes that flush every
    step start at 0 either way."""
    import torch

    from trtllm_replayssm.benchmarking.rig import Launch
    from trtllm_replayssm.benchmarking.rigs import make_model_rig

    L = 4
    rig = make_model_rig("nemotron-3-nano-4b", 8, L, torch.float32)
    rig.start_cursors(Launch("output_only"), staggered=True)
    start = rig.cache.write_pos.clone()
    assert torch.bincount(start.long(), minlength=L).tolist() == [2] * L
    assert start.tolist() != sorted(start.tolist())  # spread over the rows, not in runs
    for _ in range(L):
        rig.cache.advance(rig.slot_idx, route="output_only")
    assert torch.equal(rig.cache.write_pos, start)
    for launch, staggered in ((Launch("output_only"), False), (Launch("always_flush"), True),
                              (Launch("standard"), True)):
        rig.start_cursors(launch, staggered)
        assert not rig.cache.write_pos.any()


@pytest.mark.parametrize("kind", ["mamba2_ar", "gdn_ar", "spec", "e2e"])
def test_committed_results_name_each_case_once(kind):
    """A run replaces the results file's records by their case (``CASE_FIELDS``): two
    records of one case in a committed file would make that ambiguous."""
    from trtllm_replayssm.benchmarking.records import case_key

    records = json.loads((REPO / f"benchmarks/results/{kind}.json").read_text())
    assert len({case_key(r) for r in records}) == len(records)


def test_a_run_of_a_few_cases_replaces_only_those_in_the_results_file(tmp_path):
    """``bench_*.py --batches 8`` (no ``--out``) writes into the committed file: its cases'
    records in place, the other records kept; a run on another GPU stops before it measures.
    ``merge_results.py`` does the same with runs written elsewhere (a device call's ``$OUT``)."""
    from trtllm_replayssm.benchmarking.records import RESULTS, ResultsFile, case_key

    committed = json.loads((RESULTS / "gdn_ar.json").read_text())
    path = tmp_path / "gdn_ar.json"
    path.write_text(json.dumps(committed))
    gpu = committed[0]["gpu"]
    again = [dict(r, us_per_step=-1.0) for r in committed if r["batch"] == 8]
    new_case = dict(again[0], batch=3)
    results = ResultsFile(path, gpu)
    results.write(again[:2])  # (a run writes after each case: what it has so far)
    results.write(again + [new_case])
    merged = json.loads(path.read_text())
    assert len(merged) == len(committed) + 1 and merged[-1] == new_case
    assert [case_key(r) for r in merged[:-1]] == [case_key(r) for r in committed]
    assert all((r["us_per_step"] == -1.0) == (r["batch"] == 8) for r in merged[:-1])
    assert sum(r["batch"] == 8 for r in committed) == len(again) > 2

    with pytest.raises(SystemExit, match=gpu):
        ResultsFile(path, "NVIDIA H100 80GB HBM3")

    # merge_results.py: device runs' --out files into the committed file, the same way
    path.write_text(json.dumps(committed))
    (tmp_path / "run1.json").write_text(json.dumps(again[:2]))
    (tmp_path / "run2.json").write_text(json.dumps(again[2:] + [new_case]))
    merge = [sys.executable, str(REPO / "benchmarks/merge_results.py"), "gdn_ar", "--results", str(path)]
    subprocess.run(merge + [str(tmp_path / "run1.json"), str(tmp_path / "run2.json")], check=True,
                   capture_output=True, timeout=120)
    assert json.loads(path.read_text()) == merged
    (tmp_path / "h100.json").write_text(json.dumps([dict(new_case, gpu="NVIDIA H100 80GB HBM3")]))
    refused = subprocess.run(merge + [str(tmp_path / "h100.json")], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and gpu in refused.stderr and json.loads(path.read_text()) == merged

    ResultsFile(path, "none (dry run)", merge=False).write([new_case])  # a dry run: its records alone
    assert json.loads(path.read_text()) == [new_case]


@pytest.mark.parametrize("kind", ["mamba2_ar", "gdn_ar", "spec"])
def test_report_renders_the_committed_results(kind, tmp_path):
    """``report_results.py``: the README's tables from the committed results; the
    autoregressive ones carry the staggered columns, "n/a" for a ring route's record from a
    run that did not time staggered cycles (one such record made here from the committed
    file)."""
    def report(*extra):
        return subprocess.run([sys.executable, str(REPO / "benchmarks/report_results.py"), kind, *extra],
                              check=True, capture_output=True, text=True, timeout=120).stdout

    out = report()
    assert out.count("\n| ") >= 10 and "copy bandwidth" in out
    if kind != "spec":
        assert "output_only staggered" in out and "auto staggered" in out and "| n/a " not in out
        records = json.loads((REPO / f"benchmarks/results/{kind}.json").read_text())
        old = next(r for r in records if r["route"] == "output_only" and "staggered_speedup" in r)
        del old["staggered_speedup"], old["staggered_us_per_step"]
        (tmp_path / "old.json").write_text(json.dumps(records))
        assert "| n/a " in report(str(tmp_path / "old.json"))


def test_row_list_fold_probe_matches_the_package_fold():
    """``probe_fold_row_list.py``: its fold (programs over a list of the flushing rows,
    written once a step) leaves the same states, rings, cursors and outputs as the
    package's fold over two cycles with staggered cursors; and a wrong list (a row left
    out) changes the states, so the comparison can fail."""
    import contextlib

    import torch

    from trtllm_replayssm.benchmarking.rig import Launch
    from trtllm_replayssm.benchmarking.rigs import make_model_rig
    from trtllm_replayssm.ops.launch import LaunchConfig

    probe = load_script("probe_fold_row_list")
    rig = make_model_rig("tiny", 5, 4, torch.float32)
    cache = rig.cache
    launch = Launch("output_only", None, LaunchConfig(16, 2, 1, 1, heads_per_prog=3, loop_blocks=8))
    rig.start_cursors(launch, staggered=True)
    start = {k: getattr(cache, k).clone() for k in ("ssm_state", "x_cache", "dt_cache", "B_cache", "write_pos")}

    class ListMissingARow(probe.RowListFold):
        def plan(self, rig):
            super().plan(rig)
            self.count.clamp_(max=max(int(self.count) - 1, 0))

    def two_cycles(fold=None):
        for k, t in start.items():
            getattr(cache, k).copy_(t)
        with probe.folding_by_list(rig, fold) if fold else contextlib.nullcontext():
            for _ in range(2):
                rig.cycle_fn(launch)()
        return {k: getattr(cache, k).clone() for k in start} | {"out": rig.step["out"].clone()}

    package = two_cycles()
    by_list = two_cycles(probe.RowListFold(5, 2, cache.write_pos.device))
    for k, t in package.items():
        assert torch.equal(by_list[k], t), k
    wrong = two_cycles(ListMissingARow(5, 2, cache.write_pos.device))
    assert not torch.equal(wrong["ssm_state"], package["ssm_state"])


@pytest.mark.parametrize("by_head", [False, True], ids=["rows", "heads"])
@pytest.mark.parametrize("headdim,buffer_len,block_p", [(16, 4, 8), (12, 8, 4)])
def test_rolling_flush_probe_matches_the_recurrence(by_head, headdim, buffer_len, block_p):
    """``probe_rolling_flush.py``: its step (1/L of the rows, or heads, fold every step on a
    circular ring) follows an fp64 recurrence over 3 cycles with staggered cursors, a
    padding row, a forced flush mid-way and of every row at the end (the checkpoints then
    equal the recurrence's state), leaves unused slots bit-identical, and a corrupted cached
    x shows in the errors."""
    probe = load_script("probe_rolling_flush")
    res = probe.check(headdim, buffer_len, block_p, by_head=by_head)
    assert res["output_error"] < 1e-4 and res["state_error"] < 1e-5 and res["unused_slots_unchanged"], res
    bad = probe.check(headdim, buffer_len, block_p, by_head=by_head, corrupt=True)
    assert bad["output_error"] > 1e-2 and bad["state_error"] > 1e-4, bad


def test_probe_case_arguments_and_rigs():
    """``benchmarking.probes``: the probes' shared arguments, and one rig a case in order."""
    import argparse

    from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs

    ap = argparse.ArgumentParser()
    add_case_args(ap, ["tiny"], [2, 3], "x.json")
    args = ap.parse_args(["--state-dtypes", "fp32"])
    assert args.out.endswith("benchmarks/results/x.json") and (args.replays, args.rounds) == (20, 3)
    cases = [(name, dtype, batch, rig.case.batch, rig.case.buffer_len) for name, dtype, batch, rig in case_rigs(args)]
    assert cases == [("tiny", "fp32", 2, 2, 16), ("tiny", "fp32", 3, 3, 16)]


def test_gdn_ring_dtype_probe_rigs_differ_only_in_the_ring_dtype():
    """``probe_gdn_ring_dtype.py``: one rig per ring dtype with the same checkpoints, ring
    values (rounded) and step inputs, so the two routes' timings compare the ring's bytes
    alone."""
    import torch

    probe = load_script("probe_gdn_ring_dtype")
    rigs = probe.ring_rigs("tiny-gdn", 2, "bf16")
    assert {rd: (r.cache.d_cache.dtype, r.cache.k_cache.dtype) for rd, r in rigs.items()} == {
        "fp32": (torch.float32, torch.float32), "bf16": (torch.bfloat16, torch.bfloat16)}
    a, b = rigs["fp32"], rigs["bf16"]
    assert a.cache.ssm_state.dtype == torch.bfloat16 and torch.equal(a.cache.ssm_state, b.cache.ssm_state)
    assert b.step is a.step
    assert torch.equal(a.cache.d_cache.to(torch.bfloat16), b.cache.d_cache) and not torch.equal(
        a.cache.d_cache, b.cache.d_cache.float())


def test_gdn_ring_halves_probe_emulates_the_replay_step():
    """``probe_gdn_ring_halves.py``: with an fp32 ring the emulated replay checkpoint stays at
    the standard step's drift over 8 flushes (a wrong fold or flush would not), the raw-key
    ring rebuilds it bit for bit, and either half in bf16 drifts orders of magnitude more."""
    import torch

    res = load_script("probe_gdn_ring_halves").run(heads=2, dim=16, steps=32, buffer_len=4)
    std = res["standard (fp32 state every step)"]["rel_err"]
    assert 0 < std < 1e-5 and res["replay, d fp32, k fp32"]["ratio"] < 3
    assert torch.equal(res["replay, d fp32, raw k (bf16)"]["state"], res["replay, d fp32, k fp32"]["state"])
    assert min(res["replay, d bf16, k fp32"]["ratio"], res["replay, d fp32, k bf16"]["ratio"]) > 100


def test_dispatch_between_probe_times_the_neighbouring_points_configs():
    """``probe_dispatch_between.py``: a record names the standard kernel's table configs at
    the batch points either side of its batch size, each with its time from the tuner's
    tries where it was one (Super bf16 at batch 6: batch 4's and batch 8's rows, which the
    sm_90 table gives different tiles)."""
    import types

    import torch

    from trtllm_replayssm.ops.launch import LaunchConfig, select_config

    probe = load_script("probe_dispatch_between")
    shape = dict(headdim=64, dstate=128, nheads=128, family="mamba2")
    rig = types.SimpleNamespace(case=types.SimpleNamespace(batch=6, state_dtype=torch.bfloat16,
                                                           act_dtype=torch.bfloat16), table_shape=lambda: shape)
    at = {b: select_config("standard", "sm90", torch.bfloat16, torch.bfloat16, batch=b, **shape) for b in (4, 8)}
    assert at[4] != at[8]
    tried = [{"block_p": 1, "num_warps": 1, "error": "OutOfResources"}, {**at[4].to_dict(), "us": 8.271}]
    assert probe.neighbour_configs(rig, "sm90", {"tried": tried}) == {
        4: {"config": probe.short(at[4]), "us": 8.27}, 8: {"config": probe.short(at[8]), "us": None}}
    assert probe.short(LaunchConfig(16, 2, early_terms=1)) == {"block_p": 16, "num_warps": 2, "early_terms": 1}
    rig.case.batch = 600
    assert list(probe.neighbour_configs(rig, "sm90", {"tried": tried})) == [512]


@pytest.mark.parametrize("name", ["tiny", "tiny-gdn"])
def test_one_pass_probe_tunes_each_forms_fold_under_its_product(name, monkeypatch):
    """``probe_one_pass_fold.py --tune-fold``: a form's fold config comes from its family's
    tuner, and every fold launch of that tuning goes through the form's launcher (so the
    config is chosen on that form's product); the config is one of the tuner's candidates."""
    import torch

    from trtllm_replayssm.benchmarking import gdn_ar, mamba2_ar
    from trtllm_replayssm.benchmarking.probes import is_fold_launch
    from trtllm_replayssm.benchmarking.rigs import make_model_rig

    probe = load_script("probe_one_pass_fold")
    through_form = []
    form_launcher = probe.fold_product

    def counting(form):
        launch = form_launcher(form)

        def counted(kernel, grid, kwargs):
            through_form.append((form, is_fold_launch(kernel, kwargs)))
            return launch(kernel, grid, kwargs)
        return counted

    monkeypatch.setattr(probe, "fold_product", counting)
    rig = make_model_rig(name, 2, 4, torch.float32)
    cfg = probe.tuned_fold(rig, "one_pass", limit=2)
    family = gdn_ar if name == "tiny-gdn" else mamba2_ar
    head_dim = rig.case.geom.head_v_dim if name == "tiny-gdn" else rig.case.geom.headdim
    assert cfg in family.candidate_configs("fold", head_dim, 2)
    assert ("one_pass", True) in through_form and {form for form, _ in through_form} == {"one_pass"}


def test_nonflush_chain_probe_forms_read_the_same_rows():
    """``probe_nonflush_chain.py``: with the rig's slots in batch order, its non-flush
    launch without slot indices gives the package's outputs and ring appends (the fold
    skipped: no row flushes at ``w = 3``); with the slots permuted it does not, so the
    form really drops the indices."""
    import torch

    from trtllm_replayssm.benchmarking.rig import Launch
    from trtllm_replayssm.benchmarking.rigs import make_model_rig
    from trtllm_replayssm.ops.launch import launcher_in_front

    probe = load_script("probe_nonflush_chain")
    rig = make_model_rig("tiny", 3, 8, torch.float32)
    cache, launch = rig.cache, Launch("output_only")
    start = {k: getattr(cache, k).clone() for k in ("x_cache", "dt_cache", "B_cache")}

    def step(form):
        for k, t in start.items():
            getattr(cache, k).copy_(t)
        cache.write_pos.fill_(3)
        with launcher_in_front(probe.front(form)):
            rig.step_fn(launch)()
        return {k: getattr(cache, k).clone() for k in start} | {"out": rig.step["out"].clone()}

    package = step("package")
    for k, t in step("alone_no_slot_idx").items():
        assert torch.equal(t, package[k]), k
    rig.slot_idx.copy_(torch.tensor([2, 0, 1], dtype=rig.slot_idx.dtype))
    permuted = step("package")
    assert not torch.equal(step("alone_no_slot_idx")["out"], permuted["out"])


@pytest.mark.parametrize("family", ["mamba2", "gdn"])
def test_warm_compile_launches_every_swept_candidate(family):
    """The warm compile's worker launches each candidate of the kernels it is given (a fold
    config under the table's non-flush launch, which a wrong route name would make raise
    and be skipped), and the kernels every ``--tune`` sweeps are the candidate lists."""
    import torch

    from trtllm_replayssm.benchmarking import gdn_ar, mamba2_ar
    from trtllm_replayssm.benchmarking.warm_compile import launch_each_candidate, swept_kernels
    from trtllm_replayssm.models import model

    mod, name = (mamba2_ar, "tiny") if family == "mamba2" else (gdn_ar, "tiny-gdn")
    assert swept_kernels(mod.TUNABLE) == sorted(mod.CANDIDATES)
    assert swept_kernels(["replay"]) == ["fold", "output_only"] and swept_kernels(["nonflush"]) == ["output_only"]
    if family == "mamba2":
        rig, rows = mod.Mamba2Rig(mod.Mamba2Case(name, model(name).geom, 3, 2, torch.float32), 1), model(name).geom.headdim
    else:
        rig, rows = mod.GDNRig(mod.GDNCase(name, model(name).geom, 3, 2, torch.float32), 1), model(name).geom.head_v_dim
    candidates = {k: mod.candidate_configs(k, rows)[:2] for k in mod.CANDIDATES}
    assert launch_each_candidate(rig, candidates) == sum(map(len, candidates.values()))
    assert launch_each_candidate(rig, {"no_such_route": candidates["standard"]}) == 0


def test_warm_compile_maps_groups_over_spawned_workers(capsys):
    from trtllm_replayssm.benchmarking.warm_compile import warm_compile

    warm_compile(len, [(1, 2), (3,), (1, 2)], workers=2)  # the repeated group runs once
    assert "warm compile: 3 launches in 2 groups" in capsys.readouterr().out


def test_ncu_small_batch_summarizes_ncu_csv(tmp_path):
    """``ncu_small_batch.py --summarize``: a record a profiled Mamba2 launch of ncu's CSV page
    (its NVTX range names the model, batch and step), the fills between the steps left out."""
    head = ['"==PROF== Connected to process 9"',
            '"ID","Process ID","Process Name","Host Name","thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:'
            'Color:Msg_Type:Msg","Kernel Name","Block Size","Grid Size","Section Name","Metric Name","Metric Unit",'
            '"Metric Value"']

    def row(i, kernel, rng, metric, value, unit=""):
        return (f'"{i}","9","python","h","942  ""<default domain>:{rng}:none:none:none:none:none:none"" ",'
                f'"{kernel}","(32, 1, 1)","(3072, 1, 1)","S","{metric}","{unit}","{value}"')

    rng = "nemotron-3-nano-4b_b32_w14"
    lines = head + [row(0, "void at::vectorized_elementwise_kernel<4>(int)", rng, "Duration", "1,024", "ns"),
                    row(1, "_replay_fold_kernel", rng, "Duration", "10,240", "ns"),
                    row(1, "_replay_fold_kernel", rng, "Waves Per SM", "17.45"),
                    row(1, "_replay_fold_kernel", rng, "Registers Per Thread", "128"),
                    row(2, "_selective_state_update_kernel", "nemotron-3-super_b8_std", "Grid Size", "16,384"),
                    row(2, "_selective_state_update_kernel", "nemotron-3-super_b8_std", "Duration", "1.2", "ms"),
                    row(3, "_gdn_replay_kernel", "qwen3.5-4b_b8_w0", "Grid Size", "512"),
                    row(4, "_gdn_replay_kernel", "qwen3.5-4b_b8_w0", "Grid Size", "256")]
    page = tmp_path / "ncu.csv"
    page.write_text("\n".join(lines) + "\n")
    records = load_script("ncu_small_batch").summarize([str(page)], "GPU", "abc1234")
    assert [(r["model"], r["batch"], r["step"], r["kernel"], r["order"]) for r in records] == [
        ("nemotron-3-nano-4b", 32, "output_only, every cursor at 14", "_replay_fold_kernel", 0),
        ("nemotron-3-super", 8, "standard", "_selective_state_update_kernel", 0),
        # GDN's non-flush and fold launches are one kernel: the order in their range tells them apart
        ("qwen3.5-4b", 8, "output_only, every cursor at 0", "_gdn_replay_kernel", 0),
        ("qwen3.5-4b", 8, "output_only, every cursor at 0", "_gdn_replay_kernel", 1)]
    assert records[0]["duration_us"] == 10.24 and records[0]["waves_per_sm"] == 17.45
    assert records[0]["registers_per_thread"] == 128 and records[1]["grid_size"] == 16384
    assert records[1]["duration_us"] == 1200  # in the unit ncu chose
    assert all(r["gpu"] == "GPU" and r["commit"] == "abc1234" for r in records)


def test_gdn_early_tiles_probe_compares_the_forms_bit_for_bit(monkeypatch):
    """``probe_gdn_early_tiles.py``: on a prefetching non-flush config its two forms leave
    the same caches and outputs after staggered cycles; a form whose step differs (v
    scaled) is told apart."""
    import torch

    from trtllm_replayssm.benchmarking.rigs import make_model_rig
    from trtllm_replayssm.ops.gdn import replay as gdn_replay
    from trtllm_replayssm.ops.launch import LaunchConfig

    probe = load_script("probe_gdn_early_tiles")
    table_config = gdn_replay.select_config
    monkeypatch.setattr(gdn_replay, "select_config", lambda kernel, *a, **k: (
        LaunchConfig(4, 1, loop_blocks=2, prefetch=1) if kernel == "output_only" else table_config(kernel, *a, **k)))
    rig = make_model_rig("tiny-gdn", 2, 4, torch.float32)
    assert probe.forms_agree(rig, cycles=1)

    form_of = probe.in_form

    def v_scaled_when_early(form, fn):
        def run():
            v = rig.step["v"].clone()
            if form == "early":
                rig.step["v"].mul_(1.5)
            try:
                return form_of(form, fn)()
            finally:
                rig.step["v"].copy_(v)
        return run
    monkeypatch.setattr(probe, "in_form", v_scaled_when_early)
    assert not probe.forms_agree(rig, cycles=1)


def test_small_batch_tiles_probe_adds_its_shapes_beside_the_tables_picks(monkeypatch):
    """``probe_gdn_small_batch_tiles.py``: each named set joins its candidate list, every added
    shape new to it; ``--only-added`` keeps the configs the sm_90 table runs at batch 8 and 32,
    so the probe's tuning still measures them."""
    import itertools

    import torch

    from trtllm_replayssm.benchmarking import gdn_ar
    from trtllm_replayssm.ops.launch import select_config

    probe = load_script("probe_gdn_small_batch_tiles")
    before = dict(gdn_ar.CANDIDATES)
    for only_added in (False, True):
        monkeypatch.setattr(gdn_ar, "CANDIDATES", dict(before))
        probe.add_candidates(list(probe.ADDED), only_added)
        for name, key in probe.CANDIDATE_LIST.items():
            added = probe.ADDED[name]
            assert set(added) <= set(gdn_ar.CANDIDATES[key]) and not set(added) & set(before[key])
            for batch, nheads in itertools.product((8, 32), (32, 64)):  # Qwen3.5-4B's and -122B's value heads
                picked = select_config(key, "sm90", torch.float32, torch.bfloat16, headdim=128, dstate=128,
                                       batch=batch, family="gdn", nheads=nheads)
                assert picked in gdn_ar.CANDIDATES[key]
        assert len(gdn_ar.CANDIDATES["standard"]) == len(before["standard"])

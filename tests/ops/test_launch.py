"""Launch decisions: the measured table, its fallbacks, the route dispatcher."""

import contextlib
import json
from importlib import resources

import pytest
import torch

from trtllm_replayssm.ops import launch
from trtllm_replayssm.ops.launch import BATCH_POINTS
from trtllm_replayssm.ops.cursors import FLUSH_EVERY_STEP
from trtllm_replayssm.ops.mamba2.replay import ROUTES


def _table():
    return json.loads(resources.files("trtllm_replayssm").joinpath("tuned/mamba2_sm90.json").read_text())


def _shipped(family):
    """The package's tables of ``family``: its architectures' and its GPUs' own."""
    return sorted(p.name for p in resources.files("trtllm_replayssm").joinpath("tuned").iterdir()
                  if p.name.startswith(f"{family}_") and p.name.endswith(".json"))


def _read_shipped(name):
    return json.loads(resources.files("trtllm_replayssm").joinpath(f"tuned/{name}").read_text())


@contextlib.contextmanager
def _tables_from(folder):
    """Inside the block the dispatcher reads its tables from ``folder`` (``TUNED_DIR_ENV``);
    its cache of tables is emptied on the way in and out, so no other test sees them."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(launch.TUNED_DIR_ENV, str(folder))
        launch._load_table.cache_clear()
        try:
            yield
        finally:
            launch._load_table.cache_clear()


def test_table_covers_benchmarked_shapes():
    table = _table()
    for sd in (torch.float32, torch.bfloat16):
        for P in (64, 80):
            for kernel in ("standard", "output_only", "fold", "state_and_output", "always_flush", "route"):
                rows = table[launch.table_key(kernel, sd, torch.bfloat16, P, 128)]
                assert [r["batch"] for r in rows] == list(BATCH_POINTS)
                heads = 128 if P == 64 else 96
                assert [r["head_rows"] for r in rows] == [b * heads for b in BATCH_POINTS]


@pytest.mark.parametrize("name", _shipped("gdn"))
def test_gdn_table_covers_benchmarked_work(name):
    """Every batch point of both benchmarked GDN models (32 and 64 value heads) has a row
    at its exact work (head rows), its own or the other model's at the same work
    (Qwen3.5-122B at batch 2 takes -4B's batch-4 row); so a batch point never falls back
    to a neighbour's tile."""
    from trtllm_replayssm.benchmarking.gdn_ar import GDNRig
    from trtllm_replayssm.models import model

    table = _read_shipped(name)
    value_heads = [model(name).geom.num_v_heads for name in ("qwen3.5-4b", "qwen3.5-122b")]
    assert value_heads == [32, 64]
    for sd in (torch.float32, torch.bfloat16):
        for kernel in GDNRig.TABLE_KERNELS + ("route",):
            head_rows = {r["head_rows"] for r in table[launch.table_key(kernel, sd, torch.bfloat16, 128, 128)]}
            missing = [(b, heads) for heads in value_heads for b in BATCH_POINTS if b * heads not in head_rows]
            assert not missing, (kernel, sd, missing)


@pytest.mark.parametrize("name", _shipped("mamba2") + _shipped("gdn"))
def test_routes_in_table_are_known(name):
    from trtllm_replayssm.ops.gdn.replay import ROUTES as GDN_ROUTES

    routes = ROUTES if name.startswith("mamba2_") else GDN_ROUTES
    for key, rows in _read_shipped(name).items():
        if key.startswith("route|"):
            assert all(r["route"] in routes for r in rows)


def test_every_shipped_table_is_an_architectures_or_a_gpus_of_one():
    """A GPU's own table only beside its architecture's (which other GPUs of it read)."""
    for family in ("mamba2", "gdn"):
        tags = [name[len(family) + 1:-len(".json")] for name in _shipped(family)]
        assert tags and all(launch.tag_arch(t) in tags for t in tags), (family, tags)


@pytest.mark.parametrize("name", _shipped("mamba2") + _shipped("gdn"))
def test_table_rows_are_launch_configs(name):
    """Every config row of a shipped table names only LaunchConfig fields (a table tuned
    by newer code than the package's would otherwise lose a field silently)."""
    table = _read_shipped(name)
    for key, rows in table.items():
        if key.startswith("route|"):
            continue
        for row in rows:
            extra = set(row) - set(launch.CONFIG_FIELDS) - {"batch", "head_rows", "us"}
            assert not extra, (key, extra)
            launch.LaunchConfig(**{k: row[k] for k in launch.CONFIG_FIELDS if k in row})


def test_nearest_batch_lookup():
    table = _table()
    key = launch.table_key("standard", torch.float32, torch.bfloat16, 64, 128)
    want = {r["batch"]: r for r in table[key]}
    cfg = launch.select_config("standard", "sm90", torch.float32, torch.bfloat16, 64, 128, 100)
    assert (cfg.block_p, cfg.num_warps) == (want[128]["block_p"], want[128]["num_warps"])


def test_nearest_batch_point_is_nearest_in_log_scale():
    """Batch 20 is nearer 32 than 8 by ratio (1.6x against 2.5x) though 12 from each; 80 is
    nearer 128; a tie in ratio (16 between 8 and 32) takes the first point, as the C
    library's ``find_case`` does."""
    assert [launch.nearest_batch_point(BATCH_POINTS, b) for b in (20, 80, 16, 3, 0, 1000)] == [32, 128, 8, 4, 1, 512]


@pytest.mark.parametrize("route", ["standard_step", "always_flush"])
def test_routes_that_flush_every_step_take_their_tables_configs(tmp_path, route):
    """Without a config, ``standard_step`` launches on the standard kernel's measured row
    (it is that kernel with a cursor check, and the tables keep no row for it) and
    ``always_flush`` on its own route's. Seen by a launcher in front that launches nothing."""
    import trtllm_replayssm as rs
    from mamba2_harness import DEVICE
    from trtllm_replayssm.cache import Mamba2Geometry, Mamba2ReplayCache

    rows = {"standard": dict(block_p=8, num_warps=1), "always_flush": dict(block_p=4, num_warps=2)}
    table = {launch.table_key(kernel, torch.float32, torch.float32, 8, 16): [dict(batch=2, **row)]
             for kernel, row in rows.items()}
    tag = launch.device_table_tag(torch.device(DEVICE))
    (tmp_path / launch.table_file_name(tag, "mamba2")).write_text(json.dumps(table))
    cache = Mamba2ReplayCache(Mamba2Geometry(nheads=2, headdim=8, dstate=16, ngroups=1), 1, 2, 4, torch.float32,
                              torch.float32, DEVICE)
    seen = []
    with _tables_from(tmp_path), launch.launcher_in_front(lambda kernel, grid, kwargs: seen.append(kwargs) or True):
        rs.selective_state_update_replayssm(
            cache.ssm_state[0], torch.randn(2, 2, 8, device=DEVICE), torch.randn(2, 2, device=DEVICE),
            -torch.rand(2, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE),
            route=route, **cache.ring_kwargs(0))
    want = rows["standard" if route == "standard_step" else route]
    assert (seen[0]["BLOCK_P"], seen[0]["num_warps"]) == (want["block_p"], want["num_warps"])


def test_small_batch_never_takes_a_losing_replay_route():
    """At batch 1 the dispatcher falls back to a route that flushes every step (standard cost)."""
    for sd in (torch.float32, torch.bfloat16):
        assert launch.select_route("sm90", sd, torch.bfloat16, 64, 128, 1) in FLUSH_EVERY_STEP


@pytest.mark.parametrize("arch", ["cpu", "sm120"])
def test_unknown_device_falls_back(arch):
    assert launch.select_route(arch, torch.float32, torch.float32, 16, 16, 4) == "output_only"
    cfg = launch.select_config("output_only", arch, torch.float32, torch.float32, 80, 128, 4)
    assert cfg == launch.default_config("output_only", 80, 4)


def test_rows_carry_their_work_and_models_of_one_head_shape_keep_their_routes(tmp_path):
    """Qwen3.5-4B (32 value heads) and -122B (64) share the GDN key (K = V = 128): the
    dispatcher matches batch x heads, so at batch 8 each gets the route measured for it,
    not whichever model wrote the table last. (A table of its own: which routes the
    shipped table holds there changes with each tuning run.)"""
    gdn = json.loads(resources.files("trtllm_replayssm").joinpath("tuned/gdn_sm90.json").read_text())
    for table in (_table(), gdn):
        for rows in table.values():
            assert all(r["head_rows"] % r["batch"] == 0 for r in rows)
    key = launch.table_key("route", torch.float32, torch.bfloat16, 128, 128)
    rows = [dict(batch=8, head_rows=256, route="always_flush"), dict(batch=8, head_rows=512, route="output_only"),
            dict(batch=32, head_rows=1024, route="output_only")]
    (tmp_path / "gdn_sm90.json").write_text(json.dumps({key: rows}))
    with _tables_from(tmp_path):
        route = lambda nheads: launch.select_route("sm90", torch.float32, torch.bfloat16, 128, 128, 8, family="gdn",
                                                   nheads=nheads)
        assert route(32) == "always_flush"
        assert route(64) == "output_only"
        # Without the heads, the batch is matched: the first row measured at batch 8.
        assert launch.select_route("sm90", torch.float32, torch.bfloat16, 128, 128, 8, family="gdn") == "always_flush"


@pytest.mark.parametrize("name, tag", [("NVIDIA H100 80GB HBM3", "sm90_h100_80gb_hbm3"), ("NVIDIA H200", "sm90"),
                                       ("NVIDIA H100 PCIe", "sm90_h100_pcie"), ("", "sm90")])
def test_a_gpu_other_than_its_archs_reference_has_tables_of_its_own(name, tag):
    assert launch.table_tag("sm90", name) == tag and launch.tag_arch(tag) == "sm90"


def test_a_gpus_own_table_comes_before_its_archs(tmp_path):
    """An H100 reads ``gdn_sm90_h100_80gb_hbm3.json``, and a GPU of the arch without a
    table of its own reads ``gdn_sm90.json``."""
    key = launch.table_key("route", torch.float32, torch.bfloat16, 128, 128)
    (tmp_path / "gdn_sm90.json").write_text(json.dumps({key: [dict(batch=4, head_rows=128, route="always_flush")]}))
    (tmp_path / "gdn_sm90_h100_80gb_hbm3.json").write_text(
        json.dumps({key: [dict(batch=4, head_rows=128, route="output_only")]}))
    with _tables_from(tmp_path):
        route = lambda tag: launch.select_route(tag, torch.float32, torch.bfloat16, 128, 128, 4, family="gdn",
                                                nheads=32)
        assert route("sm90_h100_80gb_hbm3") == "output_only"
        assert route("sm90_h100_pcie") == route("sm90") == "always_flush"


class _LibraryBuiltFrom:
    """An AOT launcher (:class:`~trtllm_replayssm.aot.backend.AOTLauncher`'s ``tables_for``)
    whose library was built from ``tag``'s tables."""

    def __init__(self, tag):
        self.tag = tag

    def tables_for(self, arch):
        return self.tag

    def __call__(self, kernel, grid, kwargs):
        return False


def test_device_table_tag_names_the_gpu_unless_the_aot_library_serves(monkeypatch):
    """The dispatcher reads a GPU's own tables under Triton's JIT, and those the AOT
    library was built from while it is in front."""
    assert launch.device_table_tag(torch.device("cpu")) == "cpu"
    monkeypatch.setattr(launch, "device_arch", lambda device: "sm90")
    monkeypatch.setattr(launch, "_device_name", lambda index: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(launch, "_gpu_table_tag", launch._gpu_table_tag.__wrapped__)  # (nothing cached by the test)
    cuda0 = torch.device("cuda", 0)
    assert launch.device_table_tag(cuda0) == "sm90_h100_80gb_hbm3"
    for built_from in ("sm90", "sm90_h100_80gb_hbm3", "sm90_h200_nvl"):
        with launch.launcher_in_front(_LibraryBuiltFrom(built_from)):
            assert launch.device_table_tag(cuda0) == built_from
    with launch.architecture_tables():  # Triton's JIT on the library's tables, launching as it would
        assert launch.device_table_tag(cuda0) == "sm90" and launch._launchers_take_programmatic()
    assert launch.device_table_tag(cuda0) == "sm90_h100_80gb_hbm3"


def test_one_work_at_two_batch_sizes_keeps_a_row_for_each(tmp_path):
    """Qwen3.5-4B at batch 256 and -122B at 128 both run 8192 head rows: a tuning run of
    one keeps the other's row, and each model gets the row measured at its batch size
    (a fold's row blocks run over batch rows); a batch with no row of its own at that
    work takes the row of the nearest batch size."""
    from trtllm_replayssm.benchmarking.records import update_table

    cfg = lambda row_block: {"config": launch.LaunchConfig(block_p=16, num_warps=2, row_block=row_block), "us": 1.0}
    key_of = lambda kernel: launch.table_key(kernel, torch.float32, torch.bfloat16, 128, 128)
    table = {}
    update_table(table, 256, 32, key_of, {"fold": cfg(128)}, "output_only")
    update_table(table, 128, 64, key_of, {"fold": cfg(1)}, "always_flush")
    update_table(table, 128, 64, key_of, {"fold": cfg(8)}, "output_only")  # a later run of the same case
    assert [(r["batch"], r["head_rows"], r["row_block"]) for r in table[key_of("fold")]] == [(128, 8192, 8),
                                                                                             (256, 8192, 128)]
    (tmp_path / "gdn_sm90.json").write_text(json.dumps(table))
    with _tables_from(tmp_path):
        fold = lambda batch, nheads: launch.select_config("fold", "sm90", torch.float32, torch.bfloat16, 128, 128,
                                                          batch, family="gdn", nheads=nheads).row_block
        assert fold(256, 32) == 128 and fold(128, 64) == 8
        assert fold(512, 16) == 128 and fold(64, 128) == 8
        assert launch.select_route("sm90", torch.float32, torch.bfloat16, 128, 128, 256, family="gdn",
                                   nheads=32) == "output_only"


def test_tables_from_another_folder(tmp_path):
    """``REPLAYSSM_TUNED_DIR``: the dispatcher reads that folder's tables (a tuning run's)."""
    key = launch.table_key("route", torch.float32, torch.bfloat16, 64, 128)
    (tmp_path / "mamba2_sm90.json").write_text(json.dumps({key: [{"batch": 128, "route": "state_and_output"}]}))
    with _tables_from(tmp_path):
        assert launch.select_route("sm90", torch.float32, torch.bfloat16, 64, 128, 128) == "state_and_output"
    with _tables_from(tmp_path / "missing"):
        assert launch.select_route("sm90", torch.float32, torch.bfloat16, 64, 128, 128) == "output_only"  # no table
    assert launch.select_route("sm90", torch.float32, torch.bfloat16, 64, 128, 128) == "output_only"


def test_fold_programmatic_launch_only_on_a_gpu_under_the_jit(monkeypatch):
    """``FOLD_PDL`` takes effect on a GPU of sm_90 or later, up to its head rows, under
    Triton's JIT only (not in the interpreter, nor where a launcher such as the AOT
    backend or recorder stands in front: its cubins carry no griddepcontrol); and the
    launch options follow it (none where it is off, so AOT specs never carry them)."""
    monkeypatch.setattr(launch, "FOLD_PDL", True)
    limit = launch.FOLD_PDL_MAX_HEAD_ROWS["mamba2"]
    assert not launch.fold_programmatic_launch(torch.device("cpu"), 1, "mamba2")
    assert launch.pdl_options(False, primary=True) == {} == launch.pdl_options(False, primary=False)
    assert launch.pdl_options(True, primary=True) == {"LAUNCH_DEPENDENTS": True}
    assert launch.pdl_options(True, primary=False) == {"WAIT_PRIMARY": True, "launch_pdl": True}
    if torch.cuda.is_available():
        cuda = torch.device("cuda")
        on_gpu = torch.cuda.get_device_capability()[0] >= 9
        assert launch.fold_programmatic_launch(cuda, limit, "mamba2") == on_gpu
        assert not launch.fold_programmatic_launch(cuda, limit + 1, "mamba2")
        assert launch.fold_programmatic_launch(cuda, launch.FOLD_PDL_MAX_HEAD_ROWS["gdn"], "gdn") == on_gpu
        with launch.launcher_in_front(lambda kernel, grid, kwargs: False):
            assert not launch.fold_programmatic_launch(cuda, 1, "gdn")
        monkeypatch.setattr(launch, "FOLD_PDL", False)
        assert not launch.fold_programmatic_launch(cuda, 1, "gdn")


@pytest.mark.parametrize("family", ["mamba2", "gdn"])
def test_register_cap_reaches_the_standard_kernels_launch(family):
    """``LaunchConfig.maxnreg`` is a launch option of the standard kernel (what the JIT
    compiles under and what the AOT build records), and no option at all when it is 0, so
    uncapped launches keep their specs. Seen by a launcher in front that launches nothing."""
    from trtllm_replayssm.benchmarking.rigs import make_model_rig
    from trtllm_replayssm.benchmarking.rig import Launch

    seen = []

    def record(kernel, grid, kwargs):
        seen.append(kwargs)
        return True

    rig = make_model_rig("tiny" if family == "mamba2" else "tiny-gdn", 2, 4, torch.float32)
    with launch.launcher_in_front(record):
        for cap in (0, 128):
            for route in ("standard", "always_flush"):
                rig.layer_step(Launch(route, launch.LaunchConfig(16, 1, maxnreg=cap)), 0)
    assert [kw.get("maxnreg") for kw in seen] == [None, None, 128, 128]


def _replay_launches(model: str, state_dtype: torch.dtype) -> dict:
    """``{"fold" | "nonflush": kwargs}`` of one output_only layer step of ``model``'s tiny
    rig, seen by a launcher in front that launches nothing."""
    from trtllm_replayssm.benchmarking.probes import is_fold_launch, is_nonflush_launch
    from trtllm_replayssm.benchmarking.rig import Launch
    from trtllm_replayssm.benchmarking.rigs import make_model_rig

    seen = {}

    def record(kernel, grid, kwargs):
        for name, is_launch in (("fold", is_fold_launch), ("nonflush", is_nonflush_launch)):
            if is_launch(kernel, kwargs):
                seen[name] = kwargs
        return True

    rig = make_model_rig(model, 2, 16, state_dtype)
    with launch.launcher_in_front(record):
        rig.layer_step(Launch("output_only", launch.LaunchConfig(16, 1), launch.LaunchConfig(16, 1)), 0)
    return seen


def _gpu_precisions(monkeypatch) -> None:
    """The GPU's product precisions in place of the interpreter's ieee
    (``common.fold_precision`` reads them)."""
    from trtllm_replayssm.ops import common

    monkeypatch.setattr(common, "DOT_PRECISION", "tf32x3")
    monkeypatch.setattr(common, "ONE_PASS_PRECISION", "tf32")


def test_fold_product_precision_follows_the_checkpoint_dtype(monkeypatch):
    """Mamba2's fold launch (``common.one_pass_fold``): one TF32 pass into a bf16
    checkpoint, the fp32-accurate split pass over its exact B ring into fp32 and fp16 ones.
    The GPU's precisions are patched in (the interpreter has only ieee)."""
    _gpu_precisions(monkeypatch)
    seen = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        fold = _replay_launches("tiny", dtype)["fold"]
        seen[dtype] = (fold["DOT_PRECISION"], fold["EXACT_B"], fold["ONE_PASS_PRECISION"])
    assert seen == {torch.float32: ("tf32x3", True, "tf32"), torch.bfloat16: ("tf32", False, "tf32"),
                    torch.float16: ("tf32x3", True, "tf32")}


def test_gdn_fold_product_precision_follows_the_checkpoint_dtype(monkeypatch):
    """GDN's fold launch: one TF32 pass into a bf16 checkpoint, tf32x3 into an fp32 one;
    the non-flush launch, which has no product, keeps one precision (one compile) for both.
    GPU precisions patched in, as above."""
    _gpu_precisions(monkeypatch)
    seen = {}
    for dtype in (torch.float32, torch.bfloat16):
        for name, kwargs in _replay_launches("tiny-gdn", dtype).items():
            seen[dtype, name] = kwargs["DOT_PRECISION"]
    assert seen == {(torch.float32, "fold"): "tf32x3", (torch.float32, "nonflush"): "tf32x3",
                    (torch.bfloat16, "fold"): "tf32", (torch.bfloat16, "nonflush"): "tf32x3"}


@pytest.mark.parametrize("fields, name", [
    (dict(block_p=12), "block_p"), (dict(num_warps=3), "num_warps"), (dict(row_block=6), "row_block"),
    # a ring walked in BLOCK_L // fold_chunk chunks: 3 skipped entries at L = 32 (state_and_output's
    # outputs 0.38 off the reference, silently, before this check)
    (dict(fold_chunk=3), "fold_chunk"), (dict(key_chunk=24), "key_chunk"), (dict(loop_blocks=0), "loop_blocks"),
    (dict(heads_per_prog=0), "heads_per_prog"), (dict(maxnreg=-1), "maxnreg"),
    (dict(block_p=16.0), "block_p"), (dict(prefetch=-1), "prefetch"),
])
def test_launch_config_refuses_values_its_kernels_cannot_take(fields, name):
    """A config is checked when it is made (a caller's ``config=``, a table row): a value
    that would not compile, or would skip part of a tile, raises naming the field."""
    with pytest.raises(ValueError, match=f"LaunchConfig.{name} must be"):
        launch.LaunchConfig(**{"block_p": 16, "num_warps": 1, **fields})
    launch.LaunchConfig(16, 1, fold_chunk=0, key_chunk=32, row_block=128, maxnreg=128)  # each at a good value

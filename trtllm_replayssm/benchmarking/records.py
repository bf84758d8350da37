"""Helpers the benchmark scripts share: the commit measured, where a run writes (the
committed results and tables, or a dry run's scratch folder), a results file a run adds
its cases to, the tuned table a run reads and writes and its update, the tuner's
candidates and a probe's records."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from ..ops import launch

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks/results"
PACKAGE_TABLES = REPO / "trtllm_replayssm/tuned"
DRY_RUN_DIR = Path(tempfile.gettempdir()) / "trtllm_replayssm_dry_runs"


def committed_or_scratch(given: Optional[str], committed: Path, dry_run: bool) -> Path:
    """Where a benchmark script writes (its ``--out``, ``--table-dir``): what was given,
    else ``committed`` (a file of :data:`RESULTS`, or :data:`PACKAGE_TABLES`). A dry run's
    output (records that measure nothing, a table for the ``cpu`` arch) goes under
    :data:`DRY_RUN_DIR` instead, so that the scripts' documented dry runs, which pass no
    ``--out``, leave the repository's results and tables as they are."""
    if given is not None:
        return Path(given)
    if not dry_run:
        return committed
    print(f"dry run: {committed.name} goes under {DRY_RUN_DIR}", flush=True)
    return DRY_RUN_DIR / committed.name


def git_commit() -> str:
    """``$REPLAYSSM_COMMIT`` where set (the device machine gets a copy of the working
    tree whose ``.git``, if any, is not this checkout's), else the checkout's short hash."""
    if os.environ.get("REPLAYSSM_COMMIT"):
        return os.environ["REPLAYSSM_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:
        return "unknown"


# The fields that name a case in the results files (a field a file's records lack counts
# as None): a run replaces the records of the cases it measured and keeps the others.
CASE_FIELDS = ("model", "state_dtype", "ring_dtype", "act_dtype", "batch", "L", "T", "acceptance", "route", "phases")


def case_key(record: dict) -> tuple:
    return tuple(record.get(f) for f in CASE_FIELDS)


class ResultsFile:
    """A results file (a JSON list of records, one a case and route) that a run adds to.

    A run of a few cases (``--batches 8 32``, ``--tune nonflush``) writes its records in
    place of the file's records of the same cases (:data:`CASE_FIELDS`) and keeps the
    rest, so the committed file stays whole; with ``merge`` off (a dry run) it holds this
    run's records alone. One file holds one GPU's measurements: a run on another GPU stops
    here, before it measures anything, rather than mix the two in one table.
    """

    def __init__(self, path: Path, gpu: str, merge: bool = True):
        self.path = Path(path)
        self.earlier: List[dict] = json.loads(self.path.read_text()) if merge and self.path.exists() else []
        others = sorted({str(r.get("gpu")) for r in self.earlier} - {gpu})
        if others:
            raise SystemExit(f"{self.path} holds records measured on {', '.join(others)}, and this run is on {gpu}: "
                             "write them to another file (the benchmark scripts' --out, merge_results.py's --results)")

    def merged(self, records: Iterable[dict]) -> List[dict]:
        """The file's records with ``records`` in place of those of the same cases (where
        the first of them stood), and the new cases after them, in ``records``' order."""
        by_case: Dict[tuple, List[dict]] = {}
        for r in records:
            by_case.setdefault(case_key(r), []).append(r)
        out, placed = [], set()
        for r in self.earlier:
            key = case_key(r)
            if key not in by_case:
                out.append(r)
            elif key not in placed:
                out += by_case[key]
                placed.add(key)
        return out + [r for key, rs in by_case.items() if key not in placed for r in rs]

    def write(self, records: Iterable[dict]) -> None:
        """Write :meth:`merged` (a run calls it after each case: one cut short keeps them)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.merged(records), indent=1) + "\n")


def update_table(table: dict, batch: int, nheads: int, key_of: Callable[[str], str], best: Dict[str, Dict],
                 route: str) -> None:
    """Record one case's winners (``best[kernel]["config"]``, ``["us"]``) and its route at
    this batch size and head count, replacing an older entry of the same work at the same
    batch size (``head_rows`` = batch x heads, what the dispatcher matches first, then the
    batch: two models of one key can run the same work at two batch sizes);
    ``key_of(kernel)`` is the table key."""
    head_rows = batch * nheads

    def put(kernel, entry):
        rows = [e for e in table.get(key_of(kernel), []) if (e.get("head_rows"), e["batch"]) != (head_rows, batch)]
        table[key_of(kernel)] = sorted(rows + [{"batch": batch, "head_rows": head_rows, **entry}],
                                       key=lambda e: (e["head_rows"], e["batch"]))

    for kernel, b in best.items():
        put(kernel, {**b["config"].to_dict(), "us": round(b["us"], 2)})
    put("route", {"route": route})


def open_table(table_dir: str, family: str, arch: str) -> Tuple[dict, Path]:
    """The tuned table a benchmark run reads and writes, ``{family}_{arch}.json`` in
    ``table_dir`` (``arch``: the GPU's :func:`~trtllm_replayssm.ops.launch.table_tag`),
    and its path; the dispatcher (``launch``'s table look-ups, the ``auto`` rows) is
    pointed at ``table_dir`` too. Where ``table_dir`` holds no such table, it starts as a
    copy of the package's for ``arch`` (for a GPU without a table of its own, its
    architecture's; empty where the package has none): the launches a run does not tune
    then keep the package's configs, as ``--tune`` says, where an empty table would leave
    them on the untuned defaults."""
    table_path = Path(table_dir) / launch.table_file_name(arch, family)
    if not table_path.exists():
        package_table = next((p for p in (launch.package_table_file(t, family) for t in launch.tags_read(arch))
                              if p.is_file()), None)
        if package_table is not None:
            table_path.parent.mkdir(parents=True, exist_ok=True)
            table_path.write_text(package_table.read_text())
            print(f"{table_path}: started as a copy of the package's {package_table.name}", flush=True)
    table = json.loads(table_path.read_text()) if table_path.exists() else {}
    os.environ[launch.TUNED_DIR_ENV] = str(table_dir)
    launch._load_table.cache_clear()
    return table, table_path


def save_tuned_case(table: dict, table_path: Path, rig, best: Dict[str, Dict], route: str) -> None:
    """:func:`update_table` with a rig's case (its keys from ``rig.table_shape()``), then
    write the table to ``table_path`` and drop the dispatcher's cached copy, so that
    ``route="auto"`` reads what was just written."""
    case, shape = rig.case, rig.table_shape()
    update_table(table, case.batch, shape["nheads"],
                 lambda k: launch.table_key(k, case.state_dtype, case.act_dtype, shape["headdim"], shape["dstate"]),
                 best, route)
    table_path.parent.mkdir(parents=True, exist_ok=True)
    table_path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    launch._load_table.cache_clear()


class TriedLog:
    """The tuner's every candidate with its time (:func:`~.rig.best_config`'s ``tried``: the
    worst phase's cycle, us a layer-step), one record a tuned kernel and case, rewritten to
    ``out`` after each case; with no ``out`` nothing is kept. What a table change's winner
    beat, and by how much, measured in one process."""

    def __init__(self, out: Optional[str], gpu: str, commit: str):
        self.out, self.gpu, self.commit, self.records = (Path(out) if out else None), gpu, commit, []

    def add(self, tuned: Dict[str, Dict], **case) -> None:
        if self.out is None:
            return
        for kernel, best in tuned.items():
            self.records.append(dict(gpu=self.gpu, **case, kernel=kernel, best=best["config"].to_dict(),
                                     best_us=round(best["us"], 3),
                                     tried=[{k: (round(v, 3) if k == "us" else v) for k, v in t.items()}
                                            for t in best["tried"]],
                                     commit=self.commit))
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.records, indent=1) + "\n")


class ProbeLog:
    """A probe's records: each one stamped with the GPU and the commit, printed, and the
    whole list rewritten to ``out`` (so a run cut short keeps what it measured)."""

    QUIET = ("gpu", "commit")

    def __init__(self, out: str):
        import torch

        self.out, self.records = Path(out), []
        self.gpu, self.commit = torch.cuda.get_device_name(), git_commit()

    def add(self, **fields) -> None:
        self.records.append(dict(gpu=self.gpu, **fields, commit=self.commit))
        print({k: v for k, v in self.records[-1].items() if k not in self.QUIET}, flush=True)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.records, indent=1) + "\n")

    def print_table(self) -> None:
        from tabulate import tabulate

        print(tabulate([{k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in r.items()
                         if k not in self.QUIET} for r in self.records], headers="keys"))

"""Helpers the benchmark scripts share: the commit measured and the tuned-table update."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable, Dict

REPO = Path(__file__).resolve().parents[2]


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


def update_table(table: dict, batch: int, nheads: int, key_of: Callable[[str], str], best: Dict[str, Dict],
                 route: str) -> None:
    """Record one case's winners (``best[kernel]["config"]``, ``["us"]``) and its route at
    this batch size and head count, replacing an older entry of the same work
    (``head_rows`` = batch x heads, what the dispatcher matches); ``key_of(kernel)`` is the
    table key."""
    head_rows = batch * nheads

    def put(kernel, entry):
        rows = [e for e in table.get(key_of(kernel), []) if e.get("head_rows") != head_rows]
        table[key_of(kernel)] = sorted(rows + [{"batch": batch, "head_rows": head_rows, **entry}],
                                       key=lambda e: e["head_rows"])

    for kernel, b in best.items():
        put(kernel, {**b["config"].to_dict(), "us": round(b["us"], 2)})
    put("route", {"route": route})

#!/usr/bin/env python3
"""Plot ReplaySSM's model-level speedup against batch size, one line per model and mode,
from ``benchmarks/results/e2e.json`` (written by the two ``e2e_*`` scripts).

    python benchmarks/plot_e2e.py            # -> benchmarks/results/e2e_speedup.png
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=str(REPO / "benchmarks/results/e2e.json"))
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/e2e_speedup.png"))
    args = ap.parse_args()
    lines = defaultdict(list)
    for r in json.loads(Path(args.results).read_text()):
        if r["route"] in ("standard", "standard_spec"):
            continue
        mode = "autoregressive" if r["T"] == 0 else f"spec T={r['T']}, accept {r['acceptance']}"
        if r.get("phases") == "staggered":  # cursors spread over the L phases (e2e_decode_speedup.py --staggered)
            mode += ", staggered"
        lines[(r["model"], mode, r["state_dtype"], r["L"])].append((r["batch"], r["speedup"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (model, mode, sd, L), pts in sorted(lines.items()):
        pts.sort()
        ax.plot([b for b, _ in pts], [s for _, s in pts], marker="o",
                linestyle="-" if mode.startswith("autoregressive") else "--",
                label=f"{model}, {mode} ({sd} state, L/Bh {L})")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("decode throughput, ReplaySSM / standard")
    ax.set_title("Model-level decode speedup (bf16 weights)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

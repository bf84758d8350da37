#!/usr/bin/env python3
"""Render benchmarks/results/mamba2_ar.json as the README's Markdown tables."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("results", nargs="?", default=str(REPO / "benchmarks/results/mamba2_ar.json"))
    recs = json.loads(Path(ap.parse_args().results).read_text())
    by_case = defaultdict(dict)
    for r in recs:
        by_case[(r["model"], r["state_dtype"], r["L"], r["batch"])][r["route"]] = r

    rows = []
    for (model, sd, L, batch), rs in by_case.items():
        if L != 16:
            continue
        oo, auto = rs["output_only"], rs["auto"]
        rows.append([model, sd, batch, f"{rs['standard']['us_per_step']:.1f}", f"{oo['us_per_step']:.1f}",
                     f"{oo['speedup']:.2f}x", f"{rs['state_and_output']['speedup']:.2f}x",
                     f"{auto['speedup']:.2f}x ({auto['chosen_route']})",
                     f"{oo['nonflush_read_share_of_copy'] * 100:.0f}%"])
    print(tabulate(rows, headers=["model", "state", "batch", "standard us", "output_only us", "output_only",
                                  "state_and_output", "auto (route)", "non-flush read / copy BW"],
                   tablefmt="github"))
    print()
    sweep = [[model, L, f"{rs['standard']['us_per_step']:.1f}", f"{rs['output_only']['us_per_step']:.1f}",
              f"{rs['output_only']['speedup']:.2f}x"]
             for (model, sd, L, batch), rs in by_case.items() if batch == 128 and sd == "fp32"]
    print(tabulate(sorted(sweep), headers=["model (fp32, batch 128)", "L", "standard us", "output_only us", "speedup"],
                   tablefmt="github"))
    r0 = recs[0]
    print(f"\n{r0['gpu']}, copy bandwidth {r0['copy_gbps']:.0f} GB/s, commit {r0['commit']}, "
          "bf16 activations, per layer-step over whole cycles.")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Render the committed benchmark results as the README's Markdown tables.

    python benchmarks/report_results.py mamba2_ar     # benchmarks/results/mamba2_ar.json
    python benchmarks/report_results.py gdn_ar        # benchmarks/results/gdn_ar.json
    python benchmarks/report_results.py spec          # benchmarks/results/spec.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from trtllm_replayssm.benchmarking.rig import BASELINES

REPO = Path(__file__).resolve().parents[1]


def by_case(recs, *fields):
    cases = defaultdict(dict)
    for r in recs:
        cases[tuple(r[f] for f in fields)][r["route"]] = r
    return cases


def footer(recs) -> str:
    r0 = recs[0]
    # A results file can hold cases re-measured at a later commit: name each commit's cases.
    cases = defaultdict(set)
    for r in recs:
        cases[r["commit"]].add(f"{r['model']} {r['state_dtype']} batch {r['batch']} L {r['L']}")
    if len(cases) == 1:
        commits = f"commit {r0['commit']}"
    else:
        commits = "commits " + "; ".join(f"{c} ({len(v)} case{'s' * (len(v) > 1)})" for c, v in cases.items())
    return (f"\n{r0['gpu']}, copy bandwidth {r0['copy_gbps']:.0f} GB/s, {commits}, "
            f"bf16 activations, {rings(recs)}, per layer-step.")


def rings(recs) -> str:
    """The rings' dtypes: GDN's records name their d/k ring's (``ring_dtype``), by state
    dtype; Mamba2's rings hold the activations (x, B) and fp32 dt."""
    by_state = defaultdict(set)
    for r in recs:
        if "ring_dtype" in r:
            by_state[r["state_dtype"]].add(r["ring_dtype"])
    if not by_state:
        return "rings of bf16 x and B, fp32 dt"
    return "d/k ring " + ", ".join(f"{' and '.join(sorted(v))} for {sd} states" for sd, v in sorted(by_state.items()))


def baseline(rec) -> str:
    """A record's baseline time and which launch it is (``benchmarking.rig.fastest_baseline``;
    records from before it was named are against the in-tree standard kernel)."""
    return f"{rec['baseline_us_per_step']:.1f} ({rec.get('baseline', 'standard')})"


STAGGERED_HEADERS = ["output_only staggered", "auto staggered"]


def staggered(rec) -> str:
    """A record's speedup with staggered cursors (``CycleRig.start_cursors``); a route that
    writes the state every step (``rig.BASELINES``) has no phase, so its speedup is the
    same both ways; "n/a"
    for a ring route's record from a run that did not time staggered cycles."""
    if "staggered_speedup" in rec:
        return f"{rec['staggered_speedup']:.2f}x"
    return f"{rec['speedup']:.2f}x" if rec.get("chosen_route") in BASELINES else "n/a"


def has_staggered(recs) -> bool:
    """Whether the file's runs timed staggered cycles (files from before did not)."""
    return any("staggered_speedup" in r for r in recs)


def mamba2_ar(recs) -> None:
    cases = by_case(recs, "model", "state_dtype", "L", "batch")
    rows = []
    for (model, sd, L, batch), rs in cases.items():
        if L != 16:
            continue
        oo, auto = rs["output_only"], rs["auto"]
        rows.append([model, sd, batch, baseline(oo), f"{oo['us_per_step']:.1f}",
                     f"{oo['speedup']:.2f}x", f"{rs['state_and_output']['speedup']:.2f}x",
                     f"{auto['speedup']:.2f}x ({auto['chosen_route']})",
                     f"{oo['nonflush_read_share_of_copy'] * 100:.0f}%"]
                    + ([staggered(oo), staggered(auto)] if has_staggered(recs) else []))
    print(tabulate(rows, headers=["model", "state", "batch", "baseline us", "output_only us", "output_only",
                                  "state_and_output", "auto (route)", "non-flush read / copy BW"]
                   + (STAGGERED_HEADERS if has_staggered(recs) else []), tablefmt="github"))
    print()
    sweep = [[model, L, baseline(rs["output_only"]), f"{rs['output_only']['us_per_step']:.1f}",
              f"{rs['output_only']['speedup']:.2f}x"]
             for (model, sd, L, batch), rs in cases.items() if batch == 128 and sd == "fp32"]
    print(tabulate(sorted(sweep), headers=["model (fp32, batch 128)", "L", "baseline us", "output_only us", "speedup"],
                   tablefmt="github"))


def gdn_ar(recs) -> None:
    rows = []
    for (model, sd, batch), rs in by_case(recs, "model", "state_dtype", "batch").items():
        oo, auto = rs["output_only"], rs["auto"]
        std = rs["standard"]["us_per_step"]
        rows.append([model, sd, batch, baseline(oo), f"{oo['us_per_step']:.1f}",
                     f"{oo['speedup']:.2f}x", f"{auto['speedup']:.2f}x ({auto['chosen_route']})",
                     f"{oo['nonflush_us_per_step'] / std:.2f} / {oo['flush_us_per_step'] / std:.2f}"]
                    + ([staggered(oo), staggered(auto)] if has_staggered(recs) else []))
    print(tabulate(rows, headers=["model", "state", "batch", "baseline us", "output_only us",
                                  "output_only", "auto (route)", "non-flush / flush step vs standard step"]
                   + (STAGGERED_HEADERS if has_staggered(recs) else []), tablefmt="github"))


def spec(recs) -> None:
    rows = []
    for (model, T, acc, batch), rs in by_case(recs, "model", "T", "acceptance", "batch").items():
        rep, std = rs["replay_spec"], rs["standard_spec"]
        rows.append([model, T, acc, batch, f"{std['us_per_step']:.1f}", f"{rep['us_per_step']:.1f}",
                     f"{rep['speedup']:.2f}x", f"{rep['cost_vs_ar']:.2f}", f"{rep['achieved_gbps']:.0f}"]
                    + ([staggered(rep)] if has_staggered(recs) else []))
    print(tabulate(rows, headers=["model", "T", "accepted", "batch", "standard spec us", "replay spec us",
                                  "speedup", "replay cost / token vs AR standard", "replay state read GB/s"]
                   + (["speedup, staggered"] if has_staggered(recs) else []), tablefmt="github"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["mamba2_ar", "gdn_ar", "spec"])
    ap.add_argument("results", nargs="?", help="default: benchmarks/results/<kind>.json")
    args = ap.parse_args()
    recs = json.loads(Path(args.results or REPO / f"benchmarks/results/{args.kind}.json").read_text())
    {"mamba2_ar": mamba2_ar, "gdn_ar": gdn_ar, "spec": spec}[args.kind](recs)
    print(footer(recs))


if __name__ == "__main__":
    main()

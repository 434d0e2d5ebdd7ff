#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Plots for a sheaf-bench results folder (issue 8).

    python3 bench/plot.py bench/results/<date>

Reads results.csv and writes one PNG per workload and series:
grouped bars of each contender's headline figure (median or min, as the
CSV says) with the p25..p75 spread as error bars where there is one.
Uses matplotlib only (Debian python3-matplotlib).
"""
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["floor", "glibc", "jemalloc", "mimalloc", "tcmalloc", "dpdk-mempool",
         "sheaf-malloc", "sheaf", "sheaf-k7", "sheaf-c512",
         "sheaf-malloc-nochecks", "sheaf-nochecks", "sheaf-malloc-checks", "sheaf-checks",
         "sheaf-malloc-prev", "sheaf-prev"]
COLORS = {
    "floor": "#bbbbbb", "glibc": "#8c564b", "jemalloc": "#9467bd",
    "mimalloc": "#1f77b4", "tcmalloc": "#17becf", "dpdk-mempool": "#7f7f7f",
    "sheaf-malloc": "#ff7f0e", "sheaf": "#d62728", "sheaf-k7": "#e377c2",
    "sheaf-c512": "#bcbd22", "sheaf-malloc-nochecks": "#ffbb78",
    "sheaf-nochecks": "#ff9896", "sheaf-malloc-checks": "#ffd8a8",
    "sheaf-checks": "#f4b6b6", "sheaf-malloc-prev": "#c49c94",
    "sheaf-prev": "#8c2d2d",
}
# x-axis titles: what the variant names on the axis are.
XLABELS = {
    "fastpath": "pattern / object size (bytes)",
    "bulk": "objects per call / object size (bytes)",
    "xcpu": "pattern / object size (bytes)",
    "memory": "workload / object size (bytes)",
    "mix": "size mix",
    "rcu": "deferred frees pending at destroy, N other caches",
    "debugobjects": "threads x objects per burst",
}
TITLES = {
    "fastpath": "Fast path, one thread",
    "bulk": "Bulk alloc and free, one thread",
    "xcpu": "Cross-CPU producer/consumer",
    "memory": "Memory",
    "mix": "Malloc mix, random sizes, cross-thread frees",
    "shapes": "Malloc program shapes",
}


def num(s):
    try:
        v = float(s)
    except ValueError:
        return math.nan
    return v


def load(path):
    # The "prev-ratio:<contender>" rows are ratios between two contenders (the
    # report's "Against the previous revision"), not a contender's figure.
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f)
                if not r["contender"].startswith("prev-ratio:")]


def plot_group(out, workload, series, rows):
    variants = []
    for r in rows:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    contenders = [c for c in ORDER if any(r["contender"] == c for r in rows)]
    contenders += sorted({r["contender"] for r in rows} - set(contenders))
    if not variants or not contenders:
        return None
    width = 0.8 / len(contenders)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(variants) + 3), 4.5))
    for i, c in enumerate(contenders):
        xs, hs, lo, hi = [], [], [], []
        for j, v in enumerate(variants):
            r = next((r for r in rows if r["variant"] == v and r["contender"] == c), None)
            if r is None:
                continue
            h = num(r["headline"])
            # The spread drawn matches the headline: p25..p75 around a
            # median, min..p25 under a min or p10 (the upper tail of cross-CPU
            # windows is the host's, see the report).
            if r["headline_stat"] in ("p10", "min"):
                a, b = num(r["min"]), num(r["p25"])
            else:
                a, b = num(r["p25"]), num(r["p75"])
            xs.append(j - 0.4 + width * (i + 0.5))
            hs.append(h)
            spread = r["headline_stat"] != "value" and not math.isnan(a)
            lo.append(max(0.0, h - a) if spread else 0.0)
            hi.append(max(0.0, b - h) if spread else 0.0)
        ax.bar(xs, hs, width, label=c, color=COLORS.get(c), yerr=[lo, hi],
               capsize=2, error_kw={"elinewidth": 0.8})
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels(variants, rotation=20, ha="right")
    unit = rows[0]["unit"]
    stat = rows[0]["headline_stat"]
    bars = {"p10": ", bars min..p25", "min": ", bars min..p25",
            "median": ", bars p25..p75"}.get(stat, "")
    ax.set_ylabel(f"{unit} ({stat}){bars}")
    ax.set_xlabel(XLABELS.get(workload, "variant"))
    # A logarithmic axis once the bars span an order of magnitude: on a linear one
    # the short bars (the fastest contenders) are squashed to a few pixels.
    heights = [num(r["headline"]) for r in rows if num(r["headline"]) > 0]
    if heights and max(heights) / min(heights) >= 10:
        ax.set_yscale("log")
        ax.set_ylabel(f"{unit} ({stat}){bars}, log scale")
    title = TITLES.get(workload, workload)
    ax.set_title(f"{title}: {series} (lower is better)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    name = f"{workload}-{series}.png"
    for c in "/ ":
        name = name.replace(c, "_")
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return name


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    rows = load(os.path.join(out, "results.csv"))
    groups = {}
    for r in rows:
        groups.setdefault((r["workload"], r["topology"]), []).append(r)
    for (workload, series), rs in groups.items():
        name = plot_group(out, workload, series, rs)
        if name:
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

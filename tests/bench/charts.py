#!/usr/bin/env python3
"""Draws the charts of docs/performance.md from the tables in it.

The benchmarks print Markdown tables, and the measured tables are what
docs/performance.md records (with date and machine); this script reads
those tables back, so a chart always shows exactly the numbers written
beside it. Run it after pasting a new table:

    .venv/bin/pip install -r tests/bench/requirements.txt
    .venv/bin/python tests/bench/charts.py      # writes docs/images/*.png

Each chart names the section it comes from; a section or row that is
missing is an error, not an empty chart.
"""

import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "performance.md"
OUT = ROOT / "docs" / "images"
COLORS = {"Osprey": "#1f6fb4", "Triton C++ identity": "#76b900",
          "Triton python": "#a5d36b", "MLServer": "#d98b2b",
          "bare libmicrohttpd echo": "#999999", "onnxruntime": "#d98b2b"}


def section(text, title_start):
    """The text of the `## ` section whose title starts with title_start."""
    m = re.search(r"^## " + re.escape(title_start) + r".*?$(.*?)(?=^## |\Z)",
                  text, re.M | re.S)
    if not m:
        sys.exit(f"charts.py: no section '## {title_start}' in {PAGE}")
    return m.group(1)


def tables(text):
    """Every Markdown table of text, as lists of rows of cell strings
    (header first, the |---| line dropped)."""
    found, rows = [], []
    for line in text.split("\n") + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows:
            found.append(rows)
            rows = []
    return found


def number(cell):
    """The first number of a cell ('**2.35**', '7,858', '0.11 / 0.45')."""
    m = re.search(r"-?[\d,]*\.?\d+", cell.replace("*", ""))
    if not m:
        raise ValueError(f"no number in {cell!r}")
    return float(m.group(0).replace(",", ""))


def table_with(text, header_start):
    for t in tables(text):
        if t[0][0].startswith(header_start) or t[0][0] == header_start:
            return t
    sys.exit(f"charts.py: no table whose first column is '{header_start}'")


def bars(ax, groups, series, values, ylabel, title):
    """Grouped bars: values[s][g] for series s at group g."""
    width = 0.8 / len(series)
    for i, s in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        rects = ax.bar(xs, values[i], width, label=s, color=COLORS.get(s))
        ax.bar_label(rects, labels=[f"{v:,.0f}" if v >= 100 else f"{v:g}"
                                    for v in values[i]], fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)


def peer_chart(text):
    """Throughput against concurrency: Osprey, Triton and MLServer."""
    t = table_with(section(text, "Against real peers"), "case")
    names = ["Osprey", "Triton C++ identity", "Triton python", "MLServer"]
    cols = [t[0].index(n) for n in names]
    rows = [r for r in t[1:] if r[0].startswith("`identity_fp32` [1,16] JSON")]
    groups = [re.search(r"c=(\d+)", r[0]).group(0) for r in rows]
    values = [[number(r[c]) for r in rows] for c in cols]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bars(ax, groups, names, values, "inferences/s",
         "identity_fp32 [1,16], JSON over HTTP, 2 vCPUs (higher is better)")
    return fig


def latency_chart(text):
    """p50 and p99 latency of `simple` against the bare echo server."""
    t = table_with(section(text, "HTTP frontend vs a bare"), "concurrency")
    groups = [f"c={r[0]}" for r in t[1:]]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, which in zip(axes, ("p50", "p99")):
        k = 0 if which == "p50" else 1
        values = [[number(r[2].split("/")[k]) for r in t[1:]],
                  [number(r[4].split("/")[k]) for r in t[1:]]]
        bars(ax, groups, ["Osprey", "bare libmicrohttpd echo"], values, "ms",
             f"{which} latency, simple JSON (lower is better)")
    fig.tight_layout()
    return fig


def batching_chart(text):
    """Throughput with and without dynamic batching (the quiet-machine table)."""
    t = [x for x in tables(section(text, "Dynamic batching")) if x[0][0] == "model"][-1]
    groups = [r[0].replace("-shaped", "") for r in t[1:]]
    values = [[number(r[1]) for r in t[1:]], [number(r[2]) for r in t[1:]]]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    bars(ax, groups, ["without batching", "with dynamic batching"], values,
         "inferences/s", "Dynamic batching, 32 clients, one CPU instance")
    ax.set_yscale("log")
    return fig


def queue_chart(text):
    """Put throughput of the queue's stores against raw Redis XADD."""
    t = table_with(section(text, "Queue service"), "put throughput")
    labels = ["embedded store", "Redis via Osprey", "XADD (no fsync)",
              "XADD (fsync always)"]
    values = [number(r[1]) for r in t[1:]]
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    rects = ax.barh(labels[::-1], values[::-1], color="#1f6fb4")
    ax.bar_label(rects, labels=[f"{v:,.0f}" for v in values[::-1]], fontsize=8, padding=2)
    ax.set_xlabel("puts/s, 1 KiB items, c=16")
    ax.set_title("Queue put throughput (every embedded put durable)", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


CHARTS = {"peers.png": peer_chart, "http_latency.png": latency_chart,
          "batching.png": batching_chart, "queue_puts.png": queue_chart}


def main():
    text = PAGE.read_text()
    OUT.mkdir(exist_ok=True)
    for name, draw in CHARTS.items():
        fig = draw(text)
        fig.tight_layout()
        fig.savefig(OUT / name, dpi=110)
        plt.close(fig)
        print(f"wrote docs/images/{name}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plots route cost per scope against node count from the `SCALING nodes_*`
lines of `cargo run --release -p racaffinity --example scaling` (stdin or a
file) as an SVG: one line per scope, the min–max of the rounds as a band.

usage: tools/scaling_svg.py target/bench/scaling.out docs/performance-scaling.svg
"""

from __future__ import annotations

import math
import sys
from typing import Dict, List, Tuple

COLORS = {"pin": "#1f77b4", "transaction": "#ff7f0e", "session": "#2ca02c", "data_key": "#d62728",
          "request": "#9467bd"}
W, H, L, R, T, B = 640, 380, 60, 150, 30, 50


def parse(text: str) -> Dict[str, List[Tuple[int, float, float, float]]]:
    series: Dict[str, List[Tuple[int, float, float, float]]] = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) == 6 and p[0] == "SCALING" and p[1].startswith("nodes_"):
            series.setdefault(p[1][6:], []).append((int(p[2]), float(p[3]), float(p[4]), float(p[5])))
    return series


def render(series: Dict[str, List[Tuple[int, float, float, float]]]) -> str:
    xs = sorted({x for s in series.values() for x, *_ in s})
    ymax = max(m for s in series.values() for _, m, _, _ in s) * 1.25
    ymax = 10 ** math.ceil(math.log10(ymax)) / (2 if ymax < 10 ** math.ceil(math.log10(ymax)) / 2 else 1)

    def px(x: int) -> float:
        return L + (math.log2(x) - math.log2(xs[0])) / (math.log2(xs[-1]) - math.log2(xs[0])) * (W - L - R)

    def py(y: float) -> float:
        return H - B - min(y, ymax) / ymax * (H - T - B)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="14">Route cost per scope by node count (ns/op, median; band: min–max '
           'of rounds)</text>']
    for i in range(6):
        y = ymax * i / 5
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
    for x in xs:
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 18}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{(L + W - R) / 2:.0f}" y="{H - 12}" text-anchor="middle">nodes (log scale)</text>')
    for k, (name, pts) in enumerate(sorted(series.items())):
        pts.sort()
        color = COLORS.get(name, "#555")
        band = [f"{px(x):.1f},{py(hi):.1f}" for x, _, _, hi in pts]
        band += [f"{px(x):.1f},{py(lo):.1f}" for x, _, lo, _ in reversed(pts)]
        out.append(f'<polygon points="{" ".join(band)}" fill="{color}" opacity="0.12"/>')
        line = " ".join(f"{px(x):.1f},{py(m):.1f}" for x, m, _, _ in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, m, _, _ in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(m):.1f}" r="3" fill="{color}"/>')
        ly = T + 20 + 18 * k
        out.append(f'<line x1="{W - R + 12}" x2="{W - R + 32}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" '
                   'stroke-width="2"/>')
        out.append(f'<text x="{W - R + 38}" y="{ly}">{name.replace("_", " ")}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: List[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    text = sys.stdin.read() if argv[1] == "-" else open(argv[1], encoding="utf-8").read()
    series = parse(text)
    if not series:
        print(f"scaling_svg.py: no SCALING nodes_* lines in {argv[1]}", file=sys.stderr)
        return 1
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(render(series))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Charts, drawn in one place for both pictures a bench leaves: the step summary's Mermaid
``xychart-beta`` blocks (GitHub renders them) and ``chart.svg`` beside the report.

A series has a role, and the role decides how it looks in both pictures: a measured series
dark and solid, a limit pale and dashed and named as a limit, a baseline grey beside the
candidate, a marker (the knee) green. Every number is drawn as the caller gives it (the
report's own values); nothing here rounds or rescales one."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from sglforge import formats

MEASURED, LIMIT, BASELINE, MARKER, SECOND = "measured", "limit", "baseline", "marker", "second"

# role -> (colour, its name in a Markdown legend, SVG dash pattern). GitHub cannot colour
# Markdown text, so the legend under a Mermaid chart names the colour in words.
STYLE: dict[str, tuple[str, str, str]] = {
    MEASURED: ("#1f4e9c", "dark blue", ""),
    SECOND: ("#b4530a", "dark orange", ""),  # a second measured series on its own axis
    LIMIT: ("#e8a0a0", "pale red", "7 5"),
    BASELINE: ("#9a9a9a", "grey", ""),
    MARKER: ("#1b7f3b", "green", "6 3"),
}
LIMIT_TEXT = "#b06060"  # a limit's own label: muted, yet readable on white
MERMAID_WIDTH, MERMAID_HEIGHT = 900, 400
INK = "#222222"  # a Mermaid chart's text and axes
PARTS = ("Title", "Label", "Tick", "Line")
TITLE_MAX = 60  # characters: a Mermaid title is one line at 20 px and is cut, not wrapped


@dataclass(frozen=True)
class Series:
    """One series: its legend text, its values (one per x label), its role and its kind."""

    name: str
    values: tuple[float, ...]
    role: str = MEASURED
    kind: str = "line"  # or "bar"

    @property
    def colour(self) -> str:
        return STYLE[self.role][0]


@dataclass(frozen=True)
class XYChart:
    """A chart over categories: a short title, the x labels, the y axis up to ``y_top``,
    the series in drawing order (a limit first, so the data is drawn over it) and a note
    printed under it."""

    title: str
    x_title: str
    x_labels: tuple[str, ...]
    y_title: str
    y_top: float
    series: tuple[Series, ...]
    note: str = ""
    horizontal: bool = False  # bars across, the labels in a column on the left (long labels)


def ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high`` (steps of 1, 2 or 5 x 10^k)."""
    high = max(high, 1e-9)
    step = _step(high / count)
    n = math.ceil(high / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def fitted_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round ticks covering ``low``..``high``: from 0 when the values start near it, else
    fitted to them (a rate band of 11.25..13.5 reads 11..14, not 0..15)."""
    if high <= 0 or low <= 0.35 * high or math.isclose(low, high, rel_tol=1e-6):
        # from 0 also when every value is the same (one probe): a band of no width has no scale
        return ticks(high, count + 2)
    step = _step((high - low) / count)
    start = math.floor(low / step + 1e-9) * step
    if math.isclose(start, low):
        start = max(0.0, start - step)
    n = math.ceil((high - start) / step - 1e-9)
    return [round(start + i * step, 10) for i in range(n + 1)]


def _step(raw: float) -> float:
    raw = max(raw, 1e-12)
    mag = 10.0 ** math.floor(math.log10(raw))
    return float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))


def number(v: float) -> str:
    """``v`` as report.json writes it (the shortest text that reads back as the same float)."""
    return json.dumps(float(v))


def _quoted(text: str) -> str:
    """``text`` inside a Mermaid quoted string: one line, escaped as Markdown free text, no
    double quote (it would end the string)."""
    return formats.md_text(text).replace('"', "'")


def mermaid(chart: XYChart) -> list[str]:
    """``chart`` as a fenced Mermaid ``xychart-beta`` block and a legend line under it.

    The init directive sets the palette in series order (GitHub honours it) and, where the
    renderer applies ``themeCSS``, dashes a limit line and thickens a measured one. Each series
    is titled, which newer Mermaid shows as a legend; the Markdown legend says the same for a
    renderer that shows none."""
    palette = ", ".join(s.colour for s in chart.series)
    css = []
    for i, s in enumerate(chart.series):
        if s.kind == "line" and s.role == LIMIT:
            css.append(f".line-plot-{i} path {{ stroke-dasharray: {STYLE[LIMIT][2]}; }}")
        elif s.kind == "line":
            css.append(f".line-plot-{i} path {{ stroke-width: 3; }}")
        else:  # Mermaid draws a 0 as a stub above the axis: a side-by-side bar's gap
            css += [
                f".bar-plot-{i} rect:nth-of-type({j + 1}) {{ display: none; }}"
                for j, v in enumerate(s.values)
                if v == 0
            ]
    # On white with dark text whatever the reader's theme: on GitHub's dark one a dark series
    # would fade and a pale limit would stand out, the misreading this chart is drawn against.
    ink = {f"{axis}{part}Color": INK for axis in ("xAxis", "yAxis") for part in PARTS}
    theme = {"backgroundColor": "#ffffff", "titleColor": INK, "legendTextColor": INK, **ink}
    init: dict[str, object] = {
        "xyChart": {"width": MERMAID_WIDTH, "height": MERMAID_HEIGHT},
        "themeVariables": {"xyChart": {**theme, "plotColorPalette": palette}},
    }
    if css:
        init["themeCSS"] = " ".join(css)
    axis = "[" + ", ".join(f'"{_quoted(x)}"' for x in chart.x_labels) + "]"
    plots = [
        f'    {s.kind} "{_quoted(s.name)}" [' + ", ".join(number(v) for v in s.values) + "]"
        for s in chart.series
    ]
    return [
        "```mermaid",
        f"%%{{init: {json.dumps(init)}}}%%",
        "xychart-beta horizontal" if chart.horizontal else "xychart-beta",
        f'    title "{_quoted(chart.title[:TITLE_MAX])}"',
        f'    x-axis "{_quoted(chart.x_title)}" {axis}',
        f'    y-axis "{_quoted(chart.y_title)}" 0 --> {chart.y_top:g}',
        *plots,
        "```",
        "",
        legend_line(chart.series) + (f" {formats.md_text(chart.note)}" if chart.note else ""),
    ]


def legend_line(series: Sequence[Series]) -> str:
    """The legend in words: each series' colour, kind and name (a limit named as a limit)."""
    items = []
    for s in series:
        kind = {"line": "line", "bar": "bars"}[s.kind]
        dashed = " dashed" if s.role == LIMIT and s.kind == "line" else ""
        items.append(f"{STYLE[s.role][1]}{dashed} {kind}: {formats.md_text(s.name)}")
    return "Legend: " + "; ".join(items) + "."


# --- chart.svg ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Compared:
    """One compared figure: its short name and unit, both sides and the change in words."""

    name: str
    baseline: float
    candidate: float
    change: str


@dataclass(frozen=True)
class KneeChart:
    """The knee search as numbers: each probe's rate, output tok/s/node and TTFT p95 (the
    report's values), the TTFT limit, the knee (rate, tok/s) when found, and what the
    candidate was compared with."""

    title: str
    subtitle: str
    rates: tuple[float, ...]
    tok: tuple[float, ...]
    ttft: tuple[float, ...]
    limit: float
    knee: tuple[float, float] | None = None
    baseline: str = ""  # the baseline's name ("" when nothing was compared)
    compared: tuple[Compared, ...] = ()


SVG_WIDTH = 760
_PAD_L, _PAD_R, _PAD_T, _PLOT_H, _PAD_B = 72, 72, 78, 280, 58
_ROW = 46  # a compared figure's rows (its name, then two bars)


@dataclass(frozen=True)
class _Frame:
    """The plot's geometry: its area and each axis's ticks (the last tick is the top)."""

    x_ticks: list[float]
    tok_ticks: list[float]
    ttft_ticks: list[float]
    left: int = _PAD_L
    top: int = _PAD_T
    w: int = SVG_WIDTH - _PAD_L - _PAD_R
    h: int = _PLOT_H

    @property
    def base(self) -> int:
        return self.top + self.h

    @property
    def right(self) -> int:
        return self.left + self.w

    def x(self, v: float) -> float:
        lo, hi = self.x_ticks[0], self.x_ticks[-1]
        return self.left + (v - lo) / ((hi - lo) or 1.0) * self.w

    def y_tok(self, v: float) -> float:
        return self.base - v / self.tok_ticks[-1] * self.h

    def y_ttft(self, v: float) -> float:
        """Clipped at the axis's top."""
        top = self.ttft_ticks[-1]
        return self.base - min(v, top) / top * self.h


def svg(chart: KneeChart) -> str:
    """The knee search as an SVG: output tok/s/node (left axis) and TTFT p95 (right axis)
    against the offered rate, the TTFT limit dashed and labelled as a limit, the knee marked,
    a legend above the plot and, on a compared run, the baseline beside the candidate."""
    rates = chart.rates or (1.0,)
    f = _Frame(
        x_ticks=fitted_ticks(min(rates), max(rates)),
        tok_ticks=ticks(max((*chart.tok, 1.0))),
        ttft_ticks=ticks(max((*chart.ttft, chart.limit)) * 1.05),
    )
    height = f.base + _PAD_B + (30 + _ROW * len(chart.compared) if chart.compared else 0)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{height}" '
        f'viewBox="0 0 {SVG_WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(chart.title)} ({escape(chart.subtitle)})</title>",
        f'<rect width="{SVG_WIDTH}" height="{height}" fill="white"/>',
        _fitted_text(chart.title, 12, 22, 14, 'font-weight="bold"'),
        _fitted_text(chart.subtitle, 12, 40, 11, 'fill="#444"'),
    ]
    out += _svg_legend(chart, 12, 58)
    out += _svg_axes(f)
    out += _svg_limit_and_knee(f, chart)
    out += _svg_series(f, chart)
    if chart.compared:
        out += _svg_compared(chart, f.base + _PAD_B + 8)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _fitted_text(text: str, x: float, y: float, size: float, extra: str = "") -> str:
    """One line of text that fits the width: the font shrinks for a long line (about 0.6 em
    a character in a sans-serif font)."""
    room = SVG_WIDTH - 2 * x
    size = min(size, room / max(1, 0.6 * len(text)))
    return f'<text x="{x}" y="{y}" font-size="{size:.1f}" {extra}>{escape(text)}</text>'


def _svg_legend(chart: KneeChart, x: float, y: float) -> list[str]:
    """The legend in one row above the plot, so it never covers a point."""
    items = [
        (STYLE[MEASURED][0], "", "output tok/s/node"),
        (STYLE[SECOND][0], "", "TTFT p95"),
        (STYLE[LIMIT][0], STYLE[LIMIT][2], f"TTFT limit {chart.limit:g} s (a limit)"),
    ]
    if chart.knee is not None:
        items.append((STYLE[MARKER][0], STYLE[MARKER][2], "knee"))
    if chart.compared:
        items.append((STYLE[BASELINE][0], "", "baseline"))
    out = []
    for colour, dash, text in items:
        style = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line x1="{x}" y1="{y - 4}" x2="{x + 22}" y2="{y - 4}" stroke="{colour}" '
            f'stroke-width="3"{style}/>'
        )
        out.append(f'<text x="{x + 27}" y="{y}">{escape(text)}</text>')
        x += 40 + 6.2 * len(text)
    return out


def _svg_axes(f: _Frame) -> list[str]:
    """The three axes, their ticks with labels (grid lines for the left axis) and titles."""
    tok_c, ttft_c = "#222", STYLE[SECOND][0]
    out = [
        f'<line x1="{f.left}" y1="{f.base}" x2="{f.right}" y2="{f.base}" stroke="black"/>',
        f'<line x1="{f.left}" y1="{f.top}" x2="{f.left}" y2="{f.base}" stroke="black"/>',
        f'<line x1="{f.right}" y1="{f.top}" x2="{f.right}" y2="{f.base}" stroke="{ttft_c}"/>',
    ]
    for t in f.x_ticks:
        xx = f.x(t)
        out.append(f'<line x1="{xx:.1f}" y1="{f.base}" x2="{xx:.1f}" y2="{f.base + 5}" '
                   'stroke="black"/>')  # fmt: skip
        out.append(f'<text x="{xx:.1f}" y="{f.base + 17}" text-anchor="middle">{t:g}</text>')
    for t in f.tok_ticks:
        yy = f.y_tok(t)
        out.append(f'<line x1="{f.left}" y1="{yy:.1f}" x2="{f.right}" y2="{yy:.1f}" '
                   'stroke="#eee"/>')  # fmt: skip
        out.append(f'<text x="{f.left - 8}" y="{yy + 4:.1f}" text-anchor="end" '
                   f'fill="{tok_c}">{t:g}</text>')  # fmt: skip
    for t in f.ttft_ticks:
        yy = f.y_ttft(t)
        out.append(f'<text x="{f.right + 8}" y="{yy + 4:.1f}" fill="{ttft_c}">{t:g}</text>')
    mid = f.top + f.h / 2
    out += [
        f'<text x="{f.left + f.w / 2}" y="{f.base + 36}" text-anchor="middle">'
        "offered request rate (requests/s)</text>",
        f'<text transform="translate(16 {mid}) rotate(-90)" text-anchor="middle">'
        "output tok/s per node</text>",
        f'<text transform="translate({SVG_WIDTH - 14} {mid}) rotate(90)" '
        f'text-anchor="middle" fill="{ttft_c}">TTFT p95 (s)</text>',
    ]
    return out


def _svg_limit_and_knee(f: _Frame, chart: KneeChart) -> list[str]:
    """The TTFT limit pale and dashed, labelled as a limit on the line itself; the knee (when
    found) as a green dashed line, its label on the side with room."""
    y = f.y_ttft(chart.limit)
    colour, _, dash = STYLE[LIMIT]
    out = [
        f'<line x1="{f.left}" y1="{y:.1f}" x2="{f.right}" y2="{y:.1f}" stroke="{colour}" '
        f'stroke-width="2" stroke-dasharray="{dash}"/>',
        f'<text x="{f.right - 4}" y="{y - 4:.1f}" text-anchor="end" fill="{LIMIT_TEXT}">'
        f"limit: TTFT p95 {chart.limit:g} s</text>",
    ]
    if chart.knee is not None:
        rate, tok = chart.knee
        xk = f.x(rate)
        colour, _, dash = STYLE[MARKER]
        left_side = xk > f.left + f.w / 2
        anchor, dx = ("end", -4) if left_side else ("start", 4)
        out.append(
            f'<line x1="{xk:.1f}" y1="{f.top}" x2="{xk:.1f}" y2="{f.base}" stroke="{colour}" '
            f'stroke-width="2" stroke-dasharray="{dash}"/>'
        )
        out.append(
            f'<text x="{xk + dx:.1f}" y="{f.top + 12}" text-anchor="{anchor}" fill="{colour}">'
            f"knee {rate:g} RPS, {tok:.0f} tok/s</text>"
        )
    return out


def _svg_series(f: _Frame, chart: KneeChart) -> list[str]:
    """Both measured series: a line through the points and a dot with a tooltip at each."""
    out = []
    for name, role, values, yf in (
        ("output tok/s/node", MEASURED, chart.tok, f.y_tok),
        ("TTFT p95 (s)", SECOND, chart.ttft, f.y_ttft),
    ):
        colour = STYLE[role][0]
        pts = [(f.x(a), yf(b), a, b) for a, b in zip(chart.rates, values, strict=True)]
        if pts:
            line = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in pts)
            out.append(
                f'<polyline class="series-{role}" points="{line}" fill="none" '
                f'stroke="{colour}" stroke-width="2.5"/>'
            )
        for x, y, a, b in pts:
            out.append(
                f'<circle class="point-{role}" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
                f"<title>{a:g} RPS: {name} {number(b)}</title></circle>"
            )
    return out


def _svg_compared(chart: KneeChart, top: float) -> list[str]:
    """The baseline beside the candidate: for each compared figure, two bars on one scale
    (grey the baseline, dark blue this image), their values and the change."""
    width = SVG_WIDTH - _PAD_L - 230
    out = [_fitted_text(f"vs baseline {chart.baseline}", 12, top + 8, 12, 'font-weight="bold"')]
    for i, c in enumerate(chart.compared):
        y = top + 26 + i * _ROW
        scale = width / max(c.baseline, c.candidate, 1e-9)
        out.append(f'<text x="12" y="{y}">{escape(c.name)}: {escape(c.change)}</text>')
        for j, (role, who, v) in enumerate(
            ((BASELINE, "baseline", c.baseline), (MEASURED, "this image", c.candidate))
        ):
            yy = y + 5 + j * 15
            out.append(f'<text x="{_PAD_L + 60}" y="{yy + 10}" text-anchor="end">{who}</text>')
            out.append(
                f'<rect class="bar-{role}" x="{_PAD_L + 66}" y="{yy}" '
                f'width="{max(v * scale, 0.5):.1f}" height="12" fill="{STYLE[role][0]}">'
                f"<title>{who}: {number(v)}</title></rect>"
            )
            out.append(f'<text x="{_PAD_L + 72 + v * scale:.1f}" y="{yy + 10}">{v:.1f}</text>')
    return out

"""Charts rendered as a person sees them: Debian's headless Chromium loads a local page with
the Mermaid renderer from the npm registry (``mermaid``'s own bundle, pinned below and
cached under the test cache, so a CI run fetches it once) and the SVG files inline, then
reports what it drew: each plotted series' marks and colours, every text's box, the legend.

Two Chromium runs a page: ``--dump-dom`` returns the measurements the page writes into
itself, ``--screenshot`` the PNG CI keeps as an artifact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from sglforge.cache import cache_root

MERMAID = "mermaid@11.17.2"
# npm's own integrity for the pinned tarball: a changed file is refused, not rendered
MERMAID_INTEGRITY = (
    "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/"
    "qt5gHO73aCleBBg=="
)
CHROMIUM = "/usr/bin/chromium"
# the user cache as found before the fixtures give each test its own (conftest's USER_CACHE):
# a download made once per machine, or once per CI run
CACHE = cache_root()
WIDTH = 940


def chromium() -> str | None:
    return shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)


def mermaid_js() -> Path:
    """The pinned ``mermaid.min.js``, fetched with ``npm pack`` once per cache."""
    folder = CACHE / "npm" / MERMAID.replace("@", "-")
    target = folder / "mermaid.min.js"
    if target.is_file():
        return target
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        env = {**os.environ, "npm_config_cache": str(folder.parent / "npm-cache")}
        res = subprocess.run(
            ["npm", "pack", MERMAID, "--json", "--pack-destination", tmp],
            capture_output=True, text=True, timeout=300, env=env, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"npm pack {MERMAID} failed: {res.stderr[-2000:]}")
        (info,) = json.loads(res.stdout)
        if info["integrity"] != MERMAID_INTEGRITY:
            raise RuntimeError(f"npm pack {MERMAID}: integrity {info['integrity']} is not pinned")
        with tarfile.open(Path(tmp) / info["filename"]) as tar:
            member = tar.extractfile("package/dist/mermaid.min.js")
            assert member is not None
            (Path(tmp) / "mermaid.min.js").write_bytes(member.read())
        staged = Path(tmp) / "out"
        staged.mkdir()
        (Path(tmp) / "mermaid.min.js").rename(staged / "mermaid.min.js")
        try:
            staged.rename(folder)
        except OSError:  # another worker got there first: its copy is the same file
            pass
    return target


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>charts</title>
<style>body {{ margin: 0; background: white; font-family: sans-serif; }}
.chart {{ width: 900px; margin: 10px 20px; }} .legend {{ font-size: 13px; margin: 0 20px 14px; }}
#result {{ display: none; }}</style></head>
<body>{charts}<pre id="result"></pre>
<script src="mermaid.min.js"></script>
<script>{script}</script></body></html>
"""

_SCRIPT = """
const blocks = %s;
function box(el, svg) {
  const r = el.getBoundingClientRect(), s = svg.getBoundingClientRect();
  return {text: el.textContent, left: r.left - s.left, right: r.right - s.left,
          top: r.top - s.top, bottom: r.bottom - s.top, width: s.width, height: s.height};
}
function vertices(path) { return (path.getAttribute('d') || '').match(/[ML]/g)?.length || 0; }
function marks(g) {
  const rects = [...g.querySelectorAll(':scope > rect')]
    .filter(r => getComputedStyle(r).display !== 'none' && r.getBBox().height > 0);
  const paths = [...g.querySelectorAll(':scope > path')];
  const el = rects[0] || paths[0];
  const cs = el ? getComputedStyle(el) : null;
  return {rects: rects.length, vertices: paths.reduce((n, p) => n + vertices(p), 0),
          fill: cs && cs.fill, stroke: cs && cs.stroke, dash: cs && cs.strokeDasharray,
          strokeWidth: cs && cs.strokeWidth};
}
function measure(svg, kind) {
  const out = {kind, texts: [...svg.querySelectorAll('text')].map(t => box(t, svg)),
               title: [...svg.querySelectorAll('.chart-title text, text.chart-title')]
                        .map(t => box(t, svg)), plots: {}};
  for (const g of svg.querySelectorAll('g')) {
    const m = (g.getAttribute('class') || '').match(/\\b(line|bar)-plot-(\\d+)\\b/);
    if (m && !g.classList.contains('labels')) out.plots[m[2]] = {kind: m[1], ...marks(g)};
  }
  const own = kind === 'svg' ? '[class^="series-"], [class^="point-"], [class^="bar-"]' : 'none';
  for (const el of svg.querySelectorAll(own)) {
    const key = el.getAttribute('class');
    const poly = el.tagName === 'polyline';
    const pts = poly ? el.getAttribute('points').trim().split(/\\s+/).length : 1;
    const cs = getComputedStyle(el);
    const seen = out.plots[key] || {count: 0, points: 0, stroke: cs.stroke, fill: cs.fill};
    seen.count += 1; seen.points += pts; out.plots[key] = seen;
  }
  return out;
}
(async () => {
  const out = {charts: [], dark: []};
  // each chart as GitHub draws it for a light and for a dark colour mode
  for (const [theme, into, prefix] of [['default', out.charts, 'm'], ['dark', out.dark, 'd']]) {
    mermaid.initialize({startOnLoad: false, securityLevel: 'strict', theme});
    for (let i = 0; i < blocks.length; i++) {
      const host = document.getElementById(prefix + i);
      try {
        const {svg} = await mermaid.render(prefix + 'chart' + i, blocks[i]);
        host.innerHTML = svg;
        const m = measure(host.querySelector('svg'), 'mermaid');
        const bg = host.querySelector('svg .background, svg rect.background');
        m.background = bg ? getComputedStyle(bg).fill : null;
        into.push(m);
      } catch (e) { into.push({kind: 'mermaid', error: String(e)}); }
    }
  }
  for (const host of document.querySelectorAll('.svgfile')) {
    out.charts.push(measure(host.querySelector('svg'), 'svg'));
  }
  out.height = Math.ceil(document.documentElement.scrollHeight);
  document.getElementById('result').textContent = JSON.stringify(out);
  document.title = 'rendered';
})();
"""


@dataclass(frozen=True)
class Chart:
    """A mermaid block (its fenced text, without the fences) with the Markdown under it."""

    block: str
    legend: str = ""


def render(
    folder: Path, name: str, mermaid: list[Chart], svgs: list[str], png_dir: Path
) -> dict[str, Any]:
    """Render every chart on one page; return what the page measured, and write
    ``png_dir/<name>.png`` (the whole page as Chromium drew it)."""
    browser = chromium()
    assert browser is not None
    page = folder / name
    page.mkdir(parents=True)
    shutil.copy(mermaid_js(), page / "mermaid.min.js")
    charts = "".join(
        f'<div class="chart" id="m{i}"></div><div class="legend">{escape(c.legend)}</div>'
        for i, c in enumerate(mermaid)
    ) + "".join(f'<div class="chart svgfile">{s}</div>' for s in svgs)
    dark = "".join(f'<div class="chart" id="d{i}"></div>' for i in range(len(mermaid)))
    charts += f'<div style="background: #0d1117; padding: 10px 0">{dark}</div>'
    script = _SCRIPT % json.dumps([c.block for c in mermaid])
    (page / "index.html").write_text(_PAGE.format(charts=charts, script=script))
    url = (page / "index.html").as_uri()
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        "--allow-file-access-from-files", f"--user-data-dir={page / 'profile'}",
        "--virtual-time-budget=5000", "--run-all-compositor-stages-before-draw",
    ]  # fmt: skip
    dom = _run([browser, *flags, f"--window-size={WIDTH},900", "--dump-dom", url])
    start = dom.index('<pre id="result">') + len('<pre id="result">')
    found: dict[str, Any] = json.loads(_unescape(dom[start : dom.index("</pre>", start)]))
    png_dir.mkdir(parents=True, exist_ok=True)
    shot = png_dir / f"{name}.png"
    _run([browser, *flags, f"--window-size={WIDTH},{found['height']}", f"--screenshot={shot}", url])
    assert shot.is_file() and shot.stat().st_size > 0
    found["png"] = str(shot)
    return found


def _run(argv: list[str]) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {res.returncode}: {res.stderr[-2000:]}")
    return res.stdout


def _unescape(text: str) -> str:
    return (
        text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    )

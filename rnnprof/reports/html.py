"""A self-contained HTML page: inline styles, inline Vega-Lite specs and the Vega JavaScript inline.

Nothing on the page loads from the network: the Vega, Vega-Lite and vega-embed libraries come from
vl-convert's bundle (``javascript_bundle``, about 0.9 MB), kept in the user's cache folder after the
first build (a few seconds), keyed by vl-convert's version. Every text that comes from the input is
escaped; specs are JSON inside ``<script type="application/json">`` with ``<`` escaped, so no name
can close the script.

Each chart is a ``<div class="chart" data-chart="NAME">``; when all have drawn (as SVG), the page sets
``data-charts-drawn`` on ``<body>`` to their number, and a chart that fails to draw logs an error.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from rnnprof.files import atomic_write_bytes
from rnnprof.reports.layout import cut_head, distinct_names

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#222;
padding:0 16px;line-height:1.4}
h1{font-size:1.6em;margin-bottom:4px}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:1.05em;margin-bottom:6px}
table{border-collapse:collapse;margin:8px 0 12px;font-size:0.9em}
th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
td{overflow-wrap:anywhere}td.n,th{white-space:nowrap;overflow-wrap:normal}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.missing{color:#8a6d3b;background:#fcf8e3;padding:6px 10px;border-radius:4px}
.note{color:#8a6d3b}.sub{color:#666}.chart{margin:8px 0 16px}
code{font-size:0.9em}dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px}dt{color:#666}
.sev-error{color:#b00020;font-weight:600}.sev-warning{color:#a15c00;font-weight:600}.sev-info{color:#555}
"""

_EMBED = """
(function(){
  var charts = document.querySelectorAll('div.chart[data-spec]');
  var jobs = Array.prototype.map.call(charts, function(div){
    var spec = JSON.parse(document.getElementById(div.getAttribute('data-spec')).textContent);
    return vegaEmbed(div, spec, {renderer: 'svg', actions: false}).then(function(){
      div.setAttribute('data-drawn', '1');
    }).catch(function(err){ console.error('chart ' + div.getAttribute('data-chart') + ': ' + err); });
  });
  Promise.all(jobs).then(function(){
    document.body.setAttribute('data-charts-drawn', String(document.querySelectorAll('div.chart[data-drawn]').length));
  });
})();
"""


CLIP = 120


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def vega_bundle() -> str:
    """vega-embed, Vega-Lite and Vega as one script, cached under ``$XDG_CACHE_HOME/rnnprof``."""
    import vl_convert

    version = getattr(vl_convert, "__version__", "unknown")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rnnprof" / f"vega-{version}.js"
    try:
        return cache.read_text(encoding="utf-8")
    except OSError:
        pass
    bundle = vl_convert.javascript_bundle()
    try:
        atomic_write_bytes(cache, bundle.encode("utf-8"))
    except Exception:  # a read-only home only costs the next report the build again
        pass
    return bundle


class Page:
    """Sections of HTML, appended in order; ``chart`` embeds a Vega-Lite spec."""

    def __init__(self, title: str):
        self.title = title
        self.parts: list = []  # markup, and charts (drawn as the page is rendered)
        self.charts = 0
        self.left_out: list[tuple[str, str]] = []  # (what, why): sections the input cannot provide

    def add(self, markup: str) -> None:
        self.parts.append(markup)

    def heading(self, text: str, level: int = 2) -> None:
        self.add(f"<h{level}>{esc(text)}</h{level}>")

    def paragraph(self, text: str, cls: str = "") -> None:
        self.add(f"<p{f' class={cls!r}' if cls else ''}>{esc(text)}</p>")

    def missing(self, what: str, reason: str) -> None:
        self.add(f"<p class=\"missing\">{esc(what)} not available: {esc(reason)}</p>")

    def leave_out(self, what: str, reason: str) -> None:
        """A section the input cannot provide: named with why in one line at the end (``left_out_line``)."""
        self.left_out.append((what, reason))

    def left_out_line(self) -> None:
        if self.left_out:
            items = "; ".join(f"{esc(what)} ({esc(why)})" for what, why in self.left_out)
            self.add(f"<p class=\"left-out sub\" id=\"left-out\">Left out: {items}.</p>")

    def facts(self, pairs: list[tuple[str, object]]) -> None:
        rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs if v not in (None, ""))
        self.add(f"<dl>{rows}</dl>")

    def table(self, headers: list[str], rows: list[list], numeric: set[int] = frozenset(), caption: str = "",
              clip: set[int] = frozenset()) -> None:
        """``clip``: columns whose long texts (C++ kernel names) are cut at ``CLIP`` characters (names that differ
        still reading apart), whole on hover."""
        cut = {k: dict(zip(texts, distinct_names(texts, CLIP, cut_head)))
               for k in clip for texts in [list(dict.fromkeys(str(row[k]) for row in rows if k < len(row)))]}

        def cell(tag: str, k: int, value) -> str:
            attribute = ' class="n"' if k in numeric else ""
            text = str(value)
            if tag == "td" and k in clip and len(text) > CLIP:
                return f"<td title=\"{esc(text)}\">{esc(cut[k][text])}</td>"
            return f"<{tag}{attribute}>{esc(text)}</{tag}>"

        head = "".join(cell("th", k, h) for k, h in enumerate(headers))
        body = "".join("<tr>" + "".join(cell("td", k, v) for k, v in enumerate(row)) + "</tr>" for row in rows)
        cap = f"<caption class=\"sub\">{esc(caption)}</caption>" if caption else ""
        self.add(f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def chart(self, name: str, vega_lite: dict) -> None:
        self.charts += 1
        self.parts.append(_Chart(name, vega_lite, f"spec-{self.charts}"))

    def render(self) -> str:
        """The whole page: its charts drawn in the browser by the Vega libraries inlined once."""
        scripts = ""
        if self.charts:
            bundle = vega_bundle().replace("</script", "<\\/script")
            scripts = f"<script>{bundle}</script><script>{_EMBED}</script>"
        body = "\n".join(p.script() if isinstance(p, _Chart) else p for p in self.parts)
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                f"<title>{esc(self.title)}</title><style>{_STYLE}</style></head><body>"
                + body + scripts + "</body></html>\n")

    def fragment(self) -> str:
        """The page's sections as one ``<div>`` with its style, for a notebook's output: no script, each chart
        drawn here as SVG from the same Vega-Lite spec (vl-convert), so it shows wherever HTML does, offline."""
        body = "\n".join(p.svg() if isinstance(p, _Chart) else p for p in self.parts)
        return f"<div class=\"rnnprof\"><style>{_scoped_style()}</style>{body}</div>"


class _Chart:
    """A chart of a page: its Vega-Lite spec, drawn by the browser (``script``) or here (``svg``)."""

    def __init__(self, name: str, vega_lite: dict, spec_id: str):
        self.name, self.vega_lite, self.spec_id = name, vega_lite, spec_id

    def script(self) -> str:
        data = json.dumps(self.vega_lite, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
        return (f"<script type=\"application/json\" id=\"{self.spec_id}\">{data}</script>"
                f"<div class=\"chart\" data-chart=\"{esc(self.name)}\" data-spec=\"{self.spec_id}\"></div>")

    def svg(self) -> str:
        import vl_convert

        return f"<div class=\"chart\" data-chart=\"{esc(self.name)}\">{vl_convert.vegalite_to_svg(self.vega_lite)}</div>"


def _scoped_style() -> str:
    """The page's style for a fragment: each rule under ``.rnnprof``, ``body``'s on the fragment itself."""
    rules = [r.strip() for r in _STYLE.replace("\n", "").split("}") if r.strip()]
    scoped = []
    for rule in rules:
        selectors, _, body = rule.partition("{")
        names = [".rnnprof" if s.strip() == "body" else f".rnnprof {s.strip()}" for s in selectors.split(",")]
        scoped.append(f"{','.join(names)}{{{body}}}")
    return "".join(scoped)

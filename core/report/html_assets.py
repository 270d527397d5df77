"""The report page's inline style and its one small script (sorting tables by a header, showing and hiding a
plot's series from its legend, opening a drill-down a link points into). Neither holds any text of the run."""

CSS = """
:root { --fg: #1d2330; --muted: #5d6677; --line: #e3e6ee; --head: #f4f6fa; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0 auto; max-width: 1240px;
       padding: 1.5em 1.5em 4em; color: var(--fg); background: #fff; line-height: 1.4; }
h1 { font-size: 1.5em; margin: 0 0 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #d5dae3; padding-bottom: 0.2em; }
h4 { margin: 1.2em 0 0.4em; font-size: 0.95em; }
a { color: #1f5fb8; }
nav a { margin-right: 1em; }
p.meta, .meta { color: var(--muted); }
p.note { color: var(--muted); font-size: 0.85em; margin: 0.4em 0 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 0.92em; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #eef0f4; text-align: right; vertical-align: top; }
th { background: var(--head); position: sticky; top: 0; }
td.l, th.l { text-align: left; }
td.wrap { white-space: normal; max-width: 24em; overflow-wrap: anywhere; }
td.key { text-align: left; overflow-wrap: anywhere; width: 40%; min-width: 12em; }
table.attempts td { white-space: nowrap; }
table.attempts td.note { white-space: normal; min-width: 16em; max-width: 28em; overflow-wrap: anywhere; }
.up { color: #18794e; } .down { color: #b42318; } .none { color: #999; }
.pass { color: #18794e; } .fail { color: #b42318; } .pending { color: var(--muted); }
.scroll { overflow: auto; max-width: 100%; max-height: 70vh; border: 1px solid var(--line); border-radius: 4px; }
th[data-sort] button { all: unset; cursor: pointer; }
th[data-sort] button:focus-visible { outline: 2px solid #1f6fd1; }
th[data-sort] button::after { content: "\\00a0↕"; color: #b3b9c4; }
th[aria-sort=ascending] button::after { content: "\\00a0▲"; color: var(--fg); }
th[aria-sort=descending] button::after { content: "\\00a0▼"; color: var(--fg); }
tr.best td { background: #eef8f1; } tr.seed td { background: #f6f7fb; }
.badge { font-size: 0.75em; padding: 0 0.4em; border-radius: 3px; background: #dde3ee; color: var(--fg); }
.badge.best { background: #c9ecd6; }
tr:target td { background: #fff4c2; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(500px, 1fr)); gap: 1.2em; }
figure.plot { margin: 0; border: 1px solid var(--line); border-radius: 6px; padding: 0.7em 0.9em; min-width: 0; }
.stack { display: grid; gap: 1em; }
figure.plot figcaption { font-weight: 600; margin-bottom: 0.3em; }
svg.chart { display: block; width: 100%; height: auto; }
svg.chart text { font-family: system-ui, sans-serif; font-size: 11px; fill: #3b4252; }
svg.chart text.axis { font-size: 12px; fill: var(--muted); }
svg.chart text.faint { fill: #8a8f9c; font-size: 10px; }
svg.chart g.off { display: none; }
.empty { min-height: 9em; display: flex; align-items: center; justify-content: center; text-align: center;
         color: var(--muted); background: #fafbfc; border: 1px dashed #cfd5df; border-radius: 4px; padding: 1em; }
ul.legend { list-style: none; margin: 0.4em 0 0; padding: 0; display: flex; flex-wrap: wrap; gap: 0.15em 0.9em;
            font-size: 0.85em; max-height: 9em; overflow: auto; }
ul.legend li { display: flex; align-items: center; min-width: 0; }
ul.legend li > span, ul.legend button > span { overflow-wrap: anywhere; }
ul.legend button { all: unset; cursor: pointer; display: flex; align-items: center; gap: 0.35em; }
ul.legend li > svg { margin-right: 0.35em; }
ul.legend button[aria-pressed=false] { opacity: 0.4; text-decoration: line-through; }
ul.legend button:focus-visible { outline: 2px solid #1f6fd1; }
svg.swatch { flex: none; }
.params { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap: 0.6em; }
details.problem { border: 1px solid var(--line); border-radius: 6px; padding: 0.4em 0.8em; margin: 0.5em 0; }
details.problem > summary { cursor: pointer; }
details.problem > summary .key { font-weight: 600; overflow-wrap: anywhere; }
details.problem[open] > summary { margin-bottom: 0.4em; }
p.links { margin: 0.2em 0; font-size: 0.9em; }
pre { background: #f7f8fa; border: 1px solid var(--line); border-radius: 4px; padding: 0.6em; overflow: auto;
      max-height: 32em; font-size: 0.85em; line-height: 1.35; }
pre.diff span.add { color: #116329; background: #e6f6ea; display: inline-block; min-width: 100%; }
pre.diff span.del { color: #82071e; background: #fdebec; display: inline-block; min-width: 100%; }
pre.diff span.hunk { color: #6a4fb0; } pre.diff span.file { color: var(--muted); font-weight: 600; }
details.diff, details.source { margin: 0.3em 0; }
details.diff > summary, details.source > summary { cursor: pointer; }
"""

# Sorts a table's rows by the clicked header's column (numbers by the cells' data-v, high first on the first click;
# text A to Z), toggles a plot's series from its legend, and opens the <details> around the element a link names.
SCRIPT = """
(function () {
  "use strict";
  function cellValue(row, index, numeric) {
    var cell = row.cells[index];
    if (!cell) { return numeric ? -Infinity : ""; }
    var v = cell.getAttribute("data-v");
    if (v === null) { v = cell.textContent; }
    if (!numeric) { return v.toLowerCase(); }
    var n = parseFloat(v);
    return isNaN(n) ? -Infinity : n;
  }
  function sortBy(th) {
    var table = th.closest("table");
    var body = table.tBodies[0];
    var cells = Array.prototype.slice.call(th.parentNode.cells);
    var index = cells.indexOf(th);
    var numeric = th.getAttribute("data-sort") === "num";
    var current = th.getAttribute("aria-sort");
    var ascending = current ? current === "descending" : !numeric;
    cells.forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows).map(function (row, i) {
      return { row: row, key: cellValue(row, index, numeric), at: i };
    });
    rows.sort(function (a, b) {
      var c = a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
      return (ascending ? c : -c) || a.at - b.at;
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
  }
  function toggleSeries(button) {
    var figure = button.closest("figure");
    var series = button.getAttribute("data-series");
    var shown = button.getAttribute("aria-pressed") !== "false";
    button.setAttribute("aria-pressed", shown ? "false" : "true");
    Array.prototype.forEach.call(figure.querySelectorAll("g[data-series]"), function (g) {
      if (g.getAttribute("data-series") === series) { g.classList.toggle("off", shown); }
    });
  }
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
    if (target) { target.scrollIntoView(); }
  }
  document.addEventListener("click", function (event) {
    var th = event.target.closest("th[data-sort]");
    if (th) { sortBy(th); return; }
    var button = event.target.closest("button[data-series]");
    if (button) { toggleSeries(button); }
  });
  window.addEventListener("hashchange", openTarget);
  openTarget();
})();
"""

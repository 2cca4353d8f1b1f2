"""The leaderboard page of a study: one self-contained HTML file (no network: its script, style
and data inline) that holds the verdict of every setting against the reference.

    harness-leaderboard results/zoo            # -> results/zoo/leaderboard.html

Its table is `harness.analysis.against_reference` against the course's optimizers (what
experiments/zoo_reading.py reads the zoo by): per optimizer setting × net (× schedule where the
study has several), its final test quality over seeds with its 95 % interval, its gain over
the net's reference with Welch's interval, and the verdict. The table sorts by any column and
filters by net, library and verdict; each setting links to its convergence curves (training
loss and test error against iterations, mean over seeds, beside the reference's), drawn as SVG
by the page's script from the numbers it holds.
"""

from __future__ import annotations

import argparse
import html
import json
import math
from pathlib import Path

import pandas as pd

from harness import analysis, style
from harness.errors import ConfigError, exit_with_error
from harness.results import load_curves

PAGE = "leaderboard.html"
CURVE_METRICS = ("train_loss", "test_accuracy")
POINTS = 60  # at most this many points per curve: a page of a few hundred curves stays small


def library_of(target: object) -> str:
    """The library an optimizer class comes from, by its import path's first part."""
    name = str(target).split(".", 1)[0] if isinstance(target, str) else ""
    return {"pytorch_optimizer": "pytorch-optimizer", "harness": "harness"}.get(name, name or "?")


def _number(value: object, digits: int = 6) -> float | None:
    """A JSON number, rounded; None (null) for NaN."""
    try:
        value = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if not math.isfinite(value) else float(f"{value:.{digits}g}")


def verdict_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Every setting against its net's reference (`analysis.against_reference`, the course's
    optimizers), with its library and schedule."""
    versus = analysis.against_reference(runs, style.COURSE_OPTIMIZERS)
    if versus.empty:
        raise ConfigError("the study holds none of the course's optimizers to compare against")
    first = runs.drop_duplicates("config_id").set_index("config_id")
    target = first.get("optimizer._target_")
    return versus.assign(
        library=versus["config_id"].map(target).map(library_of) if target is not None else "?",
        schedule=versus["config_id"].map(first["schedule"]).astype(str),
    )


def curve_data(sweep: Path, runs: pd.DataFrame, config_ids: list[str]) -> dict[str, dict]:
    """{config_id: {metric: [[iteration, mean over seeds], ...]}} for the page's figures."""
    chosen = runs[runs["config_id"].isin(config_ids)]
    curves = load_curves(sweep, chosen, metrics=list(CURVE_METRICS))
    means = (
        curves.groupby(["config_id", "metric", "iteration"], observed=True)["value"]
        .mean()
        .reset_index()
    )
    found: dict[str, dict] = {}
    for (config_id, metric), rows in means.groupby(["config_id", "metric"], observed=True):
        step = max(1, math.ceil(len(rows) / POINTS))
        kept = pd.concat([rows.iloc[::step], rows.iloc[[-1]]]).drop_duplicates("iteration")
        found.setdefault(str(config_id), {})[str(metric)] = [
            [int(i), _number(v, 4)] for i, v in zip(kept["iteration"], kept["value"], strict=True)
        ]
    return found


def page_data(sweep: Path) -> dict:
    """Everything the page shows, as JSON-able data."""
    from harness.report import load_sweep_runs

    runs = load_sweep_runs(sweep)
    if analysis.quality(runs) != "accuracy":
        raise ConfigError(
            f"the leaderboard reads classification accuracy; {sweep} reports "
            f"{analysis.quality(runs)}"
        )
    table = verdict_table(runs)
    test = analysis.final_quality(runs)
    references = table[table["verdict"] == "reference"].set_index("net")["config_id"].to_dict()
    rows = [
        {
            "id": row.config_id,
            "net": str(row.net),
            "setting": str(row.setting),
            "optimizer": str(row.optimizer),
            "library": str(row.library),
            "schedule": str(row.schedule),
            "lr": _number(row.lr, 4),
            "seeds": int(row.n_seeds),
            "diverged": int(row.n_diverged),
            "mean": _number(getattr(row, f"{test}_mean")),
            "ci": _number(getattr(row, f"{test}_ci")),
            "gain": _number(row.gain),
            "low": _number(row.gain_low),
            "high": _number(row.gain_high),
            "verdict": str(row.verdict),
            "reference": references.get(row.net),
        }
        for row in table.itertuples()
    ]
    return {
        "study": sweep.resolve().name,
        "runs": len(runs),
        "schedules": sorted(table["schedule"].unique()),
        "selection": analysis.selection_text(runs),
        "rows": rows,
        "curves": curve_data(sweep, runs, list(table["config_id"])),
    }


def render(data: dict) -> str:
    """The page: TEMPLATE with the data inline (`</` escaped so no string ends the script)."""
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    title = f"Leaderboard: {data['study']}"
    return (
        TEMPLATE.replace("__TITLE__", html.escape(title))
        .replace("__DATA__", blob)
        .replace("__SCRIPT__", SCRIPT)
    )


def write_leaderboard(sweep: Path, out: Path | None = None) -> Path:
    """Write the study's page (default: <sweep>/leaderboard.html); its path."""
    out = out or sweep / PAGE
    out.write_text(render(page_data(sweep)), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="harness-leaderboard",
        description="A study's leaderboard: one self-contained HTML page (sortable, filterable "
        "verdicts against the course's optimizers, with each setting's curves).",
    )
    parser.add_argument("sweep", type=Path, help="a study folder, e.g. results/zoo")
    parser.add_argument("--out", type=Path, help=f"the page (default: <sweep>/{PAGE})")
    args = parser.parse_args(argv)
    if not args.sweep.is_dir():
        exit_with_error(parser.prog, f"{args.sweep} is not a folder")
    try:
        path = write_leaderboard(args.sweep, args.out)
    except (ConfigError, ValueError) as exc:
        exit_with_error(parser.prog, str(exc))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.4em;margin:0 0 .2em}
#controls{margin:.6em 0;display:flex;gap:1em;flex-wrap:wrap;align-items:center}
table{border-collapse:collapse;width:100%}
th,td{padding:2px 8px;border-bottom:1px solid #e4e4e4;text-align:right;white-space:nowrap}
th{position:sticky;top:0;background:#f4f4f4;cursor:pointer;user-select:none}
th.sorted-asc::after{content:" \\25B2"}th.sorted-desc::after{content:" \\25BC"}
td.text,th.text{text-align:left}
tr.v-better td.verdict{color:#08660a;font-weight:600}
tr.v-worse td.verdict{color:#a01010}
tr.v-reference{background:#eef4ff}tr.v-diverged td{color:#999}
#curves{position:fixed;right:1em;top:1em;width:560px;background:#fff;border:1px solid #bbb;
box-shadow:0 2px 12px #0003;padding:.6em;display:none}
#curves.open{display:block}#curves h2{font-size:1.05em;margin:0 0 .3em}
#curves svg{background:#fafafa;margin-right:6px}
.legend span{margin-right:1em}
</style></head><body>
<h1>__TITLE__</h1>
<p id="about"></p>
<div id="controls">
<label>net <select id="f-net"><option value="">all</option></select></label>
<label>library <select id="f-library"><option value="">all</option></select></label>
<label>verdict <select id="f-verdict"><option value="">all</option></select></label>
<span id="count"></span>
</div>
<table id="board"><thead><tr></tr></thead><tbody></tbody></table>
<div id="curves"><h2 id="curves-title"></h2><div id="curves-body"></div>
<p class="legend"><span style="color:#1f5fbf">&#9473; this setting</span>
<span style="color:#888">&#9476; the net's reference</span> (mean over seeds)</p>
<a href="#" id="curves-close">close</a></div>
<script id="data" type="application/json">__DATA__</script>
<script>__SCRIPT__</script>
</body></html>
"""

SCRIPT = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const pct = v => v === null ? "" : (100 * v).toFixed(2);
const pts = v => v === null ? "" : (v >= 0 ? "+" : "") + (100 * v).toFixed(2);
const COLUMNS = [
  ["net", "net", true, r => r.net],
  ["setting", "setting", true, r => r.setting],
  ["library", "library", true, r => r.library],
  ...(DATA.schedules.length > 1 ? [["schedule", "schedule", true, r => r.schedule]] : []),
  ["lr", "lr", false, r => r.lr === null ? "" : r.lr.toPrecision(3)],
  ["seeds", "seeds", false, r => r.seeds],
  ["mean", "test acc. %", false, r => pct(r.mean)],
  ["ci", "\u00b1 95 %", false, r => pct(r.ci)],
  ["gain", "gain (points)", false, r => pts(r.gain)],
  ["low", "gain low", false, r => pts(r.low)],
  ["high", "gain high", false, r => pts(r.high)],
  ["verdict", "verdict", true, r => r.verdict],
];
const state = {key: null, asc: true};
const byId = new Map(DATA.rows.map(r => [r.id + "|" + r.net, r]));

function options(id, key) {
  const select = document.getElementById(id);
  for (const v of [...new Set(DATA.rows.map(r => r[key]))].sort()) {
    const o = document.createElement("option");
    o.value = o.textContent = v;
    select.appendChild(o);
  }
  select.addEventListener("change", draw);
}

function header() {
  const tr = document.querySelector("#board thead tr");
  for (const [key, label, text] of COLUMNS) {
    const th = document.createElement("th");
    th.textContent = label;
    th.dataset.key = key;
    if (text) th.className = "text";
    th.addEventListener("click", () => {
      state.asc = state.key === key ? !state.asc : true;
      state.key = key;
      draw();
    });
    tr.appendChild(th);
  }
}

function compare(a, b) {
  const x = a[state.key], y = b[state.key];
  if (x === y) return 0;
  if (x === null) return 1;  // no value: last, whichever way
  if (y === null) return -1;
  const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
  return state.asc ? order : -order;
}

function draw() {
  const want = {net: "f-net", library: "f-library", verdict: "f-verdict"};
  let rows = DATA.rows.filter(r =>
    Object.entries(want).every(([k, id]) => {
      const v = document.getElementById(id).value;
      return !v || r[k] === v;
    }));
  if (state.key) rows = [...rows].sort(compare);
  const body = document.querySelector("#board tbody");
  body.replaceChildren(...rows.map(r => {
    const tr = document.createElement("tr");
    tr.className = "v-" + r.verdict.replace(/ /g, "-");
    for (const [key, , text, show] of COLUMNS) {
      const td = document.createElement("td");
      td.className = (text ? "text " : "") + key;
      if (key === "setting") {
        const a = document.createElement("a");
        a.href = "#curves:" + encodeURIComponent(r.id + "|" + r.net);
        a.textContent = show(r);
        td.appendChild(a);
      } else {
        td.textContent = show(r);
      }
      tr.appendChild(td);
    }
    return tr;
  }));
  document.querySelectorAll("#board th").forEach(th => {
    th.classList.toggle("sorted-asc", th.dataset.key === state.key && state.asc);
    th.classList.toggle("sorted-desc", th.dataset.key === state.key && !state.asc);
  });
  document.getElementById("count").textContent = rows.length + " of " + DATA.rows.length;
}

const SVG = "http://www.w3.org/2000/svg";
function panel(title, series, transform, logY) {
  const W = 270, H = 180, L = 44, B = 24, T = 18;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const all = series.flatMap(s => s.points.map(([x, y]) => [x, transform(y)]))
    .filter(([, y]) => y !== null && isFinite(y) && (!logY || y > 0));
  if (!all.length) return svg;
  const ys = all.map(p => logY ? Math.log10(p[1]) : p[1]);
  const xmax = Math.max(...all.map(p => p[0])) || 1;
  let lo = Math.min(...ys), hi = Math.max(...ys);
  if (hi === lo) { lo -= 1; hi += 1; }
  const px = x => L + (W - L - 6) * x / xmax;
  const py = y => T + (H - T - B) * (1 - ((logY ? Math.log10(y) : y) - lo) / (hi - lo));
  const text = (x, y, s, anchor) => {
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("font-size", "10");
    t.setAttribute("text-anchor", anchor || "start"); t.textContent = s;
    svg.appendChild(t);
  };
  text(L, 12, title);
  text(L, H - 4, "0"); text(W - 6, H - 4, xmax + " it.", "end");
  const fmt = v => logY ? Number(Math.pow(10, v).toPrecision(2)).toString() : v.toPrecision(3);
  text(L - 3, T + 8, fmt(hi), "end"); text(L - 3, H - B, fmt(lo), "end");
  for (const s of series) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", s.points
      .map(([x, y]) => [x, transform(y)])
      .filter(([, y]) => y !== null && isFinite(y) && (!logY || y > 0))
      .map(([x, y]) => px(x).toFixed(1) + "," + py(y).toFixed(1)).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", s.color);
    line.setAttribute("stroke-width", s.width);
    if (s.dash) line.setAttribute("stroke-dasharray", "4 3");
    svg.appendChild(line);
  }
  return svg;
}

function showCurves() {
  const box = document.getElementById("curves");
  const hash = decodeURIComponent(location.hash.slice(1));
  if (!hash.startsWith("curves:")) { box.classList.remove("open"); return; }
  const row = byId.get(hash.slice(7));
  if (!row) { box.classList.remove("open"); return; }
  const mine = DATA.curves[row.id] || {}, ref = DATA.curves[row.reference] || {};
  document.getElementById("curves-title").textContent =
    row.setting + " on " + row.net + ": " + row.verdict;
  const series = metric => [
    ...(row.reference !== row.id && ref[metric] ?
      [{points: ref[metric], color: "#888", width: 1.2, dash: true}] : []),
    {points: mine[metric] || [], color: "#1f5fbf", width: 1.8},
  ];
  document.getElementById("curves-body").replaceChildren(
    panel("training loss (log)", series("train_loss"), y => y, true),
    panel("test error (log)", series("test_accuracy"), y => y === null ? null : 1 - y, true));
  box.classList.add("open");
}

document.getElementById("about").textContent =
  DATA.rows.length + " settings (" + new Set(DATA.rows.map(r => r.optimizer)).size +
  " optimizers) of " + DATA.runs + " runs, schedule " + DATA.schedules.join(", ") + "; " +
  DATA.selection + ". Verdict: the gain over the net's reference (the best course optimizer " +
  "by validation) in test accuracy, 95 % Welch interval over seeds.";
options("f-net", "net"); options("f-library", "library"); options("f-verdict", "verdict");
header(); draw();
window.addEventListener("hashchange", showCurves);
document.getElementById("curves-close").addEventListener("click", e => {
  e.preventDefault(); history.replaceState(null, "", " "); showCurves();
});
showCurves();
"""

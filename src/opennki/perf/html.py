"""Front-door services: the self-contained HTML profile report. Imports the cost layer's result types and
the text report's hints.

One file, no network access: the data (summary, hot spots, hints, the checks' findings (kind, rule,
message, lines, regions, iterations or programs, why it matters, the fix; `CostResult.findings`, set by
`estimate(checks=True)`), and the timeline, thinned to
`MAX_SLICES` of the longest slices for big kernels) is embedded as JSON and drawn by inline JavaScript on
a canvas (wheel to zoom, drag to pan, hover for details). When it has drawn, the script sets
`data-rendered="ok"` on <body>, which the Chromium test checks along with the console.
"""

from __future__ import annotations

import html
import json

from opennki.cost.result import Row, format_time, location_key
from opennki.perf.report import hints, hot_spots

MAX_SLICES = 20000

_STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 4px} h2{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse} td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child{text-align:left} .muted{color:#777}
#timeline{border:1px solid #bbb;width:100%;height:320px;cursor:grab;display:block}
#tip{position:fixed;pointer-events:none;background:#fffbe6;border:1px solid #c9b458;padding:4px 6px;
  font-size:12px;display:none;max-width:520px;white-space:pre-wrap}
li{margin:4px 0}
.finding{border-left:3px solid #e15759;padding:4px 8px;margin:6px 0;background:#fdf3f3}
.finding-head{font-weight:600} .finding-line{font-family:monospace;white-space:pre-wrap}
"""

_SCRIPT = r"""
(function () {
  const data = JSON.parse(document.getElementById('profile-data').textContent);
  const fmt = ns => ns >= 1e6 ? (ns / 1e6).toFixed(3) + ' ms' : ns >= 1e3 ? (ns / 1e3).toFixed(2) + ' us'
                              : ns.toFixed(0) + ' ns';
  function table(el, head, rows) {
    const t = document.getElementById(el);
    const tr = document.createElement('tr');
    head.forEach(h => { const th = document.createElement('th'); th.textContent = h; tr.appendChild(th); });
    t.appendChild(tr);
    rows.forEach(r => {
      const row = document.createElement('tr');
      r.forEach(c => { const td = document.createElement('td'); td.textContent = c; row.appendChild(td); });
      t.appendChild(row);
    });
  }
  table('engines', ['row', 'busy', 'utilisation'],
        data.engines.map(e => [e.row, fmt(e.busy_ns), (100 * e.utilization).toFixed(1) + '%']));
  table('hotspots', ['kernel line', 'critical path', 'busy', 'instructions', 'opcodes'],
        data.hot_spots.map(h => [h.line, fmt(h.critical_ns), fmt(h.busy_ns), h.count, h.opcodes]));
  const hl = document.getElementById('hints');
  data.hints.forEach(h => {
    const li = document.createElement('li');
    li.textContent = h.kind + ': ' + h.message + (h.lines.length ? ' [' + h.lines.join(', ') + ']' : '');
    hl.appendChild(li);
  });
  if (!data.hints.length) { const li = document.createElement('li'); li.textContent = 'none'; hl.appendChild(li); }
  const fl = document.getElementById('findings');
  if (data.findings === null) {
    fl.textContent = 'The checks did not run with this estimate.';
  } else if (!data.findings.length) {
    fl.textContent = 'none: the race checker and the lint found nothing.';
  } else {
    const part = (name, text) => {
      const d = document.createElement('div'); d.className = 'finding-' + name; d.textContent = text; return d;
    };
    data.findings.forEach(f => {
      const box = document.createElement('div'); box.className = 'finding';
      const head = document.createElement('div'); head.className = 'finding-head';
      head.textContent = f.kind + ' [' + f.rule + ']' + (f.kernel ? ' in ' + f.kernel : '') + ': ' + f.message;
      box.appendChild(head);
      f.lines.forEach(l => box.appendChild(part('line', 'at ' + l.file + ':' + l.line + '  ' + (l.source || ''))));
      if (f.regions.length) {
        box.appendChild(part('regions', 'regions: ' + f.regions.map(r => r.memory + ' partitions ' +
          r.partitions[0] + '-' + r.partitions[1] + ' bytes ' + r.bytes[0] + '-' + r.bytes[1]).join('; ')));
      }
      if (f.iterations.length) box.appendChild(part('iterations', 'iterations: ' + f.iterations.join(', ')));
      if (f.programs.length) {
        box.appendChild(part('programs', 'programs: ' + f.programs.map(p => '[' + p + ']').join(', ')));
      }
      if (f.why) box.appendChild(part('why', 'why: ' + f.why));
      if (f.fix) box.appendChild(part('fix', 'fix: ' + f.fix));
      fl.appendChild(box);
    });
  }

  const canvas = document.getElementById('timeline');
  const ctx = canvas.getContext('2d');
  const tip = document.getElementById('tip');
  const rows = data.rows, slices = data.slices, LABEL = 150, ROW_H = 18;
  const palette = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7',
                   '#9c755f', '#bab0ac'];
  const colors = {};
  let t0 = 0, t1 = Math.max(data.total_ns, 1);
  function color(op) {
    if (!(op in colors)) colors[op] = palette[Object.keys(colors).length % palette.length];
    return colors[op];
  }
  function draw() {
    const w = canvas.clientWidth, h = Math.max(ROW_H * rows.length + 24, 120);
    canvas.width = w; canvas.height = h; canvas.style.height = h + 'px';
    ctx.clearRect(0, 0, w, h);
    ctx.font = '11px sans-serif'; ctx.textBaseline = 'middle';
    rows.forEach((r, i) => {
      ctx.fillStyle = i % 2 ? '#fafafa' : '#f0f0f0'; ctx.fillRect(0, i * ROW_H, w, ROW_H);
      ctx.fillStyle = '#333'; ctx.fillText(r, 4, i * ROW_H + ROW_H / 2);
    });
    const scale = (w - LABEL) / (t1 - t0);
    slices.forEach(s => {
      if (s[2] < t0 || s[1] > t1) return;
      const x = LABEL + (s[1] - t0) * scale, width = Math.max((s[2] - s[1]) * scale, 0.5);
      ctx.fillStyle = color(s[3]); ctx.fillRect(x, s[0] * ROW_H + 2, width, ROW_H - 4);
    });
    ctx.fillStyle = '#333';
    ctx.fillText(fmt(t0), LABEL, h - 10);
    const end = fmt(t1); ctx.fillText(end, w - ctx.measureText(end).width - 4, h - 10);
  }
  function at(ev) {
    const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    return [t0 + (x - LABEL) * (t1 - t0) / (canvas.clientWidth - LABEL), Math.floor(y / ROW_H)];
  }
  canvas.addEventListener('wheel', ev => {
    ev.preventDefault();
    const [t] = at(ev), f = ev.deltaY > 0 ? 1.25 : 0.8;
    t0 = Math.max(0, t - (t - t0) * f); t1 = t + (t1 - t) * f; draw();
  }, {passive: false});
  let drag = null;
  canvas.addEventListener('mousedown', ev => { drag = [ev.clientX, t0, t1]; });
  window.addEventListener('mouseup', () => { drag = null; });
  canvas.addEventListener('mousemove', ev => {
    if (drag) {
      const dt = (ev.clientX - drag[0]) * (drag[2] - drag[1]) / (canvas.clientWidth - LABEL);
      t0 = drag[1] - dt; t1 = drag[2] - dt; draw(); return;
    }
    const [t, row] = at(ev);
    const hit = slices.find(s => s[0] === row && s[1] <= t && t <= s[2]);
    if (!hit) { tip.style.display = 'none'; return; }
    tip.textContent = hit[3] + '  ' + fmt(hit[2] - hit[1]) + '\n' + hit[4];
    tip.style.left = (ev.clientX + 12) + 'px'; tip.style.top = (ev.clientY + 12) + 'px';
    tip.style.display = 'block';
  });
  canvas.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
  window.addEventListener('resize', draw);
  draw();
  document.body.dataset.rendered = 'ok';
})();
"""


def report_data(result) -> dict:
    """The data the HTML page embeds."""
    result.finish()
    rows, slices = [], []
    index = {}

    def row_of(core, name):
        key = f"nc{core} {name}" if result.cores > 1 else name
        if key not in index:
            index[key] = len(rows)
            rows.append(key)
        return index[key]

    for core in range(result.cores):
        for name in Row.ENGINES:
            if result.busy_ns.get((core, name)):
                row_of(core, name)
    records = result.records
    if len(records) > MAX_SLICES:
        records = sorted(records, key=lambda r: r.end - r.start, reverse=True)[:MAX_SLICES]
    for rec in records:
        where = f"{location_key(rec.location)}  {rec.location.source if rec.location else ''}"
        slices.append([row_of(rec.core, rec.row), rec.start, rec.end, rec.opcode, where])
        if rec.ls_start is not None:
            slices.append([row_of(rec.core, Row.TENSOR), rec.ls_start, rec.ls_end, "LoadStationary", where])
        if rec.issue_start is not None:
            slices.append([row_of(rec.core, rec.issue_row), rec.issue_start, rec.issue_end, "dma_trigger", where])
    engines = [{"row": name, "busy_ns": result.engine_busy_ns(name), "utilization": result.utilization(name)}
               for name in Row.ENGINES if result.engine_busy_ns(name)]
    return {"summary": result.to_dict(), "total_ns": result.total_ns, "rows": rows, "slices": slices,
            "engines": engines,
            "hot_spots": [{"line": line, "busy_ns": busy, "critical_ns": crit, "count": count, "opcodes": ops}
                          for line, busy, crit, count, ops in hot_spots(result)],
            "hints": [{"kind": h.kind, "message": h.message, "lines": list(h.lines)} for h in hints(result)],
            "findings": None if result.findings is None else [f.to_json() for f in result.findings],
            "thinned": len(result.records) > MAX_SLICES}


def html_report(result) -> str:
    """The report page (module docstring) as a string."""
    data = report_data(result)
    s = data["summary"]
    rf = s["roofline"]
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(f"{result.kernel} on {result.hw.name}")
    facts = [
        ("estimated latency", format_time(result.latency_ns)),
        ("roofline bound", f"{format_time(rf['bound_ns'])} ({rf['bound']}-bound)"),
        ("instructions", str(s["instruction_count"])),
        ("matmul FLOP/s", f"{s['achieved_flops_per_s'] / 1e12:.3f} TFLOP/s "
                          f"({s['mfu_estimated_percent']:.1f}% of peak)"),
        ("DMA", f"{s['dma_transfer_count']} transfers, {s['dma_transfer_total_bytes']} bytes, average "
                f"{s['dma_transfer_average_bytes']:.0f} bytes"),
        ("HBM", f"{s['hbm_read_bytes'] + s['hbm_write_bytes']} bytes at "
                f"{s['hbm_bandwidth_bytes_per_s'] / 1e9:.2f} GB/s ({s['mbu_estimated_percent']:.1f}% MBU)"),
    ]
    fact_rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in facts)
    thinned = ('<p class="muted">Timeline thinned to the longest %d slices.</p>' % MAX_SLICES
               if data["thinned"] else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>opennki profile: {title}</title>
<style>{_STYLE}</style></head>
<body>
<h1>opennki profile: {title}</h1>
<p class="muted">Estimated by the opennki cost model (no device was used). Wheel to zoom, drag to pan.</p>
<h2>Summary</h2><table id="summary">{fact_rows}</table>
<h2>Timeline</h2><canvas id="timeline"></canvas>{thinned}<div id="tip"></div>
<h2>Engines</h2><table id="engines"></table>
<h2>Hot spots</h2><table id="hotspots"></table>
<h2>Hints</h2><ul id="hints"></ul>
<h2>Findings</h2><div id="findings"></div>
<script type="application/json" id="profile-data">{payload}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def write_html_report(result, path: str) -> str:
    with open(path, "w") as f:
        f.write(html_report(result))
    return path

/* phasebench report: sortable and filterable tables, and uPlot charts created when scrolled into view.
   Plain ES5-style JavaScript, no dependencies besides the inlined uPlot, no network. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("chart-data").textContent);

  /* ---- tables: click a header to sort (numeric when cells carry data-v), type to filter ---- */
  function cellKey(row, col) {
    var cell = row.cells[col];
    if (!cell) { return ""; }
    var v = cell.getAttribute("data-v");
    if (v !== null) { return v === "" ? null : parseFloat(v); }
    return cell.textContent.trim().toLowerCase();
  }
  function sortTable(table, col, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    rows.sort(function (a, b) {
      var x = cellKey(a, col), y = cellKey(b, col);
      if (x === y) { return 0; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      return (x < y ? -1 : 1) * dir;
    });
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    rows.forEach(function (r) { body.appendChild(r); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var head = table.tHead && table.tHead.rows[0];
    if (!head) { return; }
    Array.prototype.forEach.call(head.cells, function (th, col) {
      th.title = "click to sort";
      th.addEventListener("click", function () { sortTable(table, col, th); });
    });
  });
  function applyFilter(tableId) {
    var table = document.getElementById(tableId);
    var text = document.querySelector('[data-filter="' + tableId + '"]');
    var select = document.querySelector('[data-filter-select="' + tableId + '"]');
    var needle = text ? text.value.trim().toLowerCase() : "";
    var verdict = select ? select.value : "";
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var ok = (!needle || row.textContent.toLowerCase().indexOf(needle) >= 0) &&
               (!verdict || row.getAttribute("data-verdict") === verdict);
      row.hidden = !ok;
    });
  }
  Array.prototype.forEach.call(document.querySelectorAll("[data-filter],[data-filter-select]"), function (el) {
    var id = el.getAttribute("data-filter") || el.getAttribute("data-filter-select");
    el.addEventListener("input", function () { applyFilter(id); });
    el.addEventListener("change", function () { applyFilter(id); });
  });
  Array.prototype.forEach.call(document.querySelectorAll("[data-chart-filter]"), function (el) {
    var box = document.getElementById(el.getAttribute("data-chart-filter"));
    el.addEventListener("input", function () {
      var needle = el.value.trim().toLowerCase();
      Array.prototype.forEach.call(box.children, function (fig) {
        fig.hidden = needle !== "" && fig.getAttribute("data-name").toLowerCase().indexOf(needle) < 0;
      });
    });
  });

  /* ---- charts ---- */
  function ms(v) { return v === null || v === undefined ? "–" : (v * 1e3).toPrecision(4) + " ms"; }
  function stepLines(steps) {
    return function (u) {
      var ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = "#b45309";
      ctx.setLineDash([5, 4]);
      ctx.lineWidth = 1.5 * (window.devicePixelRatio || 1);
      steps.forEach(function (s) {
        var x = Math.round(u.valToPos(s.x - 0.5, "x", true));
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
      });
      ctx.restore();
    };
  }
  /* Stack changes between the runs shown: a purple dotted line with the change written on it. */
  function stackLines(el, marks) {
    return function (u) {
      el.setAttribute("data-stack-marks", String(marks.length));  /* the browser test reads it */
      var ctx = u.ctx, dpr = window.devicePixelRatio || 1;
      ctx.save();
      ctx.strokeStyle = "#7c3aed";
      ctx.fillStyle = "#7c3aed";
      ctx.setLineDash([2, 3]);
      ctx.lineWidth = 1.5 * dpr;
      ctx.font = (10 * dpr) + "px sans-serif";
      marks.forEach(function (s) {
        var x = Math.round(u.valToPos(s.x - 0.5, "x", true));
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        /* near the right edge (a change into the current run) the label goes left of the line */
        var right = x > u.bbox.left + u.bbox.width * 0.6;
        ctx.textAlign = right ? "right" : "left";
        ctx.fillText(s.text, right ? x - 3 * dpr : x + 3 * dpr, u.bbox.top + 11 * dpr);
      });
      ctx.restore();
    };
  }
  /* x ticks: the run's short commit and date at integer positions (aggregated buckets: none). */
  function runTicks(el, ticks) {
    return function (u, vals) {
      var out = vals.map(function (v) {
        return Math.abs(v - Math.round(v)) < 1e-9 && ticks[Math.round(v)] !== undefined ? ticks[Math.round(v)].split(" ").join("\n") : "";
      });
      el.setAttribute("data-ticks", out.filter(function (x) { return x; }).join("|"));  /* for the browser test */
      return out;
    };
  }
  function trendChart(el, t, m) {
    var n = t.x.length;
    /* seconds as ms; any other unit (J/tok) as a plain number with its unit */
    var fmt = (t.unit || "s") === "s" ? ms : function (v) { return v === null || v === undefined ? "–" : v.toPrecision(4) + " " + t.unit; };
    var current = t.y.map(function (v, i) { return i === n - 1 ? v : null; });
    var opts = {
      width: Math.max(280, el.clientWidth), height: 220,
      legend: { live: true },
      scales: { x: { time: false } },
      axes: [
        { label: "commit · date", values: runTicks(el, m.ticks || []), size: 46, space: 70, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500] },
        { values: function (u, vals) { return vals.map(fmt); }, size: 70 }
      ],
      series: [
        { label: "run", value: function (u, v, si, di) { return di === null || di === undefined ? "–" : t.labels[di]; } },
        { label: t.metric, stroke: "#2563eb", width: 1.5, value: function (u, v) { return fmt(v); }, points: { size: 4 } },
        { label: "current", stroke: "#dc2626", width: 0, value: function (u, v) { return fmt(v); }, points: { size: 10, fill: "#dc2626" } }
      ],
      hooks: { draw: [stepLines(t.steps), stackLines(el, m.stack || [])] }
    };
    return new uPlot(opts, [t.x, t.y, current], el);
  }
  function curveChart(el, c) {
    var opts = {
      width: Math.max(280, el.clientWidth), height: 200,
      scales: { x: { time: false } },
      axes: [{ label: "context position" }, { values: function (u, vals) { return vals.map(ms); }, size: 70 }],
      series: [
        { label: "position" },
        { label: "current", stroke: "#2563eb", width: 1.5, value: function (u, v) { return ms(v); } },
        { label: "last baseline", stroke: "#6b7280", dash: [6, 4], width: 1, value: function (u, v) { return ms(v); } }
      ]
    };
    return new uPlot(opts, [c.x, c.current, c.baseline], el);
  }
  /* Roofline: log-log, x = FLOP per byte, y = achieved FLOP/s. uPlot needs one shared x array,
     so the roofs are series over a log-spaced grid (plus each ridge, for a sharp corner; a roof is
     straight in log-log, so the grid only serves the hover legend) and the points are line-less
     series that are null except at their own x. */
  var SI = [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]];
  function si(v, unit) {
    if (v === null || v === undefined) { return "–"; }
    for (var i = 0; i < SI.length; i++) {
      if (Math.abs(v) >= SI[i][1]) { return +(v / SI[i][1]).toPrecision(3) + " " + SI[i][0] + unit; }
    }
    return +v.toPrecision(3) + (unit ? " " + unit : "");
  }
  function decadeTicks(u, vals) {
    return vals.map(function (v) {
      var e = Math.log(v) / Math.LN10;
      return Math.abs(e - Math.round(e)) < 1e-6 ? si(v, "").trim() : "";
    });
  }
  function decadeBelow(v) { return Math.pow(10, Math.floor(Math.log(v) / Math.LN10 + 1e-9)); }
  function decadeAbove(v) { return Math.pow(10, Math.ceil(Math.log(v) / Math.LN10 - 1e-9)); }
  var PHASES = ["prefill", "decode"];
  var PHASE_COLORS = { prefill: "#2563eb", decode: "#ea580c" };
  var ROOF_COLORS = ["#111827", "#7c3aed", "#15803d", "#6b7280"];
  var ROOF_DASH = [[], [8, 4], [2, 3], [10, 3, 2, 3]];
  function roofAt(f, x) {
    if (f.flop && f.bw) { return Math.min(f.flop, f.bw * x); }
    return f.flop ? f.flop : (f.bw ? f.bw * x : null);
  }
  function rooflineChart(el, r) {
    var pts = r.points;
    var xlo = Infinity, xhi = 0, ylo = Infinity, yhi = 0;
    pts.forEach(function (p) {
      xlo = Math.min(xlo, p.x); xhi = Math.max(xhi, p.x);
      ylo = Math.min(ylo, p.y); yhi = Math.max(yhi, p.y);
    });
    r.roofs.forEach(function (f) {
      if (f.flop) { yhi = Math.max(yhi, f.flop); }
      if (f.flop && f.bw) { xlo = Math.min(xlo, f.flop / f.bw); xhi = Math.max(xhi, f.flop / f.bw); }
    });
    ylo = decadeBelow(ylo / 2); yhi = decadeAbove(yhi * 2);
    r.roofs.forEach(function (f) {  /* a bandwidth-only roof: show its slope across the y range */
      if (f.bw && !f.flop) { xlo = Math.min(xlo, ylo / f.bw); xhi = Math.max(xhi, yhi / f.bw); }
    });
    xlo = decadeBelow(xlo / 2); xhi = decadeAbove(xhi * 2);
    var entries = [], n = 24, l0 = Math.log(xlo), l1 = Math.log(xhi);
    for (var i = 0; i <= n; i++) { entries.push({ x: Math.exp(l0 + (l1 - l0) * i / n), p: null }); }
    r.roofs.forEach(function (f) { if (f.flop && f.bw) { entries.push({ x: f.flop / f.bw, p: null }); } });
    pts.forEach(function (p) { entries.push({ x: p.x, p: p }); });
    entries.sort(function (a, b) { return a.x - b.x; });
    var xs = [], rows = [];  /* rows[i]: the prefill and decode point drawn at xs[i], if any */
    entries.forEach(function (e) {
      var last = xs.length - 1;
      var same = last >= 0 && e.x <= xs[last];
      if (same && (e.p === null || rows[last][e.p.phase] === null)) {
        if (e.p !== null) { rows[last][e.p.phase] = e.p; }
        return;
      }
      /* two points of one phase at the same intensity: nudge the second, invisibly */
      xs.push(same ? xs[last] * (1 + 1e-9) : e.x);
      var row = { prefill: null, decode: null };
      if (e.p !== null) { row[e.p.phase] = e.p; }
      rows.push(row);
    });
    var series = [{ label: "intensity", value: function (u, v) { return v === null || v === undefined ? "–" : si(v, "FLOP/B"); } }];
    var cols = [xs];
    r.roofs.forEach(function (f, k) {
      series.push({
        label: "roof " + f.label, stroke: ROOF_COLORS[k % ROOF_COLORS.length], width: 2,
        dash: ROOF_DASH[k % ROOF_DASH.length], points: { show: false }, pxAlign: 0,
        value: function (u, v) { return si(v, "FLOP/s"); }
      });
      cols.push(xs.map(function (x) { return roofAt(f, x); }));
    });
    PHASES.forEach(function (phase) {
      if (!pts.some(function (p) { return p.phase === phase; })) { return; }
      var color = PHASE_COLORS[phase];
      series.push({
        label: phase, stroke: color, fill: color, width: 1,
        paths: function () { return null; },  /* points only, no line between cells */
        points: { show: true, size: 9, width: 1, stroke: color, fill: color },
        value: function (u, v, s, di) {
          var p = di === null || di === undefined ? null : rows[di][phase];
          return p ? "#" + p.n + " " + p.cell + ": " + si(p.y, "FLOP/s") : "–";
        }
      });
      cols.push(rows.map(function (row) { return row[phase] ? row[phase].y : null; }));
    });
    function labels(u) {
      var ctx = u.ctx, dpr = window.devicePixelRatio || 1, labelled = 0;
      ctx.save();
      ctx.font = (11 * dpr) + "px system-ui, sans-serif";
      ctx.textBaseline = "bottom";
      /* each number goes to the first corner of its point where it overlaps no earlier number */
      var taken = [], h = 11 * dpr, corners = [[1, -1], [1, 1], [-1, -1], [-1, 1]];
      function free(box) {
        return taken.every(function (t) {
          return box[0] >= t[2] || box[2] <= t[0] || box[1] >= t[3] || box[3] <= t[1];
        });
      }
      rows.forEach(function (row, idx) {
        PHASES.forEach(function (phase) {
          var p = row[phase];
          if (!p) { return; }
          var text = String(p.n), w = ctx.measureText(text).width, box = null;
          var cx = u.valToPos(xs[idx], "x", true), cy = u.valToPos(p.y, "y", true);
          for (var c = 0; c < corners.length && box === null; c++) {
            var x0 = corners[c][0] > 0 ? cx + 5 * dpr : cx - 5 * dpr - w;
            var y0 = corners[c][1] < 0 ? cy - 2 * dpr - h : cy + 2 * dpr;
            if (free([x0, y0, x0 + w, y0 + h]) || c === corners.length - 1) { box = [x0, y0, x0 + w, y0 + h]; }
          }
          taken.push(box);
          ctx.fillStyle = PHASE_COLORS[phase];
          ctx.fillText(text, box[0], box[3]);
          labelled++;
        });
      });
      ctx.textAlign = "right";
      r.roofs.forEach(function (f, k) {
        var y = u.valToPos(Math.min(roofAt(f, xhi), yhi), "y", true);
        ctx.fillStyle = ROOF_COLORS[k % ROOF_COLORS.length];
        ctx.fillText("roof " + f.label, u.bbox.left + u.bbox.width - 4 * dpr,
          Math.max(y - (3 + 13 * k) * dpr, u.bbox.top + (14 + 13 * k) * dpr));
      });
      ctx.restore();
      el.setAttribute("data-labelled", String(labelled));  /* drawn to the end (the browser test reads it) */
    }
    var opts = {
      width: Math.max(280, el.clientWidth), height: 380,
      cursor: { hover: { skip: [null, undefined], prox: 24 } },
      scales: {
        x: { time: false, distr: 3, range: function () { return [xlo, xhi]; } },
        y: { distr: 3, range: function () { return [ylo, yhi]; } }
      },
      axes: [
        { label: "arithmetic intensity (FLOP / byte)", values: decadeTicks },
        { label: "achieved FLOP/s", values: decadeTicks, size: 60 }
      ],
      series: series,
      hooks: { draw: [labels] }
    };
    return new uPlot(opts, cols, el);
  }
  function build(el) {
    if (el.getAttribute("data-built")) { return; }
    el.setAttribute("data-built", "1");
    var m = data[parseInt(el.getAttribute("data-machine"), 10)];
    var id = el.getAttribute("data-chart");
    var kind = el.getAttribute("data-kind");
    if (kind === "trend") { trendChart(el, m.trends[id], m); }
    else if (kind === "host") { trendChart(el, m.hosts[id], m); }
    else if (kind === "roofline") { rooflineChart(el, m.roofline[id]); }
    else { curveChart(el, m.curves[id]); }
  }
  var charts = document.querySelectorAll(".chart[data-chart]");
  function buildAll() { Array.prototype.forEach.call(charts, build); }
  /* Charts are drawn when scrolled into view; all at once for printing or with #all-charts. */
  window.addEventListener("beforeprint", buildAll);
  if (window.location.hash === "#all-charts") {
    buildAll();
  } else if ("IntersectionObserver" in window) {
    var io = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        if (e.isIntersecting) { io.unobserve(e.target); build(e.target); }
      });
    }, { rootMargin: "400px" });
    Array.prototype.forEach.call(charts, function (el) { io.observe(el); });
  } else {
    buildAll();
  }
  /* #first-screen: record what a reader sees without scrolling (tests read it from the DOM):
     the headline, the counts and how many rows of the "What changed" table lie wholly inside
     the viewport. */
  if (window.location.hash === "#first-screen") {
    var h = window.innerHeight;
    var inView = function (el) { return el && el.getBoundingClientRect().bottom <= h; };
    var rows = document.querySelectorAll("#changed tbody tr");
    var seen = Array.prototype.filter.call(rows, inView).length;
    document.body.setAttribute("data-first-screen", JSON.stringify({
      height: h,
      headline: inView(document.getElementById("verdict-line")),
      counts: inView(document.querySelector("header.status .badge")),
      changed_rows: seen,
      changed_total: rows.length
    }));
  }
  document.body.setAttribute("data-ready", "1");
})();

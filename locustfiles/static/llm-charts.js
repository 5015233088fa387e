/* vprof: LLM charts over time — TTFT, TPOT and ITL percentiles, output tokens/s, requests in
 * flight — drawn with Apache ECharts.
 *
 * Two places use this script:
 * - Locust's web UI: while the LLM tab is open, the charts sit under its table and follow
 *   ./stats/llm/timeline, polled every two seconds like Locust's own statistics.
 * - The "LLM statistics" section vprof adds to Locust's HTML report: the points are embedded
 *   as JSON in #vprof-llm-data and drawn once, offline.
 * Each chart's element carries data-points (how many intervals it draws) and data-filled
 * (whether any of them holds a value), so a test can tell a drawn chart from an empty one. */
(function () {
  "use strict";
  if (typeof echarts === "undefined") return; // the vendored ECharts did not load: no charts
  const PCTS = [[50, "median"], [90, "p90"], [95, "p95"], [99, "p99"]];
  const COLORS = ["#4269d0", "#efb118", "#ff725c", "#a463f2", "#3ca951", "#6cc5b0"];
  const CHARTS = [
    { id: "ttft", title: "TTFT (ms)", pct: "ttft" },
    { id: "tpot", title: "TPOT (ms)", pct: "tpot" },
    { id: "itl", title: "ITL (ms)", pct: "itl" },
    { id: "output_throughput", title: "Output tokens/s", lines: [["output_throughput", "output tok/s"]],
      colors: [COLORS[4]] },
    { id: "requests", title: "Requests/s (by finish time)",
      lines: [["request_throughput", "completed"], ["failures_per_s", "failed"]],
      colors: [COLORS[0], COLORS[2]] },
    { id: "in_flight", title: "Requests in flight (mean over each interval)",
      lines: [["in_flight", "in flight"]], colors: [COLORS[5]], area: true },
  ];
  const POLL_MS = 2000;
  const REFETCH_S = 300; // points this recent are fetched again: late records still change them
  const TAB_KEY = "llm";
  const TAB_TITLE = "llm";

  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  function fmt(v) {
    if (v === null || v === undefined) return "–";
    const a = Math.abs(v);
    return a >= 1000 ? v.toLocaleString("en", { maximumFractionDigits: 0 })
      : a >= 100 ? v.toFixed(1) : a >= 1 ? v.toFixed(2) : a === 0 ? "0" : v.toPrecision(3);
  }

  function seriesFor(chart, points, width) {
    const x = (p) => (p.t + width) * 1000; // a point stands at the end of its interval
    if (chart.pct) {
      return PCTS.map(([p, key], i) => ({
        name: "p" + p, type: "line", showSymbol: points.length < 40, symbolSize: 4,
        color: COLORS[i], data: points.map((pt) => [x(pt), num(pt[key + "_" + chart.pct + "_ms"])]),
      }));
    }
    return chart.lines.map(([key, name], i) => ({
      name: name, type: "line", showSymbol: points.length < 40, symbolSize: 4,
      color: chart.colors[i], areaStyle: chart.area ? { opacity: 0.15 } : undefined,
      data: points.map((pt) => [x(pt), num(pt[key])]),
    }));
  }

  function baseOption(chart, dark) {
    const y = { type: "value", scale: false, splitLine: { lineStyle: { opacity: 0.4 } } };
    return {
      animation: false,
      backgroundColor: "transparent",
      title: { text: chart.title, left: 8, top: 6, textStyle: { fontSize: 13, fontWeight: 600,
        color: dark ? "#e6e6e6" : "#1f2328" } },
      grid: { left: 12, right: 32, top: 56, bottom: 8, containLabel: true },
      legend: { top: 28, left: 8, textStyle: { fontSize: 11 } },
      tooltip: { trigger: "axis", confine: true, valueFormatter: (v) => fmt(v) },
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],
      xAxis: { type: "time", splitLine: { show: false },
        axisLabel: { hideOverlap: true, fontSize: 11 } },
      yAxis: y,
    };
  }

  function isDark() {
    // Locust's report names its theme; the web UI's toggle shows in the page's background.
    if (document.getElementById("vprof-llm-data") && typeof window.theme === "string") {
      return window.theme === "dark";
    }
    const m = getComputedStyle(document.body).backgroundColor.match(/\d+(\.\d+)?/g);
    if (!m || m.length < 3 || (m.length > 3 && Number(m[3]) === 0)) return false;
    return 0.2126 * m[0] + 0.7152 * m[1] + 0.0722 * m[2] < 128;
  }

  /** The charts inside ``root``: built once, redrawn with new points. */
  function Board(root, renderer) {
    this.root = root;
    this.renderer = renderer;
    this.dark = null;
    this.instances = [];
    this.elements = [];
  }
  Board.prototype.build = function (dark) {
    this.dispose();
    this.dark = dark;
    this.root.innerHTML = "";
    this.status = document.createElement("p");
    this.status.className = "vprof-llm-status";
    this.root.appendChild(this.status);
    const grid = document.createElement("div");
    grid.className = "vprof-llm-grid";
    this.root.appendChild(grid);
    CHARTS.forEach((chart) => {
      const el = document.createElement("div");
      el.className = "vprof-llm-chart";
      el.dataset.chart = chart.id;
      el.dataset.points = "0";
      el.dataset.filled = "false";
      grid.appendChild(el);
      const inst = echarts.init(el, dark ? "dark" : null, { renderer: this.renderer });
      inst.setOption(baseOption(chart, dark));
      this.elements.push(el);
      this.instances.push(inst);
    });
  };
  Board.prototype.draw = function (points, width) {
    const dark = isDark();
    if (this.dark !== dark || !this.instances.length) this.build(dark);
    this.status.textContent = points.length ? ""
      : "Waiting for the first requests to finish (a point appears a few seconds after its "
        + "interval ends)…";
    CHARTS.forEach((chart, i) => {
      const series = seriesFor(chart, points, width);
      this.instances[i].setOption({ series: series });
      this.elements[i].dataset.points = String(points.length);
      this.elements[i].dataset.filled = String(series.some((s) => s.data.some((d) => d[1] !== null)));
    });
  };
  Board.prototype.resize = function () { this.instances.forEach((c) => c.resize()); };
  Board.prototype.dispose = function () {
    this.instances.forEach((c) => c.dispose());
    this.instances = [];
    this.elements = [];
  };

  // -- in Locust's HTML report: draw the embedded points once ------------------------------
  const embedded = document.getElementById("vprof-llm-data");
  if (embedded) {
    const data = JSON.parse(embedded.textContent);
    const board = new Board(document.getElementById("vprof-llm-charts"), "svg");
    board.draw(data.points, data.interval_s);
    window.addEventListener("resize", () => board.resize());
    return;
  }

  // -- in Locust's web UI: follow the LLM tab ------------------------------------------------
  let board = null;
  let root = null;
  let points = new Map(); // t -> point
  let generation = null;
  let width = 5;
  let lastFetch = 0;
  let fetching = false;

  function tabOpen() {
    const query = new URLSearchParams(window.location.search).get("tab");
    if (query !== null) return query === TAB_KEY;
    const selected = document.querySelector("[role=tab][aria-selected=true]");
    return !!selected && selected.textContent.trim().toLowerCase() === TAB_TITLE;
  }

  // Locust renders a tab's content after the tab bar, inside the same MUI Container; the
  // charts go last in that container, under the table. React leaves foreign nodes alone, but
  // may append its own after them, so the charts are moved back to the end when needed.
  function placeRoot() {
    const tablist = document.querySelector("[role=tablist]");
    const container = tablist && tablist.closest(".MuiContainer-root");
    if (!container) return false;
    if (!root) {
      root = document.createElement("div");
      root.id = "vprof-llm-charts";
      root.className = "vprof-llm-charts";
      board = new Board(root, "canvas");
    }
    if (container.lastElementChild !== root) {
      container.appendChild(root);
      if (board.instances.length) board.resize();
    }
    return true;
  }

  function removeRoot() {
    if (!root) return;
    board.dispose();
    root.remove();
    root = null;
    board = null;
  }

  function fetchPoints() {
    fetching = true;
    lastFetch = Date.now();
    const sorted = Array.from(points.keys()).sort((a, b) => a - b);
    const since = sorted.length ? sorted[sorted.length - 1] - REFETCH_S : null;
    const url = "./stats/llm/timeline" + (since === null ? "" : "?since=" + since);
    return fetch(url, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status))))
      .then((data) => {
        if (data.generation !== generation) { points = new Map(); generation = data.generation; }
        width = data.interval_s;
        data.points.forEach((p) => points.set(p.t, p));
        if (board) {
          board.draw(Array.from(points.values()).sort((a, b) => a.t - b.t), width);
        }
      })
      .catch((err) => { if (board && board.status) board.status.textContent = "LLM charts: " + err.message; })
      .finally(() => { fetching = false; });
  }

  function tick() {
    if (!tabOpen()) { removeRoot(); return; }
    if (!placeRoot()) return;
    if (!board.instances.length) board.draw(Array.from(points.values()).sort((a, b) => a.t - b.t), width);
    if (!fetching && Date.now() - lastFetch >= POLL_MS) fetchPoints();
  }

  window.addEventListener("resize", () => { if (board) board.resize(); });
  window.setInterval(tick, 250);
  tick();
})();

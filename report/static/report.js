/* vprof report: draws every chart from the data embedded in #vprof-data with Apache ECharts.
 * Each chart is a <div class="chart" data-chart="KIND" ...>; the page's tables are plain HTML,
 * so the report reads (and prints) even where a chart cannot be drawn. */
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("vprof-data").textContent);
  const RUNS = new Map(DATA.runs.map((r) => [r.id, r]));
  // Observable's 10-colour categorical palette: distinct for the common colour blindnesses.
  const COLORS = ["#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2",
    "#97bbf5", "#9c6b4e", "#9498a0"];
  const SLO_COLOR = "#c4321f";
  const METRIC = { ttft: "TTFT", tpot: "TPOT", itl: "ITL", e2el: "E2E latency" };
  const charts = [];
  const logGroups = {};

  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  const color = (i) => COLORS[i % COLORS.length];
  function fmt(v, unit) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    const a = Math.abs(v);
    const s = a >= 1000 ? v.toLocaleString("en", { maximumFractionDigits: 0 })
      : a >= 100 ? v.toFixed(1) : a >= 1 ? v.toFixed(2) : a === 0 ? "0" : v.toPrecision(3);
    return unit ? s + " " + unit : s;
  }
  const pctKey = (q) => (q === 50 ? "median" : "p" + q);

  function empty(el, text) {
    el.innerHTML = "";
    el.classList.add("is-empty");
    const div = document.createElement("div");
    div.className = "empty";
    div.textContent = text;
    el.appendChild(div);
  }

  function base(title, extra) {
    return Object.assign({
      animation: false,
      color: COLORS,
      title: [{ text: title, left: 8, top: 6, textStyle: { fontSize: 13, fontWeight: 600 } }],
      // containLabel leaves out axis names: the left margin keeps room for the y axis's.
      grid: { left: 30, right: 24, top: 64, bottom: 30, containLabel: true },
      legend: { type: "scroll", top: 30, left: 8, right: 90, textStyle: { fontSize: 11 } },
      tooltip: { trigger: "axis", confine: true, axisPointer: { type: "cross" },
        valueFormatter: (v) => fmt(v) },
      toolbox: { right: 8, top: 4, itemSize: 13,
        feature: { dataZoom: { title: { zoom: "box zoom", back: "undo zoom" } },
          restore: { title: "reset" } } },
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],
    }, extra || {});
  }

  // An axis top that shows the mark lines at ``levels`` (an SLO, a saturation line) even when
  // every drawn value is below them; undefined leaves the top to ECharts.
  function reach(series, levels) {
    let top = 0;
    series.forEach((s) => (s.data || []).forEach((d) => {
      const y = num(Array.isArray(d) ? d[1] : d && d.value ? d.value[1] : null);
      if (y !== null) top = Math.max(top, y);
    }));
    // a stacked band's data are differences: its tops are kept beside them
    series.forEach((s) => (s.tops || []).forEach((y) => { if (num(y) !== null) top = Math.max(top, y); }));
    const need = Math.max(0, ...levels.filter((v) => num(v) !== null)) * 1.1;
    if (!(need > top)) return undefined;
    const step = Math.pow(10, Math.floor(Math.log10(need)));
    return [1, 2, 2.5, 5, 10].map((k) => k * step).find((v) => v >= need);
  }

  // A second, smaller title line under the first: what the line styles or marks mean.
  function subtitle(option, text) {
    option.title.push({ text: text, left: 8, top: 24, textStyle: { fontSize: 10, fontWeight: "normal", color: "#59636e" } });
    option.legend.top = 42;
    option.grid.top = 76;
    return option;
  }

  function axis(name, extra) {
    return Object.assign({ type: "value", name: name, nameLocation: "middle", nameGap: 28,
      nameTextStyle: { fontSize: 11 }, scale: false, splitLine: { lineStyle: { opacity: 0.5 } } },
    extra || {});
  }

  // A viewBox lets the print stylesheet scale a drawn chart to the paper instead of cutting
  // it off, even when the page is printed without a resize (headless printToPDF).
  function scalable(el) {
    const svg = el.querySelector("svg");
    if (svg && svg.getAttribute("width")) {
      svg.setAttribute("viewBox", "0 0 " + svg.getAttribute("width") + " " + svg.getAttribute("height"));
    }
  }

  function draw(el, option, group) {
    const chart = echarts.init(el, null, { renderer: "svg" });
    chart.on("finished", () => scalable(el));
    chart.setOption(option);
    scalable(el);
    if (group) chart.group = group;
    charts.push(chart);
    el.vprofChart = chart;
    return chart;
  }

  /* ---- capacity ---------------------------------------------------------------------- */

  function throughputChart(el) {
    const unit = el.dataset.unit;
    const series = [];
    let top = 0;
    DATA.capacity.profiles.forEach((p, i) => {
      const points = p.levels.filter((lv) => lv.offered_load_unit === unit)
        .map((lv) => [num(lv.offered_load), num(lv.request_throughput), lv.run]);
      if (!points.length) return;
      points.forEach((pt) => { top = Math.max(top, pt[0] || 0, pt[1] || 0); });
      series.push({ name: p.profile, type: "line", data: points, color: color(i), symbolSize: 7,
        lineStyle: { width: 2 } });
    });
    if (!series.length) return empty(el, "no run offered load in " + unit);
    predictedCurves().forEach((c) => {
      const points = c.levels.filter((lv) => lv.offered_load_unit === unit)
        .map((lv) => [num(lv.offered_load), num(lv.request_throughput), lv.run]);
      if (points.length) series.push(predictedSeries(c, c.name, points));
    });
    if (unit === "req/s") {
      series.push({ name: "achieved = offered", type: "line", data: [[0, 0], [top, top]],
        symbol: "none", color: "#9498a0", lineStyle: { type: "dashed", width: 1 }, tooltip: { show: false } });
    }
    draw(el, base("Achieved throughput against offered load", {
      xAxis: axis("offered load (" + unit + ")"),
      yAxis: axis("achieved req/s", { nameGap: 40 }),
      series: series,
    }));
  }

  // A capacity model's predictions (vprof report --model): thin dashed lines without points,
  // in the colour of the profile they predict.
  function predictedCurves() {
    return (DATA.capacity.predicted || []);
  }

  function predictedSeries(curve, id, points) {
    // the profile's colour for its first curve; a profile's further workloads take the next
    const i = DATA.capacity.profiles.findIndex((p) => p.profile === curve.profile);
    const k = predictedCurves().filter((c) => c.profile === curve.profile).indexOf(curve);
    return { id: id, name: curve.name, type: "line", data: points, color: color(Math.max(i, 0) + k),
      showSymbol: false, smooth: true, lineStyle: { type: [6, 4], width: 1.5, opacity: 0.8 } };
  }

  // The band a prediction moves within when every step of the server runs 5 % faster or
  // slower (forecast.pace): a shaded area under the curve's name, so the legend toggles both;
  // where it widens, the level is near the knee.
  function bandSeries(curve, line, key) {
    const rows = curve.levels.map((lv) => [num(lv.rate), lv.band && lv.band[key]])
      .filter((r) => r[0] !== null && Array.isArray(r[1]) && num(r[1][0]) !== null && num(r[1][1]) !== null);
    if (rows.length < 2) return [];
    const stack = "band " + line.id;
    const common = { name: curve.name, type: "line", stack: stack, symbol: "none", silent: true,
      smooth: true, lineStyle: { opacity: 0 }, tooltip: { show: false }, z: 1 };
    return [
      Object.assign({ id: "band low " + line.id, data: rows.map((r) => [r[0], num(r[1][0])]) }, common),
      Object.assign({ id: "band " + line.id, data: rows.map((r) => [r[0], num(r[1][1]) - num(r[1][0])]),
        tops: rows.map((r) => num(r[1][1])), areaStyle: { color: line.color, opacity: 0.12 } }, common),
    ];
  }

  function latencyChart(el) {
    const metric = el.dataset.metric;
    const plan = DATA.capacity.plan;
    const targets = plan ? plan.thresholds.filter((t) => t.metric === metric) : [];
    const qs = [50, 95, 99];
    targets.forEach((t) => { if (t.percentile !== null && !qs.includes(t.percentile)) qs.push(t.percentile); });
    qs.sort((a, b) => a - b);
    const dash = { 50: "dotted", 95: "solid", 99: "dashed" };
    const symbols = { 50: "circle", 95: "rect", 99: "triangle" };
    const series = [];
    DATA.capacity.profiles.forEach((p, i) => {
      qs.forEach((q, k) => {
        const key = pctKey(q) + "_" + metric + "_ms";
        const points = p.levels.map((lv) => [num(lv.rate), num(lv[key]), lv.run])
          .filter((pt) => pt[0] !== null);
        if (!points.some((pt) => pt[1] !== null)) return;
        // One legend entry per profile (it toggles all its percentiles); the id keeps p.
        const s = { id: p.profile + " p" + q, name: p.profile, type: "line", data: points, color: color(i),
          symbol: symbols[q] || "diamond", symbolSize: 6, connectNulls: false,
          lineStyle: { type: dash[q] || "solid", width: q === 95 ? 2 : 1.5 } };
        if (k === 0 && num(p.sustainable_rps) !== null) {
          // Labels of nearby rates would overlap: the line names its rate on hover only.
          s.markLine = { symbol: "none", data: [{ xAxis: p.sustainable_rps,
            lineStyle: { color: color(i), type: "dashed", width: 1.5 },
            label: { show: false, formatter: p.profile + ": " + fmt(p.sustainable_rps) + " req/s" +
              (p.binding ? " (" + p.binding + " binds)" : ""), position: "insideEndTop", fontSize: 10 },
            emphasis: { label: { show: true } } }] };
        }
        series.push(s);
      });
    });
    if (!series.length) return empty(el, "no " + METRIC[metric] + " measured");
    predictedCurves().forEach((c) => {
      [50, 95].forEach((q) => {
        const key = pctKey(q) + "_" + metric + "_ms";
        const points = c.levels.map((lv) => [num(lv.rate), num(lv[key]), lv.run])
          .filter((pt) => pt[0] !== null && pt[1] !== null);
        if (!points.length) return;
        const line = predictedSeries(c, c.name + " p" + q, points);
        series.push(line);
        bandSeries(c, line, key).forEach((b) => series.push(b));
      });
    });
    if (targets.length) {
      series.push({ name: "SLO", type: "line", data: [], color: SLO_COLOR, markLine: {
        symbol: "none", silent: true, data: targets.map((t) => ({ yAxis: t.threshold_ms,
          lineStyle: { color: SLO_COLOR, width: 2, type: "solid" },
          label: { formatter: "SLO " + t.key + " ≤ " + fmt(t.threshold_ms, "ms"),
            position: "insideStartTop", fontSize: 10, color: SLO_COLOR } })) } });
    }
    const key = qs.map((q) => "p" + q + " " + ({ 50: "dotted", 95: "solid", 99: "dashed" }[q] || "solid")).join(" · ");
    const option = base(METRIC[metric] + " against the rate served", {
      tooltip: { trigger: "axis", confine: true, axisPointer: { type: "cross" },
        formatter: (items) => [fmt(items[0] && items[0].value[0], "req/s")].concat(items.filter((it) => it.seriesId && !it.seriesId.startsWith("band ") && it.value[1] !== null)
          .map((it) => it.marker + it.seriesId + ": " + fmt(it.value[1], "ms") + " (" + it.value[2] + ")")).join("<br>") },
      xAxis: axis("served req/s"),
      yAxis: axis(METRIC[metric] + " (ms)", { nameGap: 44, max: reach(series, targets.map((t) => t.threshold_ms)) }),
      series: series,
    });
    const marked = DATA.capacity.profiles.some((p) => num(p.sustainable_rps) !== null);
    draw(el, subtitle(option, key + (marked ? " · dashed verticals: sustainable rates" : "")));
  }

  /* ---- distributions ----------------------------------------------------------------- */

  function cdfChart(el) {
    const group = DATA.distribution_groups[Number(el.dataset.group)];
    const metric = el.dataset.metric;
    const series = [];
    let sampledFrom = 0;
    group.run_ids.forEach((id, i) => {
      const run = RUNS.get(id);
      const d = run.distributions[metric];
      if (!d || !d.n) return;
      if (d.drawn_from < d.n) sampledFrom = Math.max(sampledFrom, d.drawn_from);
      const name = run.label;
      series.push({ name: name, type: "line", showSymbol: false, color: color(i), step: false,
        data: d.ms.map((v, k) => [v, d.p[k] * 100]), lineStyle: { width: 1.8 },
        tooltip: { valueFormatter: (v) => fmt(v) } });
      const marks = Object.entries(d.percentiles).filter((e) => num(e[1]) !== null)
        .map((e) => ({ value: [e[1], Number(e[0])], name: "p" + e[0] }));
      series.push({ name: name, type: "scatter", data: marks, color: color(i), symbol: "diamond",
        symbolSize: 9, z: 5, tooltip: { trigger: "item",
          formatter: (p) => run.label + "<br>" + p.name + " " + METRIC[metric] + ": " + fmt(p.value[0], "ms") },
        labelLayout: { hideOverlap: true },
        label: { show: group.run_ids.length <= 2, formatter: (p) => (["p50", "p95", "p99"].includes(p.name) ? p.name : ""), position: "left",
          fontSize: 9, color: color(i) } });
    });
    if (!series.length) return empty(el, "no " + METRIC[metric] + " values");
    const option = base(METRIC[metric] + " (cumulative)", {
      tooltip: { trigger: "axis", confine: true, valueFormatter: (v) => fmt(v) },
      xAxis: axis(METRIC[metric] + " (ms)"),
      yAxis: axis("% of " + (metric === "itl" ? "gaps" : "requests"), { min: 0, max: 100, nameGap: 36 }),
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" },
        { type: "inside", yAxisIndex: 0, filterMode: "none", zoomOnMouseWheel: "shift", moveOnMouseMove: "shift" }],
      series: series,
    });
    if (sampledFrom) {
      subtitle(option, "curves drawn from a random " + sampledFrom.toLocaleString("en") +
        " values of each run; the marked percentiles from all");
    }
    draw(el, option);
  }

  /* ---- timelines --------------------------------------------------------------------- */

  function zip(xs, ys) { return xs.map((x, i) => [x, num(ys[i])]); }

  function warmupArea(tl) {
    if (num(tl.warmup_s) === null || tl.warmup_s <= 0) return undefined;
    return { silent: true, itemStyle: { color: "rgba(148,152,160,0.15)" },
      label: { formatter: "warm-up", position: "insideTop", fontSize: 10, color: "#59636e" },
      data: [[{ xAxis: 0 }, { xAxis: tl.warmup_s }]] };
  }

  function timelineChart(el) {
    const run = RUNS.get(el.dataset.run);
    const tl = run.timeline;
    const kind = el.dataset.kind;
    const x = axis("seconds from the first request", { min: 0 });
    let option = null;
    let why = null;
    const line = (name, data, extra) => Object.assign({ name: name, type: "line", data: data,
      showSymbol: false, connectNulls: false, lineStyle: { width: 1.5 } }, extra || {});
    if (kind === "tokens") {
      const series = [line("output tokens/s (client, by finish)", zip(tl.t_s, tl.output_throughput), { step: "start" })];
      if (tl.server.generation_tokens_per_s) {
        const g = tl.server.generation_tokens_per_s;
        series.push(line("generation tokens/s (server)", zip(g.t_s, g.y)));
      }
      option = { title: "Tokens per second", yAxis: axis("tokens/s", { nameGap: 44 }), series: series };
    } else if (kind === "server") {
      const s = tl.server;
      if (s.empty) { why = s.empty; } else {
        const series = [];
        if (s.running) series.push(line("running", zip(s.running.t_s, s.running.y)));
        if (s.waiting) series.push(line("waiting", zip(s.waiting.t_s, s.waiting.y)));
        if (s.kv_cache_percent) series.push(line("KV cache use %", zip(s.kv_cache_percent.t_s, s.kv_cache_percent.y), { yAxisIndex: 1, lineStyle: { width: 1.5, type: "dashed" } }));
        if (!series.length) why = "the server's samples carry no queue or KV-cache gauges";
        option = { title: "Server: requests running and waiting, KV cache",
          yAxis: [axis("requests", { nameGap: 36, minInterval: 1 }), axis("KV cache %", { min: 0, max: 100, nameGap: 36, splitLine: { show: false } })],
          series: series };
      }
    } else if (kind === "ttft") {
      option = { title: "TTFT of the requests sent in each " + tl.interval_s + " s",
        yAxis: axis("TTFT (ms)", { nameGap: 44 }),
        series: [line("p50", zip(tl.t_s, tl.p50_ttft_ms)), line("p95", zip(tl.t_s, tl.p95_ttft_ms))] };
    } else if (kind === "lag") {
      const lag = tl.schedule_lag_ms;
      if (!lag) { why = "closed-loop traffic: users send when ready, so there is no schedule to lag"; } else {
        option = { title: "Schedule lag (send time − intended time)", yAxis: axis("lag (ms)", { nameGap: 44 }),
          series: [line("p50", zip(tl.t_s, lag.p50)), line("p99", zip(tl.t_s, lag.p99)),
            line("max", zip(tl.t_s, lag.max), { lineStyle: { width: 1, type: "dotted" } })] };
      }
    } else if (kind === "loadgen") {
      const lg = tl.loadgen;
      if (lg.empty) { why = lg.empty; } else {
        const series = Object.entries(lg.workers).map((e) => line(e[0] || "load generator", zip(e[1].t_s, e[1].y)));
        series.push({ name: "saturated", type: "line", data: [], color: SLO_COLOR, markLine: {
          symbol: "none", silent: true, data: [{ yAxis: lg.saturated_cpu_percent, lineStyle: { color: SLO_COLOR },
            label: { formatter: "saturated above " + lg.saturated_cpu_percent + " %", position: "insideEndTop", fontSize: 10, color: SLO_COLOR } }] } });
        option = { title: "Load generator CPU per process", series: series,
          yAxis: axis("CPU %", { min: 0, nameGap: 36, max: reach(series, [lg.saturated_cpu_percent]) }) };
      }
    }
    if (why) return empty(el, why);
    const area = warmupArea(tl);
    if (area && option.series.length) option.series[0].markArea = area;
    draw(el, base(option.title, { xAxis: x, yAxis: option.yAxis, series: option.series,
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }] }), "timeline-" + run.id);
  }

  /* ---- sweeps ------------------------------------------------------------------------ */

  function sweepChart(el) {
    const sweep = DATA.sweeps[Number(el.dataset.sweep)];
    const rows = sweep.rows;
    const byLoad = sweep.x === "offered_load" && sweep.unit && rows.every((r) => num(r.offered_load) !== null);
    const xOf = (r) => (byLoad ? r.offered_load : String(r.rung));
    const chosen = (r) => sweep.recommendation && r.rung && sweep.recommendation.includes(String(r.rung) + " ");
    // Grey: did not complete; red: missed the SLO, ran out of memory or preempted;
    // green: the recommended rung.
    const tone = (r) => (r.state && r.state !== "completed" ? "#c9ced4"
      : r.slo_met === false || r.oom || num(r.num_preemptions) > 0 ? "#c4321f"
        : chosen(r) ? "#2a7d3f" : COLORS[0]);
    const bars = rows.map((r) => ({ value: [xOf(r), num(r.request_throughput)], itemStyle: { color: tone(r) } }));
    const series = [{ name: "req/s", type: byLoad ? "line" : "bar", data: bars, symbolSize: 8, barMaxWidth: 48 }];
    [["p95_ttft_ms", "p95 TTFT (ms)"], ["p95_itl_ms", "p95 ITL (ms)"], ["p95_tpot_ms", "p95 TPOT (ms)"]].forEach((m, k) => {
      if (!rows.some((r) => num(r[m[0]]) !== null)) return;
      series.push({ name: m[1], type: "line", yAxisIndex: 1, color: color(k + 1), symbolSize: 6,
        data: rows.map((r) => [xOf(r), num(r[m[0]])]) });
    });
    const option = base("Rungs: throughput and latency", {
      xAxis: byLoad ? axis("offered load" + (sweep.unit ? " (" + sweep.unit + ")" : ""))
        : { type: "category", name: "rung", nameLocation: "middle", nameGap: 28, axisLabel: { interval: 0, rotate: rows.length > 5 ? 20 : 0, fontSize: 10 } },
      yAxis: [axis("req/s", { nameGap: 36 }), axis("ms", { nameGap: 36, splitLine: { show: false } })],
      series: series,
    });
    draw(el, subtitle(option, "grey: did not complete · red: missed the SLO, ran out of memory or preempted · green: recommended"));
  }

  /* ---- comparisons ------------------------------------------------------------------- */

  function compareChart(el) {
    const cmp = DATA.comparisons[Number(el.dataset.comparison)];
    const runId = el.dataset.run;
    const rows = cmp.rows.filter((r) => r.run_id === runId && num(r.diff_pct) !== null);
    if (!rows.length) return empty(el, "no comparable metric");
    const metrics = rows.map((r) => r.metric);
    const tone = (r) => (r.better === "better" ? "#2a7d3f" : r.better === "worse" ? "#c4321f" : "#59636e");
    const points = rows.map((r, i) => ({ value: [num(r.diff_pct), i], row: r, itemStyle: { color: tone(r) } }));
    const bars = rows.map((r, i) => ({ value: [i, num(r.ci_low_pct), num(r.ci_high_pct)], row: r }))
      .filter((b) => b.value[1] !== null && b.value[2] !== null);
    const tip = (p) => { const r = p.data.row; return r.verdict + "<br>" + r.metric + ": " + fmt(r.baseline_value) + " → " + fmt(r.value); };
    draw(el, base(RUNS.get(runId).label + " against " + RUNS.get(cmp.baseline_id).label, {
      legend: { show: false },
      grid: { left: 16, right: 32, top: 40, bottom: 28, containLabel: true },
      tooltip: { trigger: "item", confine: true, formatter: tip },
      xAxis: axis("difference from the baseline (%), 95 % interval"),
      yAxis: { type: "category", data: metrics, inverse: true, axisLabel: { fontSize: 10 } },
      dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],
      series: [
        { name: "interval", type: "custom", data: bars, z: 2, encode: { x: [1, 2], y: 0 },
          renderItem: (params, api) => {
            const lo = api.coord([api.value(1), api.value(0)]);
            const hi = api.coord([api.value(2), api.value(0)]);
            const h = api.size([0, 1])[1] * 0.3;
            const style = { stroke: tone(bars[params.dataIndex].row), lineWidth: 1.6 };
            return { type: "group", children: [
              { type: "line", shape: { x1: lo[0], y1: lo[1], x2: hi[0], y2: hi[1] }, style: style },
              { type: "line", shape: { x1: lo[0], y1: lo[1] - h / 2, x2: lo[0], y2: lo[1] + h / 2 }, style: style },
              { type: "line", shape: { x1: hi[0], y1: hi[1] - h / 2, x2: hi[0], y2: hi[1] + h / 2 }, style: style }] };
          } },
        { name: "difference", type: "scatter", data: points, symbolSize: 9, z: 3,
          markLine: { symbol: "none", silent: true, data: [{ xAxis: 0 }], lineStyle: { color: "#1f2328", type: "solid" }, label: { show: false } } },
      ],
    }));
  }

  /* ---- wiring ------------------------------------------------------------------------ */

  const KINDS = { throughput: throughputChart, latency: latencyChart, cdf: cdfChart,
    timeline: timelineChart, sweep: sweepChart, compare: compareChart };
  document.querySelectorAll(".chart[data-chart]").forEach((el) => {
    try {
      KINDS[el.dataset.chart](el);
    } catch (err) {
      empty(el, "this chart could not be drawn: " + err.message);
      throw err; // surfaces in the console, where the browser test looks
    }
    if (el.dataset.logGroup) (logGroups[el.dataset.logGroup] = logGroups[el.dataset.logGroup] || []).push(el);
  });
  new Set(charts.map((c) => c.group).filter(Boolean)).forEach((g) => echarts.connect(g));

  // One button per section switches its latency axes between linear and log.
  document.querySelectorAll("[data-toggle-log]").forEach((button) => {
    button.addEventListener("click", () => {
      const els = logGroups[button.dataset.toggleLog] || [];
      els.forEach((el) => {
        const chart = el.vprofChart;
        if (!chart) return;
        const which = el.dataset.chart === "cdf" ? "xAxis" : "yAxis";
        const current = chart.getOption()[which][0].type;
        chart.setOption({ [which]: [{ type: current === "log" ? "value" : "log" }] });
      });
    });
  });

  function resizeAll() { charts.forEach((c) => c.resize()); }
  window.addEventListener("resize", resizeAll);
  // Print: open every <details>, drop the zoom buttons, redraw the charts at the paper's size.
  const printing = window.matchMedia("print");
  function media() {
    if (printing.matches) document.querySelectorAll("details").forEach((d) => { d.open = true; });
    charts.forEach((c) => { c.setOption({ toolbox: { show: !printing.matches } }); c.resize(); });
  }
  window.addEventListener("beforeprint", () => {
    document.querySelectorAll("details").forEach((d) => { d.open = true; });
    resizeAll();
  });
  window.addEventListener("afterprint", resizeAll);
  printing.addEventListener("change", media);
  document.documentElement.dataset.chartsDrawn = String(charts.length);
})();

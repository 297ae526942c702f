// kitchen report: draws the metric plots as inline SVG and the per-step sample browsers from the
// JSON embedded in the page. Run-provided text is only ever set through textContent.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d",
    "#475569", "#ea580c", "#4f46e5", "#0d9488"];
  const W = 440, H = 240, M = { l: 54, r: 14, t: 10, b: 34 };

  function svg(tag, attrs, parent) {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    if (parent) parent.appendChild(node);
    return node;
  }

  function el(tag, cls, text, parent) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== null && text !== undefined) node.textContent = String(text);
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(v) {
    if (v === null || v === undefined) return "–";
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }

  function ticks(lo, hi, count, integer) {
    const span = hi - lo;
    const raw = span / count;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    let step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
    if (integer) step = Math.max(1, Math.round(step));
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
    return out;
  }

  // Series colour by name, so "eval all" gets the colour of "all" in the same chart.
  function colorer(chart) {
    const names = [];
    return function (name) {
      const base = name.startsWith("eval ") ? name.slice(5) : name;
      if (!names.includes(base)) names.push(base);
      return COLORS[names.indexOf(base) % COLORS.length];
    };
  }

  function stackedTops(chart) {
    const base = chart.series.length ? chart.series[0].x.map(() => 0) : [];
    return chart.series.map((s) => {
      const lower = base.slice();
      s.y.forEach((v, i) => { base[i] += v; });
      return { lower: lower, upper: base.slice() };
    });
  }

  function domain(chart, layers) {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    chart.series.forEach((s, k) => {
      s.x.forEach((x) => { x0 = Math.min(x0, x); x1 = Math.max(x1, x); });
      const ys = layers ? layers[k].upper : s.y;
      ys.forEach((y) => { y0 = Math.min(y0, y); y1 = Math.max(y1, y); });
    });
    if (layers) y0 = 0;
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
    else if (!layers) { const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad; }
    else y1 += (y1 - y0) * 0.04;
    return { x0: x0, x1: x1, y0: y0, y1: y1 };
  }

  function nearest(xs, x) {
    let lo = 0, hi = xs.length - 1;
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid; else hi = mid; }
    return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
  }

  function drawChart(figure, chart) {
    const series = chart.series.filter((s) => s.x.length);
    const plot = figure.querySelector(".plot");
    if (!series.length) { el("p", "muted", "no numeric values", plot); return; }
    chart = Object.assign({}, chart, { series: series });
    const layers = chart.stacked ? stackedTops(chart) : null;
    const d = domain(chart, layers);
    const sx = (x) => M.l + ((x - d.x0) / (d.x1 - d.x0)) * (W - M.l - M.r);
    const sy = (y) => H - M.b - ((y - d.y0) / (d.y1 - d.y0)) * (H - M.t - M.b);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart-svg", role: "img", "aria-label": chart.title }, plot);
    ticks(d.y0, d.y1, 5, false).forEach((t) => {
      svg("line", { x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t), class: "grid-line" }, root);
      svg("text", { x: M.l - 6, y: sy(t) + 3.5, "text-anchor": "end" }, root).textContent = fmt(t);
    });
    ticks(d.x0, d.x1, 6, true).forEach((t) => {
      svg("line", { x1: sx(t), x2: sx(t), y1: H - M.b, y2: H - M.b + 4, class: "axis" }, root);
      svg("text", { x: sx(t), y: H - M.b + 15, "text-anchor": "middle" }, root).textContent = String(t);
    });
    svg("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, class: "axis" }, root);
    svg("text", { x: (M.l + W - M.r) / 2, y: H - 3, "text-anchor": "middle" }, root).textContent = "step";
    const color = colorer(chart);
    const legend = figure.querySelector(".legend");
    chart.series.forEach((s) => color(s.name));
    // Drawn last to first, so the first series (train, or tag `all`) stays on top where lines coincide.
    chart.series.slice().reverse().forEach((s, r) => {
      const k = chart.series.length - 1 - r;
      const c = color(s.name);
      const item = el("span");
      legend.prepend(item);
      el("i", layers ? "area" : s.role, null, item).style[layers ? "background" : "borderColor"] = c;
      item.appendChild(document.createTextNode(s.name));
      if (layers) {
        const top = s.x.map((x, i) => `${sx(x).toFixed(1)},${sy(layers[k].upper[i]).toFixed(1)}`);
        const bottom = s.x.map((x, i) => `${sx(x).toFixed(1)},${sy(layers[k].lower[i]).toFixed(1)}`).reverse();
        svg("polygon", { points: top.concat(bottom).join(" "), fill: c, "fill-opacity": 0.75, stroke: c, "stroke-width": 0.5 }, root);
        return;
      }
      const path = s.x.map((x, i) => `${i ? "L" : "M"}${sx(x).toFixed(1)} ${sy(s.y[i]).toFixed(1)}`).join("");
      const attrs = { d: path, fill: "none", stroke: c, "stroke-width": 1.6, "stroke-linejoin": "round" };
      if (s.role === "eval") attrs["stroke-dasharray"] = "5 3";
      svg("path", attrs, root);
      if (s.x.length <= 60) {
        s.x.forEach((x, i) => svg("circle", { cx: sx(x), cy: sy(s.y[i]), r: s.x.length === 1 ? 3 : 2.2, fill: c }, root));
      }
    });
    hover(figure, root, chart, layers, d, sx, color);
  }

  function hover(figure, root, chart, layers, d, sx, color) {
    const guide = svg("line", { y1: M.t, y2: H - M.b, class: "guide", visibility: "hidden" }, root);
    const tip = el("div", "tooltip", null, figure);
    root.addEventListener("mousemove", (event) => {
      const box = root.getBoundingClientRect();
      const vx = ((event.clientX - box.left) / box.width) * W;
      const step = Math.round(d.x0 + ((vx - M.l) / (W - M.l - M.r)) * (d.x1 - d.x0));
      tip.replaceChildren();
      let shown = null;
      chart.series.forEach((s) => {
        const i = nearest(s.x, step);
        if (shown === null) shown = s.x[i];
        const row = el("div", null, null, tip);
        el("i", null, null, row).style.background = color(s.name);
        const at = s.x[i] !== step ? ` (step ${s.x[i]})` : "";
        row.appendChild(document.createTextNode(`${s.name}: ${fmt(s.y[i])}${at}`));
      });
      if (layers) {
        const total = layers[layers.length - 1].upper[nearest(chart.series[0].x, step)];
        el("div", null, `total: ${fmt(total)}`, tip);
      }
      tip.prepend(el("b", null, `step ${step}`));
      guide.setAttribute("x1", sx(shown)); guide.setAttribute("x2", sx(shown));
      guide.setAttribute("visibility", "visible");
      tip.style.display = "block";
      const fx = event.clientX - figure.getBoundingClientRect().left;
      const fy = event.clientY - figure.getBoundingClientRect().top;
      tip.style.left = `${fx + 14 + tip.offsetWidth > figure.clientWidth ? fx - tip.offsetWidth - 14 : fx + 14}px`;
      tip.style.top = `${Math.max(4, fy - 10)}px`;
    });
    root.addEventListener("mouseleave", () => { tip.style.display = "none"; guide.setAttribute("visibility", "hidden"); });
  }

  function rewardClass(v) { return v === null ? "" : v > 0 ? "good" : "poor"; }

  function renderTranscripts(step) {
    const out = document.createDocumentFragment();
    step.groups.forEach((group) => {
      const box = el("div", "group", null, out);
      const head = el("div", "group-head", null, box);
      el("strong", null, `group ${group.group}`, head);
      group.tags.forEach((tag) => el("span", "tag", tag, head));
      const rewards = group.trajectories.map((t) => t.total_reward).filter((r) => r !== null);
      const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
      el("span", "meta", `sampler step ${group.sampler_step} · ${group.trajectories.length} trajectories · mean reward ${fmt(mean)}`, head);
      if (group.prompt !== null) el("div", "text obs", group.prompt, box);
      const hasAdvantage = group.trajectories.some((t) => t.advantage !== null);
      const table = el("table", null, null, box);
      const header = el("tr", null, null, table);
      ["#", "reward"].concat(hasAdvantage ? ["advantage"] : [], ["turns"]).forEach((h) => el("th", null, h, header));
      group.trajectories.forEach((traj) => {
        const row = el("tr", null, null, table);
        el("td", "num", traj.trajectory, row);
        el("td", `num ${rewardClass(traj.total_reward)}`, fmt(traj.total_reward), row);
        if (hasAdvantage) el("td", "num", fmt(traj.advantage), row);
        const cell = el("td", null, null, row);
        traj.turns.forEach((turn) => {
          // A later turn shows only what the env added (tool results, errors), apart from the model's text.
          if (turn.env_text !== null && turn.env_text !== undefined) el("div", "text env", turn.env_text, cell);
          else if (turn.observation !== null) el("div", "text obs", turn.observation, cell);
          el("div", "text act", turn.action, cell);
          (turn.tool_calls || []).forEach((call) => el("div", "text call", `tool call ${call.name}(${call.arguments})`, cell));
          const metrics = Object.entries(turn.metrics).map(([k, v]) => `${k}=${fmt(v)}`).join(" ");
          el("div", "meta", `stop: ${turn.stop_reason} · reward ${fmt(turn.reward)}${metrics ? " · " + metrics : ""}`, cell);
        });
      });
    });
    return out;
  }

  function renderPreferences(step) {
    const out = document.createDocumentFragment();
    const table = el("table", null, null, out);
    const header = el("tr", null, null, table);
    ["prompt", "chosen", "rejected", "chosen reward", "rejected reward", "margin"].forEach((h) => el("th", null, h, header));
    step.examples.forEach((ex) => {
      const row = el("tr", null, null, table);
      el("div", "text obs", ex.prompt, el("td", null, null, row));
      el("div", "text act", ex.chosen, el("td", null, null, row));
      el("div", "text rejected", ex.rejected, el("td", null, null, row));
      el("td", "num", fmt(ex.chosen_reward), row);
      el("td", "num", fmt(ex.rejected_reward), row);
      el("td", `num ${rewardClass(ex.margin)}`, fmt(ex.margin), row);
    });
    return out;
  }

  function browser(root, steps, render) {
    const range = root.querySelector("input[type=range]");
    const select = root.querySelector("select");
    const body = root.querySelector(".browser-body");
    if (!range || !steps.length) return;
    steps.forEach((s, i) => { const option = el("option", null, `step ${s.step}`, select); option.value = String(i); });
    range.max = String(steps.length - 1);
    let current = 0;
    function show(i) {
      current = Math.min(steps.length - 1, Math.max(0, i));
      range.value = String(current);
      select.value = String(current);
      body.replaceChildren(render(steps[current]));
    }
    range.addEventListener("input", () => show(Number(range.value)));
    select.addEventListener("change", () => show(Number(select.value)));
    root.querySelectorAll("button[data-move]").forEach((b) => b.addEventListener("click", () => show(current + Number(b.dataset.move))));
    show(steps.length - 1);
  }

  document.querySelectorAll("figure.chart").forEach((figure) => drawChart(figure, DATA.charts[Number(figure.dataset.chart)]));
  const renderers = { transcripts: renderTranscripts, preferences: renderPreferences };
  document.querySelectorAll("[data-browser]").forEach((root) => {
    const kind = root.dataset.browser;
    browser(root, DATA.browsers[kind] || [], renderers[kind]);
  });
  document.body.dataset.rendered = "true";
})();

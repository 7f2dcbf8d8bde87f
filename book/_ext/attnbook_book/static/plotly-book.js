// Plotly figures in the book, for every reader: drawn when they come near the screen, the colour mode, the
// phone layout, a text alternative and the keyboard. The build writes window.attnbookStyle
// (attnbook.style.PLOTLY_DARK and PLOTLY_PHONE) in front of this file.
//
// - Drawn when needed: the page holds, for each figure, an empty box of the figure's height whose data-src
//   names a script with the figure (see plotly_renderer.py). plotly.js (the build's partial bundle) and that
//   script load only when the box comes within a screen's height of the screen, so the text shows first and
//   a reader who never scrolls to a figure never pays for it. attnbookPlotly.drawAll() draws every figure of
//   the page (the PDF edition, printing, the tests) and resolves when they are drawn.
//
// - Colour mode: in dark mode the layout takes the dark colours; switching back restores the figure's own.
// - Phone: when the figure's column is narrower than PHONE.width, the legend goes below the plot, the
//   margins shrink to what the labels need, axes get fewer ticks, colour bars get thin, and titles and
//   annotations that do not fit are wrapped; a wide column gets the figure's own layout back. Each change
//   remembers the value it replaced, so undoing it keeps what a slider has changed since.
// - Screen readers: the figure is a labelled figure whose description (the element after it) is written
//   from its data: the kind of chart, title, axes and ranges, each trace's values that matter, the slider's
//   current step. It is written again whenever the figure changes.
// - Keyboard: each slider is a focusable ARIA slider (arrows move one step, Page Up/Down a tenth, Home and
//   End to the ends); each menu button is focusable (Enter or Space presses it; on a dropdown's header the
//   arrows choose the previous or next entry). Focus is drawn by the book's stylesheet.
(function () {
  "use strict";
  var STYLE = window.attnbookStyle || {};
  var DARK = STYLE.dark, PHONE = STYLE.phone;

  function isDark() { return document.documentElement.dataset.theme === "dark"; }
  function isPhone(gd) { return PHONE && gd.clientWidth > 0 && gd.clientWidth < PHONE.width; }

  function get(obj, path) {
    var parts = path.replace(/\[(\d+)\]/g, ".$1").split(".");
    for (var i = 0; i < parts.length; i++) { if (obj == null) return null; obj = obj[parts[i]]; }
    return obj === undefined ? null : obj;
  }

  function axisNames(gd) {
    return Object.keys(gd._fullLayout || {}).filter(function (k) { return /^[xy]axis[0-9]*$/.test(k); });
  }

  // --- the layout changes of each mode ------------------------------------------------------------------
  function darkChanges(gd) {
    var u = {paper_bgcolor: DARK.paper_bgcolor, plot_bgcolor: DARK.plot_bgcolor, "font.color": DARK.font_color,
             "legend.bgcolor": DARK.legend_bgcolor};
    axisNames(gd).forEach(function (k) { for (var p in DARK.axis) u[k + "." + p] = DARK.axis[p]; });
    (gd.layout.sliders || []).forEach(function (s, i) {
      for (var p in DARK.slider) u["sliders[" + i + "]." + p] = DARK.slider[p];
      u["sliders[" + i + "].font.color"] = DARK.font_color;
      u["sliders[" + i + "].currentvalue.font.color"] = DARK.font_color;
    });
    return u;
  }

  function phoneChanges(gd) {
    var full = gd._fullLayout, u = {"font.size": PHONE.font_size};
    Object.keys(PHONE.margin).forEach(function (side) {
      u["margin." + side] = Math.min(PHONE.margin[side], full.margin[side]);
    });
    if (full.title && full.title.text) {
      u["title.font.size"] = PHONE.title_size;
      u["title.automargin"] = true;
      u["title.y"] = 1;
      u["title.yanchor"] = "top";
    }
    if (gd.layout.width && gd.layout.width > gd.clientWidth) { // a fixed width wider than the column: fit it
      u.width = gd.clientWidth;
      u.height = Math.max(260, Math.round((full.height * gd.clientWidth) / gd.layout.width));
    }
    if (full.showlegend) {
      Object.keys(PHONE.legend).forEach(function (k) { u["legend." + k] = PHONE.legend[k]; });
      u["legend.font.size"] = PHONE.font_size;
    }
    axisNames(gd).forEach(function (k) {
      var ax = full[k];
      u[k + ".automargin"] = true;
      u[k + ".tickfont.size"] = ax.type === "category" && k[0] === "y" ? PHONE.font_size - 1 : PHONE.font_size;
      if (ax.title && ax.title.text) u[k + ".title.standoff"] = PHONE.title_standoff;
      if (ax.tickmode === "array") return; // the figure chose its ticks
      var decades = Math.abs(ax.range[1] - ax.range[0]);
      if (ax.type === "log" && decades >= 2) { // whole powers of ten, at most about nticks of them
        u[k + ".dtick"] = Math.max(PHONE.log_dtick, Math.ceil(decades / PHONE.nticks));
        u[k + ".tick0"] = 0;
        u[k + ".tickmode"] = "linear"; // what plotly sets with a dtick: named, so that it is undone too
      } else if (ax.type === "log") { // less than two decades: labels at 1, 2 and 5 times a power of ten
        u[k + ".dtick"] = "D2";
        u[k + ".tickmode"] = "linear";
      } else if (ax.type === "linear" || ax.type === "date") {
        u[k + ".nticks"] = PHONE.nticks;
      }
    });
    (full.annotations || []).forEach(function (a, i) { u["annotations[" + i + "].font.size"] = PHONE.annotation_size; });
    return u;
  }

  // Colour bars: thin, close to the plot, with small labels.
  function phoneTraceChanges(gd) {
    var traces = [];
    gd._fullData.forEach(function (t, i) { if (t.showscale && t.colorbar) traces.push(t.index === undefined ? i : t.index); });
    return {traces: traces, update: {"colorbar.thickness": PHONE.colorbar_thickness, "colorbar.xpad": PHONE.colorbar_xpad,
                                     "colorbar.tickfont.size": PHONE.font_size, "colorbar.title.font.size": PHONE.font_size,
                                     "colorbar.title.side": "right"}};
  }

  // --- applying and undoing them ------------------------------------------------------------------------
  // Axes that fit their range to the data fit it again at the new size (a range padded for markers and
  // labels depends on the size in pixels). Plotly keeps autorange "reversed" as autorange true with a
  // reversed range: such an axis is fitted again reversed (a heatmap's first row stays on top).
  function autoranges(gd) {
    var u = {};
    axisNames(gd).forEach(function (k) {
      var axis = gd._fullLayout[k];
      if (axis.autorange === true) {
        u[k + ".autorange"] = axis.range && axis.range[0] > axis.range[1] ? "reversed" : true;
        u[k + ".range"] = null;
      }
    });
    return u;
  }

  function want(gd) { return (isPhone(gd) ? "phone" : "desktop") + "-" + (isDark() ? "dark" : "light"); }

  function undo(gd) {
    var saved = gd._attnbookSaved;
    gd._attnbookSaved = null;
    if (!saved) return Promise.resolve();
    unwrapTexts(gd, saved);
    var p = Plotly.relayout(gd, Object.assign(autoranges(gd), saved.layout));
    if (saved.traces.length) {
      p = p.then(function () { return Plotly.restyle(gd, saved.data, saved.traces); });
    }
    return p.then(function () {
      gd.style.height = saved.divHeight;
      // once more: plotly pads a range for the annotations in it with their size as last drawn
      return Plotly.relayout(gd, autoranges(gd));
    });
  }

  function apply(gd) {
    if (!gd._fullLayout || gd._attnbookBusy) return Promise.resolve();
    var mode = want(gd);
    if (gd.dataset.attnbookMode === mode) return Promise.resolve();
    gd._attnbookBusy = true;
    // the figure takes its new size first (plotly's own resize may not have run yet), then the changes
    var resized = gd.layout.autosize === false ? Promise.resolve() : Promise.resolve(Plotly.Plots.resize(gd));
    return resized.then(function () { return undo(gd); }).then(function () {
      var layout = {}, traces = {traces: [], update: {}}, phone = mode.indexOf("phone") === 0;
      if (phone) { layout = phoneChanges(gd); traces = phoneTraceChanges(gd); }
      if (mode.slice(-4) === "dark") Object.assign(layout, darkChanges(gd));
      var saved = {layout: {}, data: {}, traces: traces.traces, divHeight: gd.style.height, wrapped: {}};
      Object.keys(layout).forEach(function (k) { saved.layout[k] = get(gd.layout, k); });
      if (phone) ["width", "height", "autosize"].forEach(function (k) { if (!(k in saved.layout)) saved.layout[k] = get(gd.layout, k); });
      Object.keys(traces.update).forEach(function (k) {
        saved.data[k] = traces.traces.map(function (i) { return get(gd.data[i], k); });
      });
      gd._attnbookSaved = saved;
      if (layout.height) gd.style.height = layout.height + "px";
      var p = Plotly.relayout(gd, Object.assign(autoranges(gd), layout));
      if (traces.traces.length) p = p.then(function () { return Plotly.restyle(gd, traces.update, traces.traces); });
      if (phone) p = p.then(function () { return makeRoom(gd); });
      return p.then(function () { return Plotly.relayout(gd, autoranges(gd)); });
    }).then(function () {
      gd.dataset.attnbookMode = mode;
      gd.dataset.attnbookTheme = mode.slice(-4) === "dark" ? "dark" : "light";
    }).finally(function () {
      gd._attnbookBusy = false;
      if (want(gd) !== gd.dataset.attnbookMode) return apply(gd); // the mode changed meanwhile
      return afterPlot(gd);
    });
  }

  // On a phone the legend below the plot takes height from it: give the figure that height back.
  function makeRoom(gd) {
    var legend = gd.querySelector("g.legend");
    if (!legend || !gd._fullLayout.showlegend) return Promise.resolve();
    var extra = Math.ceil(legend.getBoundingClientRect().height) + 8, height = gd._fullLayout.height + extra;
    remember(gd, ["height", "width", "autosize"]); // plotly writes the width too when it is given a height
    gd.style.height = height + "px";
    return Plotly.relayout(gd, {height: height});
  }

  function remember(gd, keys) { // keep what these layout values were before the book changed them
    var saved = gd._attnbookSaved.layout;
    keys.forEach(function (k) { if (!(k in saved)) saved[k] = get(gd.layout, k); });
  }

  // --- titles and annotations that do not fit (phone only) ---------------------------------------------
  function plain(s) { return String(s == null ? "" : s); }

  function wrap(text, perLine) { // at spaces, and inside a long word after a hyphen, colon or slash
    var pieces = []; // [text, whether it continues the word before it]
    text.split(" ").forEach(function (w) {
      var more = false;
      while (w.length > perLine && /[-:/_]/.test(w.slice(1, -1))) {
        var cut = -1, re = /[-:/_]/g, m;
        while ((m = re.exec(w)) && m.index < w.length - 1) { if (m.index < perLine || cut < 0) cut = m.index; }
        pieces.push([w.slice(0, cut + 1), more]);
        w = w.slice(cut + 1);
        more = true;
      }
      pieces.push([w, more]);
    });
    var lines = [], line = "";
    pieces.forEach(function (p) {
      var next = line ? line + (p[1] ? "" : " ") + p[0] : p[0];
      if (line && next.length > perLine) { lines.push(line); line = p[0]; } else line = next;
    });
    if (line) lines.push(line);
    return lines.join("<br>");
  }

  function overlaps(a, b) {
    return Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
  }

  // Wrap what is wider than the figure or runs into a neighbour; returns the relayout it needs (or null).
  function fitTexts(gd) {
    var saved = gd._attnbookSaved, u = {}, box = gd.getBoundingClientRect(), n = 0;
    function fit(key, node, room) {
      var text = plain(get(gd.layout, key)), width = node.getBoundingClientRect().width;
      if (!text || width <= room) return;
      var lines = text.split(/<br\s*\/?>/i), longest = Math.max.apply(null, lines.map(function (l) { return l.length; }));
      var perLine = Math.max(6, Math.floor((room / width) * longest));
      var wrapped = lines.map(function (l) { return wrap(l, perLine); }).join("<br>");
      if (wrapped === text) return;
      var before = saved.wrapped[key];
      saved.wrapped[key] = {text: before && before.wrapped === text ? before.text : text, wrapped: wrapped};
      u[key] = wrapped;
      n++;
    }
    var title = gd.querySelector(".g-gtitle text");
    if (title) fit("title.text", title, box.width - 16);
    var notes = Array.prototype.slice.call(gd.querySelectorAll("g.annotation"));
    var boxes = notes.map(function (g) { return g.getBoundingClientRect(); });
    notes.forEach(function (g, i) {
      var index = +g.getAttribute("data-index"), b = boxes[i], room = box.right - 4 - Math.max(b.left, box.left + 4);
      room = Math.min(room, box.width - 8);
      boxes.forEach(function (o, j) { // a neighbour on the same line: half the distance between their centres
        if (j !== i && overlaps(b, o)) room = Math.min(room, Math.abs((o.left + o.right) / 2 - (b.left + b.right) / 2) - 6);
      });
      if (room > 20) fit("annotations[" + index + "].text", g.querySelector("text") || g, room);
    });
    // a label that still runs into an earlier one: an arrow's label to the other side of the point it marks,
    // any other label just below the one it meets
    var notesLayout = gd._fullLayout.annotations || [];
    notes.forEach(function (g, i) {
      var index = +g.getAttribute("data-index"), a = notesLayout[index];
      var arrow = a && a.showarrow && a.ayref === "pixel", key = "annotations[" + index + "]." + (arrow ? "ay" : "yshift");
      if (n || !a || key in saved.layout) return;
      var hit = boxes.filter(function (o, j) { return j < i && overlaps(boxes[i], o); })[0];
      if (!hit) return;
      saved.layout[key] = get(gd.layout, key);
      u[key] = arrow ? (a.ay ? -a.ay : 30) : (a.yshift || 0) - Math.ceil(hit.bottom - boxes[i].top + 2);
      n++;
    });
    if (!n && title) {
      // a title of several lines starts above the figure: move it down into view
      var t = title.getBoundingClientRect(), pad = gd._fullLayout.title.pad.t || 0;
      if (t.top < box.top + 2 && pad < 120) {
        if (!("title.pad.t" in saved.layout)) saved.layout["title.pad.t"] = get(gd.layout, "title.pad.t");
        u["title.pad.t"] = Math.ceil(pad + box.top + 4 - t.top);
        n++;
      }
      // annotations over the plot (subplot titles) or the plot itself reaching up into the title: push it down
      var plot = gd.querySelector(".draglayer .nsewdrag"), down = 0;
      boxes.concat(plot ? [plot.getBoundingClientRect()] : []).forEach(function (b) {
        if (overlaps(t, b)) down = Math.max(down, t.bottom - b.top);
      });
      var top = gd._fullLayout.margin.t;
      if (!n && down > 1 && top < 240) { u["margin.t"] = Math.ceil(top + down + 4); n++; }
    }
    return n ? u : null;
  }

  function unwrapTexts(gd, saved) { // what was wrapped and not changed since goes back to one line
    Object.keys(saved.wrapped).forEach(function (k) {
      if (get(gd.layout, k) === saved.wrapped[k].wrapped) saved.layout[k] = saved.wrapped[k].text;
    });
  }

  // --- the text alternative ----------------------------------------------------------------------------
  function clean(s) {
    return plain(s).replace(/<br[^>]*>/gi, " ").replace(/<[^>]+>/g, "").replace(/\u200b/g, "").replace(/\s+/g, " ").trim();
  }

  function num(v) {
    if (typeof v !== "number") return clean(v);
    if (!isFinite(v)) return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2).replace("e+", "e");
    if (Number.isInteger(v)) return String(v);
    return String(+v.toPrecision(3));
  }

  function list(values) { return Array.prototype.slice.call(values || []); }

  function extremes(values) {
    var lo = -1, hi = -1;
    values.forEach(function (v, i) {
      if (typeof v !== "number" || !isFinite(v)) return;
      if (lo < 0 || v < values[lo]) lo = i;
      if (hi < 0 || v > values[hi]) hi = i;
    });
    return {lo: lo, hi: hi};
  }

  function kind(t) {
    if (t.type === "heatmap") return "heatmap";
    if (t.type === "bar") return "bar chart";
    if (t.type === "image") return "image";
    if (t.type === "scatter" || t.type === "scattergl") return /lines/.test(t.mode || "") ? "line chart" : "scatter plot";
    return t.type + " chart";
  }

  function titleOf(layout) { // the text of a title as the figure gives it (a string or {text: ...}), else ""
    var t = layout && layout.title;
    return clean(t && typeof t === "object" ? t.text : t);
  }

  function axisText(gd, name) {
    var ax = gd._fullLayout[name];
    if (!ax) return "";
    var title = titleOf(gd.layout[name]) || (name[0] === "x" ? "horizontal axis" : "vertical axis");
    var out = title + (ax.type === "log" ? " (log scale)" : "");
    if (ax.type === "category" || !ax.range) return out;
    var r = ax.type === "log" ? ax.range.map(function (v) { return Math.pow(10, v); }) : ax.range;
    return out + ", from " + num(Math.min(r[0], r[1])) + " to " + num(Math.max(r[0], r[1]));
  }

  function traceText(gd, t) {
    var name = clean((gd.data[t.index] || {}).name), out = name ? name + ": " : "";
    if (t.type === "heatmap") {
      var z = list(t.z).map(list), xs = list(t.x), ys = list(t.y), rows = [];
      var flat = [].concat.apply([], z), e = extremes(flat), cols = z[0] ? z[0].length : 0;
      out += z.length + " rows by " + cols + " columns, values from " + num(flat[e.lo]) + " to " + num(flat[e.hi]);
      if (z.length <= 16 && cols <= 40) {
        z.forEach(function (row, i) {
          var m = extremes(row).hi;
          if (m >= 0) rows.push((ys.length ? clean(ys[i]) : "row " + (i + 1)) + " highest at " +
                                (xs.length ? clean(xs[m]) : "column " + (m + 1)) + " (" + num(row[m]) + ")");
        });
        out += "; " + rows.join("; ");
      }
      return out + ".";
    }
    var horizontal = t.type === "bar" && t.orientation === "h";
    var xs2 = list(horizontal ? t.y : t.x), vs = list(horizontal ? t.x : t.y), n = vs.length;
    if (!n) return out + "no values.";
    if (!xs2.length) xs2 = vs.map(function (v, i) { return i; });
    if (n <= 12) {
      return out + vs.map(function (v, i) { return clean(num(xs2[i])) + ": " + num(v); }).join(", ") + ".";
    }
    var m = extremes(vs);
    return out + n + " points from " + num(xs2[0]) + " to " + num(xs2[n - 1]) + "; starts at " + num(vs[0]) +
      ", ends at " + num(vs[n - 1]) + ", lowest " + num(vs[m.lo]) + " at " + num(xs2[m.lo]) + ", highest " +
      num(vs[m.hi]) + " at " + num(xs2[m.hi]) + ".";
  }

  function describe(gd) {
    var full = gd._fullLayout, data = (gd._fullData || []).filter(function (t) { return t.visible === true; });
    var kinds = [];
    data.forEach(function (t) { if (kinds.indexOf(kind(t)) < 0) kinds.push(kind(t)); });
    var title = titleOf(gd.layout);
    var parts = ["Interactive figure" + (kinds.length ? " (" + kinds.join(", ") + ")" : "") + (title ? ": " + title : "") + "."];
    var pairs = [];
    data.forEach(function (t) {
      var pair = (t.xaxis || "x") + "," + (t.yaxis || "y");
      if (t.xaxis && pairs.indexOf(pair) < 0) pairs.push(pair);
    });
    pairs.forEach(function (pair) {
      var xy = pair.split(",").map(function (a) { return a.replace(/^([xy])/, "$1axis"); });
      parts.push("Horizontal: " + axisText(gd, xy[0]) + "; vertical: " + axisText(gd, xy[1]) + ".");
    });
    var notes = (full.annotations || []).map(function (a) { return clean(a.text); }).filter(Boolean);
    if (notes.length) parts.push("Labels: " + notes.slice(0, 12).join("; ") + ".");
    data.slice(0, 12).forEach(function (t) { parts.push(traceText(gd, t)); });
    if (data.length > 12) parts.push("And " + (data.length - 12) + " more traces.");
    (full.sliders || []).forEach(function (s) {
      var step = s.steps[s.active || 0];
      parts.push("Slider " + sliderName(s) + ": step " + ((s.active || 0) + 1) + " of " + s.steps.length +
                 (step ? ", " + clean(step.label) : "") + ".");
    });
    return parts.join(" ");
  }

  function sliderName(s) {
    return clean(s.currentvalue && s.currentvalue.prefix).replace(/[:=\s]+$/, "") || clean(s.name) || "step";
  }

  // --- the keyboard ------------------------------------------------------------------------------------
  function label(gd) {
    var title = titleOf(gd.layout);
    return title ? "Figure: " + title : "Figure";
  }

  function markControls(gd) {
    var sliders = gd._fullLayout.sliders || [];
    gd.querySelectorAll("g.slider-container").forEach(function (g, i) {
      var s = sliders[i];
      if (!s) return;
      var active = s.active || 0, step = s.steps[active];
      g.setAttribute("tabindex", "0");
      g.setAttribute("role", "slider");
      g.setAttribute("aria-label", sliderName(s));
      g.setAttribute("aria-valuemin", "1");
      g.setAttribute("aria-valuemax", String(s.steps.length));
      g.setAttribute("aria-valuenow", String(active + 1));
      g.setAttribute("aria-valuetext", step ? clean(step.label) : String(active + 1));
      g.dataset.attnbookSlider = i;
    });
    var menus = gd._fullLayout.updatemenus || [];
    gd.querySelectorAll("g.updatemenu-container").forEach(function (g, i) {
      var menu = menus[i];
      if (!menu) return;
      var header = g.querySelector("g.updatemenu-header-group");
      if (header && menu.type !== "buttons") {
        var current = menu.buttons[menu.active] || {};
        header.setAttribute("tabindex", "0");
        header.setAttribute("role", "button");
        header.setAttribute("aria-haspopup", "true");
        header.setAttribute("aria-label", "Menu: " + clean(current.label) + " (arrow keys choose another entry)");
        header.dataset.attnbookMenu = i;
      }
      g.querySelectorAll("g.updatemenu-button, g.updatemenu-dropdown-button").forEach(function (b, j) {
        b.setAttribute("tabindex", "0");
        b.setAttribute("role", "button");
        b.setAttribute("aria-label", clean((menu.buttons[j] || {}).label) || "option " + (j + 1));
        if (menu.type === "buttons") b.setAttribute("aria-pressed", String(j === menu.active));
        b.dataset.attnbookButton = j;
        b.dataset.attnbookMenu = i;
      });
    });
  }

  function run(gd, item) { // a slider step's or menu button's command, as plotly runs it on a click
    var api = {restyle: Plotly.restyle, relayout: Plotly.relayout, update: Plotly.update, animate: Plotly.animate};
    if (!item || !api[item.method]) return Promise.resolve();
    return Promise.resolve(api[item.method].apply(null, [gd].concat(item.args || [])));
  }

  function refocus(gd, selector) {
    var node = gd.querySelector(selector);
    if (node && document.activeElement !== node) node.focus({preventScroll: true});
  }

  function moveSlider(gd, i, k) {
    var s = gd.layout.sliders[i], n = s.steps.length;
    k = Math.max(0, Math.min(n - 1, k));
    if (k === (s.active || 0)) return Promise.resolve();
    var update = {};
    update["sliders[" + i + "].active"] = k;
    return run(gd, s.steps[k]).then(function () { return Plotly.relayout(gd, update); }).then(function () {
      gd.emit("plotly_sliderchange", {slider: gd._fullLayout.sliders[i], step: gd._fullLayout.sliders[i].steps[k]});
      return afterPlot(gd);
    }).then(function () { refocus(gd, 'g.slider-container[data-attnbook-slider="' + i + '"]'); });
  }

  function chooseMenu(gd, i, k) {
    var menu = gd.layout.updatemenus[i], n = menu.buttons.length;
    k = Math.max(0, Math.min(n - 1, k));
    var update = {};
    update["updatemenus[" + i + "].active"] = k;
    return run(gd, menu.buttons[k]).then(function () { return Plotly.relayout(gd, update); }).then(function () {
      return afterPlot(gd);
    }).then(function () { refocus(gd, 'g.updatemenu-header-group[data-attnbook-menu="' + i + '"]'); });
  }

  // Open or close a dropdown menu's list, as a click on its header does; an open list's entries are buttons,
  // and the focus goes to the chosen one.
  function toggleMenu(gd, i) {
    var container = gd.querySelectorAll("g.updatemenu-container")[i];
    if (!container) return;
    var header = container.querySelector("g.updatemenu-header");
    header.dispatchEvent(new MouseEvent("click", {bubbles: true}));
    setTimeout(function () {
      markControls(gd);
      var active = (gd.layout.updatemenus[i].active || 0);
      var entry = container.querySelector('g.updatemenu-dropdown-button[data-attnbook-button="' + active + '"]');
      if (entry) entry.focus({preventScroll: true});
      else refocus(gd, 'g.updatemenu-header-group[data-attnbook-menu="' + i + '"]');
    }, 50);
  }

  function onKey(gd, e) {
    var node = e.target;
    if (!node || !node.dataset) return;
    var key = e.key;
    if (node.dataset.attnbookSlider !== undefined) {
      var i = +node.dataset.attnbookSlider, s = gd.layout.sliders[i], a = s.active || 0, n = s.steps.length;
      var page = Math.max(1, Math.round(n / 10));
      var to = {ArrowRight: a + 1, ArrowUp: a + 1, ArrowLeft: a - 1, ArrowDown: a - 1, PageUp: a + page,
                PageDown: a - page, Home: 0, End: n - 1}[key];
      if (to === undefined) return;
      e.preventDefault();
      moveSlider(gd, i, to);
    } else if (node.dataset.attnbookButton !== undefined && (key === "Enter" || key === " " || key === "Escape")) {
      e.preventDefault();
      var open = node.classList.contains("updatemenu-dropdown-button"), at = node.dataset.attnbookMenu;
      if (key === "Escape") { if (open) toggleMenu(gd, at); return; }
      node.dispatchEvent(new MouseEvent("click", {bubbles: true}));
      if (open) setTimeout(function () { afterPlot(gd); refocus(gd, 'g.updatemenu-header-group[data-attnbook-menu="' + at + '"]'); }, 50);
    } else if (node.dataset.attnbookMenu !== undefined) {
      var m = +node.dataset.attnbookMenu, menu = gd.layout.updatemenus[m], active = menu.active || 0;
      var next = {ArrowDown: active + 1, ArrowRight: active + 1, ArrowUp: active - 1, ArrowLeft: active - 1,
                  Home: 0, End: menu.buttons.length - 1}[key];
      if (next !== undefined) { e.preventDefault(); chooseMenu(gd, m, next); }
      else if (key === "Enter" || key === " ") { e.preventDefault(); toggleMenu(gd, m); }
    }
  }

  // --- after every redraw ------------------------------------------------------------------------------
  function afterPlot(gd) {
    if (gd._attnbookBusy || !gd._fullLayout) return Promise.resolve();
    markControls(gd);
    var alt = document.getElementById(gd.id + "-alt");
    if (alt) alt.textContent = describe(gd);
    gd.setAttribute("aria-label", label(gd));
    if (!isPhone(gd) || !gd._attnbookSaved) return Promise.resolve();
    var u = fitTexts(gd);
    if (!u) return Promise.resolve();
    gd._attnbookBusy = true;
    return Plotly.relayout(gd, u).finally(function () { gd._attnbookBusy = false; afterPlot(gd); });
  }

  function newPlot(id, data, layout, config) {
    var gd = document.getElementById(id);
    gd.setAttribute("role", "figure");
    gd.setAttribute("aria-describedby", id + "-alt");
    return Plotly.newPlot(gd, data, layout, config).then(function () {
      gd.on("plotly_afterplot", function () { afterPlot(gd); });
      gd.addEventListener("keydown", function (e) { onKey(gd, e); });
      return apply(gd);
    }).then(function () { return gd; });
  }

  function all() { return document.querySelectorAll("div.attnbook-plotly"); }
  function applyAll() { all().forEach(function (gd) { if (gd._fullLayout) apply(gd); }); }

  // --- loading: plotly.js and each figure's data, when the figure comes near the screen ------------------
  var ROOT = document.documentElement.dataset.content_root || "./";
  var PLOTLY_JS = ROOT + "_static/vendor/plotly/plotly-cartesian.min.js";
  var scripts = {}, figures = {}, waiting = {};

  function loadScript(src) { // once per address; resolves when the script has run
    if (!scripts[src]) {
      scripts[src] = new Promise(function (resolve, reject) {
        var s = document.createElement("script");
        s.src = src;
        s.async = true;
        s.onload = function () { resolve(); };
        s.onerror = function () { delete scripts[src]; reject(new Error("could not load " + src)); };
        document.head.appendChild(s);
      });
    }
    return scripts[src];
  }

  function loadPlotly() { return window.Plotly ? Promise.resolve() : loadScript(PLOTLY_JS); }

  // A figure's script calls this with [data, layout, config].
  function figure(id, f) {
    figures[id] = f;
    if (waiting[id]) { waiting[id](f); delete waiting[id]; }
  }

  function figureData(gd) {
    var id = gd.id;
    if (figures[id]) return Promise.resolve(figures[id]);
    var got = new Promise(function (resolve) { waiting[id] = resolve; });
    return loadScript(gd.dataset.src).then(function () { return got; });
  }

  // The page lays out its blocks only when they come near the screen (content-visibility: auto, see the book's
  // stylesheet); plotly measures its texts as it draws, so a figure's block is laid out from then on.
  function reveal(el) {
    for (var a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      if (getComputedStyle(a).contentVisibility === "auto") a.style.contentVisibility = "visible";
    }
  }

  function draw(gd) { // the figure of an empty box, once
    if (!gd._attnbookDrawn) {
      reveal(gd);
      gd._attnbookDrawn = Promise.all([loadPlotly(), figureData(gd)]).then(function (got) {
        var f = got[1];
        reveal(gd);
        return newPlot(gd.id, f[0], f[1], f[2]);
      });
      gd._attnbookDrawn.catch(function (e) { console.error("attnbook: figure " + gd.id + ": " + e); });
    }
    return gd._attnbookDrawn;
  }

  function pending() { return Array.prototype.filter.call(all(), function (gd) { return gd.dataset.src; }); }
  function drawAll() { return Promise.all(pending().map(draw)); }

  var near = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (e.isIntersecting) { near.unobserve(e.target); draw(e.target); }
    });
  }, {rootMargin: "100% 0px"}) : null;

  function watch() { pending().forEach(function (gd) { if (near) near.observe(gd); else draw(gd); }); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();

  new MutationObserver(applyAll).observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
  var timer = null;
  window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(applyAll, 150); });
  window.matchMedia("print").addEventListener("change", applyAll);
  window.addEventListener("beforeprint", drawAll);

  window.attnbookPlotly = {
    newPlot: function (id, data, layout, config) {
      return loadPlotly().then(function () { return newPlot(id, data, layout, config); });
    },
    apply: apply, describe: describe, draw: draw, drawAll: drawAll, figure: figure, reveal: reveal,
  };
})();

// The Jupyter widgets of a page (sliders, progress bars), drawn from the state the notebook saved, by the
// widget manager (npm's @jupyter-widgets/html-manager) that the site serves itself. Deferred, on the pages
// that have widgets only (myst-nb's nb_ipywidgets_js, _config.yml).
//
// - Loaded when needed: require.js and the widget manager (3.6 MB) load when a widget comes within a
//   screen's height of the screen, so the text shows first; attnbookWidgets.load() loads them at once (the
//   PDF edition, the tests) and resolves when every widget of the page is drawn. The widgets' saved state
//   loads with them (data-state), not with the page.
// - Local paths: the widget manager finds its modules and fonts in the site (require.js paths).
// - For every reader: a slider's handle is named by the widget's label, a box that scrolls sideways can be
//   reached with the keyboard, and the arrow keys move a slider one step (Page Up and Down ten).
(function () {
  "use strict";
  var root = document.documentElement.dataset.content_root || "./";
  var vendor = root + "_static/vendor/";
  var VIEWS = 'script[type="application/vnd.jupyter.widget-view+json"]';
  var STATE = "application/vnd.jupyter.widget-state+json";
  // The widgets' saved state is a script of its own (sphinx.move_widget_state), named by this script's
  // data-state: it calls attnbookWidgets.state, which puts it in the page where the widget manager reads it.
  var self = document.currentScript;
  var stateSrc = self && self.dataset.state;
  function state(saved) {
    var s = document.createElement("script");
    s.type = STATE;
    s.textContent = JSON.stringify(saved);
    document.head.appendChild(s);
  }

  function loadScript(src, attributes) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = src;
      s.async = true;
      Object.keys(attributes || {}).forEach(function (k) { s.setAttribute(k, attributes[k]); });
      s.onload = function () { resolve(); };
      s.onerror = function () { reject(new Error("could not load " + src)); };
      document.head.appendChild(s);
    });
  }

  function saved() { // the ids of the models whose state the page holds
    var ids = {};
    document.querySelectorAll('script[type="application/vnd.jupyter.widget-state+json"]').forEach(function (s) {
      try { Object.keys(JSON.parse(s.textContent).state || {}).forEach(function (k) { ids[k] = true; }); } catch (e) {}
    });
    return ids;
  }

  function drawn(ids) { // every view of a saved model has its widget in front of it
    return Array.prototype.every.call(document.querySelectorAll(VIEWS), function (v) {
      var id;
      try { id = JSON.parse(v.textContent).model_id; } catch (e) { return true; }
      if (!ids[id]) return true;
      var before = v.previousElementSibling;
      return before && before.classList.contains("widget-subarea") && before.childElementCount > 0;
    });
  }

  // The page lays out its blocks only when they come near the screen (content-visibility: auto, see the book's
  // stylesheet); the widgets measure themselves as they are drawn, so their blocks are laid out from then on.
  function reveal() {
    document.querySelectorAll(VIEWS).forEach(function (v) {
      for (var a = v.parentElement; a && a !== document.body; a = a.parentElement) {
        if (getComputedStyle(a).contentVisibility === "auto") a.style.contentVisibility = "visible";
      }
    });
  }

  var loading = null;
  function load() {
    if (!loading) {
      reveal();
      var withState = stateSrc && !document.querySelector('script[type="' + STATE + '"]') ? loadScript(stateSrc)
                                                                                       : Promise.resolve();
      loading = withState.then(function () { return loadScript(vendor + "require/require.js"); }).then(function () {
        var local = vendor + "html-manager";
        window.require.config({paths: {"@jupyter-widgets/html-manager/dist": local, "@jupyter-widgets": local}});
        return loadScript(vendor + "html-manager/embed-amd.js",
                          {"data-jupyter-widgets-cdn": vendor + "npm/", "data-jupyter-widgets-cdn-only": "true"});
      }).then(function () {
        var ids = saved();
        return new Promise(function (resolve) {
          (function check() { if (drawn(ids)) resolve(); else setTimeout(check, 50); })();
        });
      });
      loading.catch(function (e) { console.error("attnbook: widgets: " + e); });
    }
    return loading;
  }

  function watch() {
    var views = document.querySelectorAll(VIEWS);
    if (!views.length) return;
    if (!("IntersectionObserver" in window)) { load(); return; }
    var near = new IntersectionObserver(function (entries) {
      if (entries.some(function (e) { return e.isIntersecting; })) { near.disconnect(); load(); }
    }, {rootMargin: "100% 0px"});
    views.forEach(function (v) { if (v.parentElement) near.observe(v.parentElement); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
  window.addEventListener("beforeprint", load);
  window.attnbookWidgets = {load: load, state: state};

  // Accessible names: a slider's handle (role="slider") is named by the widget's visible label, or by its
  // tooltip when it has no label; a box that scrolls can be reached with the keyboard.
  function name(root) {
    root.querySelectorAll(".noUi-handle[role=slider]:not([aria-labelledby]):not([aria-label])").forEach(function (h) {
      var widget = h.closest(".widget-slider, .jupyter-widgets");
      var label = widget && widget.querySelector(".widget-label");
      if (label && label.textContent.trim()) {
        label.id = label.id || "attnbook-widget-label-" + (++name.count);
        h.setAttribute("aria-labelledby", label.id);
      } else {
        h.setAttribute("aria-label", (widget && widget.getAttribute("title")) || "slider");
      }
    });
    root.querySelectorAll(".jupyter-widgets, .lm-Widget").forEach(function (box) {
      if (box.hasAttribute("tabindex")) return;
      var style = getComputedStyle(box), scrolls = /auto|scroll/;
      var sideways = box.scrollWidth > box.clientWidth + 1 &&
        (box.classList.contains("widget-container") || scrolls.test(style.overflowX));
      var down = box.scrollHeight > box.clientHeight + 1 && scrolls.test(style.overflowY);
      if (sideways || down) box.setAttribute("tabindex", "0");
    });
  }
  name.count = 0;
  // The arrow keys move a slider one step (Page Up and Page Down ten): the widget manager's slider moves
  // with Home and End but not with the arrows.
  document.addEventListener("keydown", function (e) {
    var dir = {ArrowRight: 1, ArrowUp: 1, PageUp: 10, ArrowLeft: -1, ArrowDown: -1, PageDown: -10}[e.key];
    var handle = e.target;
    var target = handle && handle.closest && handle.classList.contains("noUi-handle") && handle.closest(".noUi-target");
    if (!dir || !target || !target.noUiSlider) return;
    var api = target.noUiSlider, o = api.options, step = +o.step || (o.range.max - o.range.min) / 100;
    e.preventDefault();
    e.stopImmediatePropagation();
    var before = +api.get(), tries = [1, 2, 5, 10, 20, 50]; // where the widget rounds to a coarser step
    for (var i = 0; i < tries.length && Math.abs(+api.get() - before) < 1e-12; i++) {
      api.set(before + dir * step * tries[i]);
    }
  }, true);
  var pending = null; // widgets render after the page loads: name them once the page stops changing
  new MutationObserver(function () {
    clearTimeout(pending);
    pending = setTimeout(function () { pending = null; name(document); }, 50);
  }).observe(document.documentElement, {childList: true, subtree: true});
  // true once the widgets have stopped changing and are named (the tests wait for it)
  window.attnbookWidgets.settled = function () { return pending === null; };
})();

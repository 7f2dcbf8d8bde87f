// The model in the page: a text box that runs a model the chapter trained, in the reader's browser.
//
// Each <div class="attnbook-inpage" data-model="NAME"> becomes a text box, the model's next-character
// probabilities (top 10), a "continue" button that samples like attnbook.models.GPT.generate, and a heatmap
// of one head's attention weights. The model is _static/models/NAME.onnx, described by NAME.json (written
// by attnbook.export.to_onnx); it runs with onnxruntime-web on one WebAssembly thread. Nothing is loaded
// until the widget scrolls into view or is used.
//
// A model that labels every position (data-kind="tagger", attnbook.export.tagger_to_onnx) gets a table of
// its answers under the typed characters instead of the bars and the button.
//
// An instruction-tuned model (data-kind="chat", attnbook.export.to_onnx with a template) takes an
// instruction: the page writes the turn in the chat template (<|user|> the instruction <|end|>
// <|assistant|>) and decodes greedily until the model writes <|end|> or reaches its budget of tokens, as
// attnbook.chat.answer does; it shows the turn with each answer token shaded by its probability, and the
// heatmap over the turn (the template's tokens drawn as circled letters). Its widget exposes data-answer
// (the text), data-answer-ids (the generated ids, with the closing <|end|>), data-answer-probs and
// data-stopped.
//
// For every reader (the contract any model in the page gets from this file, with no code of its own): the
// prediction is announced in a polite ARIA live region (.attnbook-inpage-announce: the five most likely next
// characters with their probabilities, or each job's answer at the last position) once the reader stops
// typing; the heatmap is an image named by its layer, head and length, described by a hidden summary (for
// each character, the character it attends to most, with the weight), and focusable: the arrow keys move
// a cursor over its cells (Home and End to the row's ends) and the readout under it, itself a live region,
// says the weight; layer and head are chosen with <select>s, the bars are buttons.
//
// For tests, each widget exposes what it shows: data-state (idle, loading, ready, error), data-context (the
// characters the model read), data-probs (all next-character probabilities) or data-answers (every job's
// probabilities at every position), data-first-ms and data-update-ms (times), and the heatmap's
// data-weights (the matrix drawn) with data-layer and data-head.
(function () {
  "use strict";

  var script = document.currentScript;
  var HERE = new URL(".", script.src).href; // .../_static/vendor/inpage/
  var ORT_DIR = new URL("../onnxruntime/", HERE).href;
  var MODELS = new URL("../../models/", HERE).href;
  var TOP = 10; // bars shown
  var TOP_K_CHOICES = [1, 2, 3, 5, 10, 20, 40];

  // --- sampling: the meaning of attnbook.models.GPT.generate -----------------------------------------
  // logits / temperature (temperature 0: all probability on the most likely token), keep only the top_k
  // largest (every logit equal to the k-th largest is kept, as masked_fill(logits < kth) does), softmax.
  function sampleProbs(logits, temperature, topK) {
    var n = logits.length, p = new Float64Array(n), i;
    if (temperature === 0) {
      var best = 0;
      for (i = 1; i < n; i++) if (logits[i] > logits[best]) best = i;
      p[best] = 1;
      return p;
    }
    var z = Array.prototype.map.call(logits, function (v) { return v / temperature; });
    var kth = -Infinity;
    if (topK !== null && topK !== undefined && topK < n) {
      kth = z.slice().sort(function (a, b) { return b - a; })[topK - 1];
    }
    var max = -Infinity, sum = 0;
    for (i = 0; i < n; i++) if (z[i] >= kth && z[i] > max) max = z[i];
    for (i = 0; i < n; i++) { p[i] = z[i] >= kth ? Math.exp(z[i] - max) : 0; sum += p[i]; }
    for (i = 0; i < n; i++) p[i] /= sum;
    return p;
  }

  function draw(p) {
    var u = Math.random(), c = 0, last = 0;
    for (var i = 0; i < p.length; i++) {
      if (p[i] > 0) last = i;
      c += p[i];
      if (u < c) return i;
    }
    return last;
  }

  // --- the prompt: the rule of attnbook.export.prompt_ids ---------------------------------------------
  function promptIds(text, meta) {
    var chars = Array.from(meta.vocab), index = new Map(), dropped = [], kept = [];
    chars.forEach(function (c, i) { index.set(c, i); });
    Array.from(text).forEach(function (c) {
      if (index.has(c)) kept.push(c);
      else if (dropped.indexOf(c) < 0) dropped.push(c);
    });
    var empty = kept.length === 0;
    if (empty) kept = Array.from(meta.start);
    var cropped = Math.max(0, kept.length - meta.block_size);
    kept = kept.slice(cropped);
    return {ids: kept.map(function (c) { return index.get(c); }), text: kept.join(""), dropped: dropped,
            cropped: cropped, empty: empty};
  }

  // --- a chat: the instruction's characters in the template ---------------------------------------------
  // the template's tokens have the ids after the characters: <|user|> V, <|assistant|> V + 1, <|end|> V + 2
  function chatIds(text, meta) {
    var chars = Array.from(meta.vocab), V = chars.length, index = new Map(), dropped = [], kept = [];
    chars.forEach(function (c, i) { index.set(c, i); });
    Array.from(text).forEach(function (c) {
      if (index.has(c)) kept.push(c);
      else if (dropped.indexOf(c) < 0) dropped.push(c);
    });
    var ids = [V].concat(kept.map(function (c) { return index.get(c); }), [V + 2, V + 1]);
    return {ids: ids, text: kept.join(""), dropped: dropped, cropped: 0, empty: false};
  }

  var GLYPHS = {user: "\u24ca", assistant: "\u24b6", end: "\u24ba"}; // circled U, A, E: one cell each

  function show(c) { // a character (or a template token, by name) as a label
    if (c.length > 1) return GLYPHS[TOKEN_ROLES[c]] || "?";
    return c === "\n" ? "\u21b5" : c === " " ? "\u2423" : c === "\t" ? "\u21e5" : c;
  }

  function describe(c) { // a character (or a template token) in a sentence
    var names = {"\n": "a line break", " ": "a space", "\t": "a tab"};
    if (c.length > 1) return "the token " + c;
    return names[c] || "\u201c" + c + "\u201d";
  }
  var TOKEN_ROLES = {}; // a template token's name -> its role (user, assistant, end), from the models' files

  // --- onnxruntime-web, loaded once per page ------------------------------------------------------------
  var ortPromise = null;
  function loadOrt() {
    if (!ortPromise) {
      ortPromise = new Promise(function (resolve, reject) {
        var tag = document.createElement("script");
        tag.src = ORT_DIR + "ort.wasm.min.js";
        tag.onload = function () {
          var ort = window.ort;
          ort.env.wasm.numThreads = 1; // a static host cannot be cross-origin isolated: no threads
          ort.env.wasm.proxy = false;
          ort.env.wasm.wasmPaths = ORT_DIR;
          ort.env.logLevel = "error";
          resolve(ort);
        };
        tag.onerror = function () { reject(new Error("could not load " + tag.src)); };
        document.head.appendChild(tag);
      });
    }
    return ortPromise;
  }

  function el(tag, attrs, parent) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    if (parent) parent.appendChild(node);
    return node;
  }

  // --- one widget -----------------------------------------------------------------------------------
  function Widget(root) {
    this.root = root;
    this.name = root.dataset.model;
    this.tagger = root.dataset.kind === "tagger"; // labels every position (else: a language model)
    this.chat = root.dataset.kind === "chat"; // answers an instruction, greedily
    this.state("idle");
    this.busy = false;
    this.dirty = false;
    this.generating = false;
    root.textContent = "";
    var id = "attnbook-inpage-" + this.name;
    var top = el("div", {"class": "attnbook-inpage-input"}, root);
    el("label", {"for": id + "-text", text: this.tagger ? "Type a sequence; the table shows the model\u2019s " +
       "answers at every position." : this.chat ? "Type an instruction; the model answers it." :
       "Type some text; the model predicts the next character."}, top);
    this.text = el("textarea", {id: id + "-text", rows: this.tagger || this.chat ? "1" : "3", spellcheck: "false",
                                autocomplete: "off", autocapitalize: "off"}, top);
    this.text.value = root.dataset.prompt || "";
    this.notes = el("p", {"class": "attnbook-inpage-notes", "aria-live": "polite"}, top);
    this.announcer = el("p", {"class": "attnbook-inpage-announce attnbook-sr-only", "aria-live": "polite",
                              "aria-atomic": "true"}, top);
    this.notes.textContent = "The model loads when this box comes into view.";

    var panels = el("div", {"class": "attnbook-inpage-panels"}, root);
    var left = el("div", {"class": "attnbook-inpage-panel"}, panels);
    el("h4", {text: this.tagger ? "Answers" : this.chat ? "The turn, and the answer" : "Next character"}, left);
    if (this.tagger) this.table = el("div", {"class": "attnbook-inpage-table"}, left);
    if (this.chat) {
      this.turn = el("p", {"class": "attnbook-inpage-turn"}, left);
      this.reply = el("p", {"class": "attnbook-inpage-reply"}, left);
    }
    this.bars = el("div", {"class": "attnbook-inpage-bars", role: "list"}, left);
    this.bars.hidden = this.chat;

    var controls = el("div", {"class": "attnbook-inpage-controls"}, left);
    controls.hidden = this.tagger || this.chat;
    var t = el("label", {}, controls);
    t.append("temperature ");
    this.temperature = el("input", {type: "range", min: "0", max: "2", step: "0.05"}, t);
    this.temperatureOut = el("output", {}, t);
    var k = el("label", {}, controls);
    k.append("top-k ");
    this.topK = el("select", {}, k);
    var n = el("label", {}, controls);
    n.append("characters ");
    this.length = el("input", {type: "number", min: "1", max: "1000", step: "1"}, n);
    this.button = el("button", {type: "button", text: "Continue"}, controls);

    var right = el("div", {"class": "attnbook-inpage-panel"}, panels);
    var pick = el("h4", {}, right);
    pick.append("Attention weights, ");
    var layer = el("span", {text: "layer "}, pick);
    this.layer = el("select", {"aria-label": "layer"}, layer);
    layer.append(" ");
    pick.append("head ");
    this.head = el("select", {"aria-label": "head"}, pick);
    this.canvas = el("canvas", {"class": "attnbook-inpage-heatmap", role: "img", tabindex: "0",
                                "aria-label": "Attention weights: drawn when the model has loaded",
                                "aria-describedby": id + "-heat"}, right);
    this.heatText = el("p", {"class": "attnbook-sr-only", id: id + "-heat"}, right);
    this.readout = el("p", {"class": "attnbook-inpage-readout", "aria-live": "polite",
                            text: "Row: a character reading (query); column: the character it reads (key). " +
                                  "With the heatmap focused, the arrow keys move from cell to cell."}, right);
    this.cursor = null; // the cell the keyboard is on: {q, k}

    this.controls = [this.temperature, this.topK, this.length, this.button, this.layer, this.head];
    this.controls.forEach(function (c) { c.disabled = true; }); // until the model is loaded

    var self = this;
    var start = function () { self.start(); };
    this.text.addEventListener("focus", start);
    this.text.addEventListener("input", function () { self.start(); self.update(); });
    this.button.addEventListener("click", function () { self.start().then(function () { self.toggleGenerate(); }); });
    [this.layer, this.head].forEach(function (s) {
      s.addEventListener("change", function () { self.drawHeatmap(); });
    });
    this.temperature.addEventListener("input", function () { self.temperatureOut.value = self.temperature.value; });
    this.canvas.addEventListener("mousemove", function (e) { self.point(e); });
    this.canvas.addEventListener("click", function (e) { self.point(e); });
    this.canvas.addEventListener("keydown", function (e) { self.key(e); });
    this.canvas.addEventListener("focus", function () { self.drawHeatmap(); });
    this.canvas.addEventListener("blur", function () { self.drawHeatmap(); });
    window.addEventListener("resize", function () { self.drawHeatmap(); });
    var dark = new MutationObserver(function () { if (self.result) self.show(self.prompt, self.result); });
    dark.observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
    if ("IntersectionObserver" in window) {
      var seen = new IntersectionObserver(function (entries) {
        if (entries.some(function (e) { return e.isIntersecting; })) { seen.disconnect(); self.start(); }
      }, {rootMargin: "0px"}); // in view: not before, so that a reader who never gets here loads nothing
      seen.observe(root);
    }
  }

  Widget.prototype.state = function (s) { this.root.dataset.state = s; };

  Widget.prototype.start = function () {
    var self = this;
    if (this.ready) return this.ready;
    this.t0 = performance.now();
    this.state("loading");
    this.notes.textContent = "Loading the model\u2026";
    function get(url, as) {
      return fetch(url).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status + " for " + r.url);
        return r[as]();
      });
    }
    var times = {};
    function mark(name) { return function (x) { times[name] = Math.round(performance.now() - self.t0); return x; }; }
    // the description, then the model's bytes, while onnxruntime loads
    var meta = get(MODELS + this.name + ".json", "json");
    var bytes = meta.then(function (m) { return get(MODELS + m.onnx, "arrayBuffer"); }).then(mark("model"));
    this.ready = Promise.all([loadOrt().then(mark("runtime")), meta, bytes]).then(function (all) {
      self.ort = all[0];
      self.meta = all[1];
      return self.ort.InferenceSession.create(new Uint8Array(all[2]), {executionProviders: ["wasm"]});
    }).then(mark("session")).then(function (session) {
      self.session = session;
      self.setUp();
      return self.update();
    }).then(function () {
      mark("first")();
      self.root.dataset.firstMs = times.first;
      self.root.dataset.loadTimes = JSON.stringify(times);
      self.state("ready");
    }).catch(function (error) {
      self.state("error");
      self.notes.textContent = "The model could not run here (" + error.message + "). It needs the book " +
        "served over http(s) and a browser with WebAssembly.";
    });
    return this.ready;
  };

  Widget.prototype.setUp = function () {
    var meta = this.meta, i;
    this.vocab = Array.from(meta.vocab);
    this.chars = this.vocab.length; // ids from here on are the template's tokens
    if (meta.template) { // a chat: the template's tokens by name after the characters
      ["user", "assistant", "end"].forEach(function (role) {
        this.vocab.push(meta.template[role]);
        TOKEN_ROLES[meta.template[role]] = role;
      }, this);
    }
    if (meta.sampling) { // a language model: the sampling controls start at the exported values
      var sampling = meta.sampling, V = this.vocab.length;
      this.temperature.value = sampling.temperature;
      this.temperatureOut.value = sampling.temperature;
      var choices = TOP_K_CHOICES.filter(function (v) { return v < V; });
      if (sampling.top_k && choices.indexOf(sampling.top_k) < 0) choices.push(sampling.top_k);
      choices.sort(function (a, b) { return a - b; });
      el("option", {value: "", text: "all"}, this.topK);
      choices.forEach(function (v) { el("option", {value: String(v), text: String(v)}, this.topK); }, this);
      this.topK.value = sampling.top_k ? String(sampling.top_k) : "";
      this.length.value = sampling.max_new_tokens;
    }
    for (i = 0; i < meta.n_layers; i++) el("option", {value: String(i), text: String(i + 1)}, this.layer);
    this.layer.parentNode.hidden = meta.n_layers === 1;
    for (i = 0; i < meta.n_heads; i++) el("option", {value: String(i), text: String(i + 1)}, this.head);
    if (meta.heatmap) { // the head the chapter points at, shown first
      this.layer.value = String(meta.heatmap.layer);
      this.head.value = String(meta.heatmap.head);
    }
    this.controls.forEach(function (c) { c.disabled = false; });
  };

  Widget.prototype.run = async function (ids) {
    var data = BigInt64Array.from(ids, function (v) { return BigInt(v); });
    var input = new this.ort.Tensor("int64", data, [1, ids.length]);
    var out = await this.session.run({ids: input});
    return {outputs: out, logits: out.logits && out.logits.data, weights: out.weights.data, T: ids.length};
  };

  // Recompute for the text in the box; while a run is under way, remember to run again when it ends.
  Widget.prototype.update = async function () {
    if (!this.session) return;
    if (this.busy) { this.dirty = true; return this.pending; }
    this.busy = true;
    var self = this;
    this.pending = (async function () {
      do {
        self.dirty = false;
        var begin = performance.now();
        var prompt = (self.chat ? chatIds : promptIds)(self.text.value, self.meta);
        var result = self.chat ? await self.converse(prompt) : await self.run(prompt.ids);
        self.show(prompt, result);
        self.root.dataset.updateMs = (performance.now() - begin).toFixed(1);
      } while (self.dirty);
      self.busy = false;
    })();
    return this.pending;
  };

  // A chat: greedy decoding from the turn, each step on the last block_size tokens, until <|end|> or
  // max_new_tokens (attnbook.chat.answer with temperature 0). The result is the last step's run, on the turn
  // and the answer before its last token, with the answer's ids and each one's probability.
  Widget.prototype.converse = async function (prompt) {
    var end = this.chars + 2, ids = prompt.ids.slice(), answer = [], probs = [], result = null;
    var B = this.meta.block_size, n = this.meta.sampling.max_new_tokens;
    for (var i = 0; i < n; i++) {
      var context = ids.slice(-B);
      result = await this.run(context);
      var logits = this.lastLogits(result), next = 0;
      for (var j = 1; j < logits.length; j++) if (logits[j] > logits[next]) next = j; // the first largest
      answer.push(next);
      probs.push(sampleProbs(logits, 1, null)[next]);
      ids.push(next);
      result.context = context;
      if (next === end) break;
    }
    result.answer = answer;
    result.answerProbs = probs;
    return result;
  };

  Widget.prototype.lastLogits = function (result) {
    var V = this.vocab.length;
    return result.logits.subarray((result.T - 1) * V, result.T * V);
  };

  Widget.prototype.show = function (prompt, result) {
    this.prompt = prompt;
    this.result = result;
    this.root.dataset.context = prompt.text;
    // notes on what the model read
    var notes = [];
    if (this.chat) { // the labels of the tokens the heatmap shows (the last step's input)
      var vocab = this.vocab;
      this.tokens = result.context.map(function (i) { return vocab[i]; });
      var cut = prompt.ids.length + result.answer.length - 1 - result.context.length;
      if (cut > 0) {
        notes.push("The model reads only its last " + this.meta.block_size + " tokens: by the end of the answer " +
                   "the first " + cut + " of the turn " + (cut === 1 ? "is" : "are") + " left out.");
      }
    } else this.tokens = Array.from(prompt.text);
    if (prompt.dropped.length) {
      notes.push("Not in the model\u2019s " + this.chars + " characters, left out: " +
                 prompt.dropped.map(describe).join(", ") + ".");
    }
    if (prompt.empty) notes.push("Empty prompt: the model reads " + describe(this.meta.start) + " instead.");
    if (prompt.cropped) notes.push("The model reads only the last " + this.meta.block_size +
                                   " characters (its context): " + prompt.cropped + " earlier character" +
                                   (prompt.cropped === 1 ? " is" : "s are") + " left out.");
    this.notes.textContent = notes.join(" ") || (this.chat ? "The turn is " + prompt.ids.length +
      " tokens: the instruction\u2019s " + (prompt.ids.length - 3) + " characters and the template\u2019s 3." :
      "The model reads " + prompt.ids.length + " character" + (prompt.ids.length === 1 ? "" : "s") + ".");
    if (this.tagger) this.showAnswers(result);
    else if (this.chat) this.showTurn(prompt, result);
    else this.showBars(result);
    this.drawHeatmap();
    this.announceSoon();
  };

  // Say the prediction to a screen reader once the text stops changing (not at every keystroke).
  Widget.prototype.announceSoon = function () {
    var self = this;
    clearTimeout(this.announceTimer);
    this.announceTimer = setTimeout(function () { self.announcer.textContent = self.summary(); }, 400);
  };

  Widget.prototype.summary = function () {
    if (this.chat) return this.reply.textContent;
    if (this.tagger) {
      var answers = JSON.parse(this.root.dataset.answers), T = this.result.T, jobs = this.meta.jobs;
      return "At the last of " + T + " positions: " + jobs.map(function (job) {
        var p = answers[job.name][T - 1], best = 0;
        for (var c = 1; c < p.length; c++) if (p[c] > p[best]) best = c;
        return job.name + " " + Array.from(job.labels)[best] + " (" + p[best].toFixed(2) + ")";
      }).join(", ") + ".";
    }
    var probs = JSON.parse(this.root.dataset.probs), vocab = this.vocab;
    var order = probs.map(function (p, i) { return i; }).sort(function (a, b) { return probs[b] - probs[a]; });
    return "Most likely next characters: " + order.slice(0, 5).map(function (i) {
      return describe(vocab[i]) + " " + probs[i].toFixed(3);
    }).join(", ") + ".";
  };

  // A language model: bars of the ten most likely next characters (a click appends one).
  Widget.prototype.showBars = function (result) {
    var self = this, probs = sampleProbs(this.lastLogits(result), 1, null);
    this.root.dataset.probs = JSON.stringify(Array.from(probs));
    var order = Array.from(probs.keys()).sort(function (a, b) { return probs[b] - probs[a]; }).slice(0, TOP);
    this.bars.textContent = "";
    order.forEach(function (i) {
      var row = el("button", {type: "button", role: "listitem", "class": "attnbook-inpage-bar",
                              title: "append " + describe(self.vocab[i]),
                              "aria-label": describe(self.vocab[i]) + ": " + probs[i].toFixed(3)}, self.bars);
      el("span", {"class": "attnbook-inpage-char", text: show(self.vocab[i])}, row);
      var track = el("span", {"class": "attnbook-inpage-track"}, row);
      el("span", {"class": "attnbook-inpage-fill", style: "width:" + (100 * probs[i]).toFixed(1) + "%"}, track);
      el("span", {"class": "attnbook-inpage-p", text: probs[i].toFixed(3)}, row);
      row.addEventListener("click", function () { self.append(self.vocab[i]); });
    });
  };

  // A chat: the turn in the template, the answer's tokens shaded by their probability, and the answer.
  Widget.prototype.showTurn = function (prompt, result) {
    var self = this, ramp = this.colours().ramp.map(rgb), n = prompt.ids.length, end = this.chars + 2;
    this.turn.textContent = "";
    prompt.ids.concat(result.answer).forEach(function (id, i) {
      var special = id >= self.chars, name = self.vocab[id];
      var cell = el("span", {"class": "attnbook-inpage-token" + (special ? " attnbook-inpage-special" : ""),
                             text: special ? name : show(name)}, self.turn);
      if (i >= n) { // an answer token: shaded by its probability
        var p = result.answerProbs[i - n];
        cell.classList.add("attnbook-inpage-answer");
        cell.title = "probability " + p.toFixed(3);
        cell.style.background = mix(ramp, p);
        cell.style.color = p > 0.6 ? "var(--attnbook-inpage-on-heat)" : "var(--attnbook-inpage-text)";
      }
    });
    var stopped = result.answer[result.answer.length - 1] === end;
    var text = result.answer.slice(0, stopped ? -1 : undefined).map(function (i) { return self.vocab[i]; }).join("");
    this.root.dataset.answer = text;
    this.root.dataset.answerIds = JSON.stringify(result.answer);
    this.root.dataset.answerProbs = JSON.stringify(result.answerProbs);
    this.root.dataset.stopped = String(stopped);
    this.reply.textContent = "The model answers: " + (text ? "\u201c" + text + "\u201d" : "nothing") +
      (stopped ? ", then ends its turn." : ", and does not end its turn within " + result.answer.length + " tokens.");
  };

  // A tagger: under each character, every job's most likely label, shaded by its probability.
  Widget.prototype.showAnswers = function (result) {
    var self = this, T = result.T, chars = Array.from(this.prompt.text), answers = {};
    var ramp = this.colours().ramp.map(rgb);
    var table = el("table", {});
    var head = el("tr", {}, el("thead", {}, table));
    el("th", {text: "input", scope: "row"}, head);
    chars.forEach(function (c) { el("th", {text: show(c), scope: "col"}, head); });
    var body = el("tbody", {}, table);
    this.meta.jobs.forEach(function (job) {
      var logits = result.outputs[job.output].data, C = job.labels.length, labels = Array.from(job.labels);
      var row = el("tr", {}, body), probs = [];
      el("th", {text: job.name, scope: "row"}, row);
      for (var t = 0; t < T; t++) {
        var p = sampleProbs(logits.subarray(t * C, (t + 1) * C), 1, null), best = 0;
        for (var c = 1; c < C; c++) if (p[c] > p[best]) best = c;
        probs.push(Array.from(p));
        var cell = el("td", {text: show(labels[best]), title: job.name + " at " + (t + 1) + ": " + labels[best] +
                             " (" + p[best].toFixed(2) + ")"}, row);
        cell.style.background = mix(ramp, p[best]);
        cell.style.color = p[best] > 0.6 ? "var(--attnbook-inpage-on-heat)" : "";
      }
      answers[job.name] = probs;
    });
    this.table.textContent = "";
    this.table.appendChild(table);
    this.root.dataset.answers = JSON.stringify(answers);
  };

  Widget.prototype.append = function (c) {
    if (promptIds(this.text.value, this.meta).empty) this.text.value += this.meta.start;
    this.text.value += c;
    this.text.scrollTop = this.text.scrollHeight;
    return this.update();
  };

  // The weights of the chosen layer and head, (T, T), row t = query t.
  Widget.prototype.matrix = function () {
    var T = this.result.T, H = this.meta.n_heads;
    var l = +this.layer.value, h = +this.head.value, offset = (l * H + h) * T * T, rows = [];
    for (var t = 0; t < T; t++) rows.push(Array.from(this.result.weights.subarray(offset + t * T, offset + (t + 1) * T)));
    return rows;
  };

  Widget.prototype.colours = function () {
    var style = getComputedStyle(this.root), ramp = [];
    for (var i = 0; ; i++) {
      var v = style.getPropertyValue("--attnbook-heat-" + i).trim();
      if (!v) break;
      ramp.push(v);
    }
    return {ramp: ramp, masked: style.getPropertyValue("--attnbook-heat-masked").trim(),
            text: style.getPropertyValue("--attnbook-inpage-text").trim()};
  };

  function mix(ramp, w) { // colour of a weight in [0, 1] on the ramp
    var x = Math.max(0, Math.min(1, w)) * (ramp.length - 1), i = Math.min(Math.floor(x), ramp.length - 2);
    var f = x - i, a = ramp[i], b = ramp[i + 1];
    var r = a.map(function (v, j) { return Math.round(v + f * (b[j] - v)); });
    return "rgb(" + r.join(",") + ")";
  }

  function rgb(css) { // "rgb(1, 2, 3)" or "#rrggbb" -> [r, g, b]
    var m = css.match(/\d+(\.\d+)?/g);
    if (css[0] === "#") return [1, 3, 5].map(function (i) { return parseInt(css.slice(i, i + 2), 16); });
    return m.slice(0, 3).map(Number);
  }

  Widget.prototype.drawHeatmap = function () {
    if (!this.result) return;
    var rows = this.matrix(), T = rows.length, chars = this.tokens;
    this.canvas.dataset.weights = JSON.stringify(rows);
    this.canvas.dataset.layer = this.layer.value;
    this.canvas.dataset.head = this.head.value;
    var colours = this.colours(), ramp = colours.ramp.map(rgb);
    var width = Math.max(160, this.root.clientWidth - 24); // the widget's width less its padding
    var labels = Math.floor((width - 16) / T) >= 9; // room for a character per row and column
    var margin = labels ? 16 : 0;
    var cell = Math.max(2, Math.min(16, Math.floor((width - margin) / T)));
    var size = margin + cell * T, dpr = window.devicePixelRatio || 1;
    this.canvas.width = size * dpr;
    this.canvas.height = size * dpr;
    this.canvas.style.width = size + "px"; // the height follows (CSS height: auto keeps the canvas square)
    this.geometry = {margin: margin, cell: cell, T: T, size: size};
    var ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, size, size);
    for (var q = 0; q < T; q++) {
      for (var k = 0; k < T; k++) {
        ctx.fillStyle = k > q && this.meta.causal ? colours.masked : mix(ramp, rows[q][k]);
        ctx.fillRect(margin + k * cell, margin + q * cell, cell, cell);
      }
    }
    if (this.cursor && document.activeElement === this.canvas) { // the keyboard's cell
      var c = this.cursor = {q: Math.min(this.cursor.q, T - 1), k: Math.min(this.cursor.k, T - 1)};
      ctx.strokeStyle = colours.text;
      ctx.lineWidth = 2;
      ctx.strokeRect(margin + c.k * cell + 1, margin + c.q * cell + 1, cell - 2, cell - 2);
    }
    if (labels) {
      ctx.fillStyle = colours.text;
      ctx.font = Math.min(12, cell) + "px monospace";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      for (var i = 0; i < T; i++) {
        ctx.fillText(show(chars[i]), margin + (i + 0.5) * cell, margin / 2);
        ctx.fillText(show(chars[i]), margin / 2, margin + (i + 0.5) * cell);
      }
    }
    this.canvas.setAttribute("aria-label", "Attention weights of layer " + (+this.layer.value + 1) + ", head " +
                             (+this.head.value + 1) + " over the " + T + (this.chat ? " tokens" : " characters") +
                             " the model reads");
    this.heatText.textContent = this.heatSummary(rows, chars);
  };

  // In words: for each character, the one it attends to most.
  Widget.prototype.heatSummary = function (rows, chars) {
    var causal = this.meta.causal;
    var word = this.chat ? "token" : "character";
    return "For each " + word + ", the " + word + " it attends to most: " + rows.map(function (row, q) {
      var best = 0;
      for (var k = 1; k < row.length; k++) if ((!causal || k <= q) && row[k] > row[best]) best = k;
      return (q + 1) + " " + describe(chars[q]) + " to " + (best + 1) + " " + describe(chars[best]) + " (" +
        row[best].toFixed(2) + ")";
    }).join("; ") + ".";
  };

  Widget.prototype.key = function (e) { // arrow keys move the keyboard's cell
    if (!this.geometry) return;
    var T = this.geometry.T, c = this.cursor || {q: T - 1, k: 0};
    var moves = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]};
    if (moves[e.key]) { c = {q: c.q + moves[e.key][0], k: c.k + moves[e.key][1]}; }
    else if (e.key === "Home") { c = {q: c.q, k: 0}; }
    else if (e.key === "End") { c = {q: c.q, k: T - 1}; }
    else if (!this.cursor && (e.key === "Enter" || e.key === " ")) { c = {q: T - 1, k: 0}; }
    else return;
    e.preventDefault();
    this.cursor = {q: Math.max(0, Math.min(T - 1, c.q)), k: Math.max(0, Math.min(T - 1, c.k))};
    this.drawHeatmap();
    this.readCell(this.cursor.q, this.cursor.k);
  };

  Widget.prototype.point = function (event) { // say which weight is under the pointer
    if (!this.geometry) return;
    var box = this.canvas.getBoundingClientRect(), g = this.geometry, scale = g.size / box.width;
    var k = Math.floor(((event.clientX - box.left) * scale - g.margin) / g.cell);
    var q = Math.floor(((event.clientY - box.top) * scale - g.margin) / g.cell);
    if (q < 0 || k < 0 || q >= g.T || k >= g.T) return;
    this.readCell(q, k);
  };

  Widget.prototype.readCell = function (q, k) {
    var chars = this.tokens, w = this.matrix()[q][k], word = this.chat ? "Token" : "Character";
    this.readout.textContent = word + " " + (q + 1) + " (" + describe(chars[q]) + ") reading " + word.toLowerCase() + " " +
      (k + 1) + " (" + describe(chars[k]) + "): " +
      (k > q && this.meta.causal ? "masked (a later character)" : "weight " + w.toFixed(3));
  };

  Widget.prototype.toggleGenerate = async function () {
    if (!this.session) return;
    if (this.generating) { this.generating = false; return; }
    this.generating = true;
    this.button.textContent = "Stop";
    var temperature = parseFloat(this.temperature.value), topK = this.topK.value ? +this.topK.value : null;
    var n = Math.max(1, Math.min(1000, parseInt(this.length.value, 10) || 1));
    try {
      await this.update();
      for (var i = 0; i < n && this.generating; i++) {
        var p = sampleProbs(this.lastLogits(this.result), temperature, topK);
        await this.append(this.vocab[draw(p)]); // appends, then runs the model on the longer text
      }
    } finally {
      this.generating = false;
      this.button.textContent = "Continue";
    }
  };

  function link(href) {
    if (document.querySelector('link[href="' + href + '"]')) return;
    el("link", {rel: "stylesheet", href: href}, document.head);
  }

  function init() {
    var roots = document.querySelectorAll("div.attnbook-inpage");
    if (!roots.length) return;
    link(HERE + "inpage.css");
    Array.prototype.forEach.call(roots, function (root) { root.attnbookWidget = new Widget(root); });
  }

  window.attnbookInpage = {sampleProbs: sampleProbs, promptIds: promptIds, chatIds: chatIds};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

// The book's math typeset once, when the book is built, by MathJax 3 (npm's mathjax-full) in Node: the pages
// carry MathJax's SVG output and need neither MathJax nor its fonts in the browser. Used by mathjax.py.
//
// Reads JSON from stdin: {"pages": [[{"tex": ..., "display": true|false}, ...], ...]};
// writes JSON to stdout: {"pages": [{"html": [...], "glyphs": ..., "css": ..., "errors": [...]}, ...]}: for
// each page, the HTML of each of its formulas (a <mjx-container> holding an SVG, and the MathML that screen
// readers read), one hidden SVG of the glyphs its formulas use (MathJax's global font cache: each glyph's
// shape once per page), and MathJax's stylesheet.
"use strict";

const path = require("path");
const modules = process.env.ATTNBOOK_NODE_MODULES || path.resolve(__dirname, "../../../node_modules");
const mj = (name) => require(path.join(modules, "mathjax-full/js", name));
const { mathjax } = mj("mathjax.js");
const { TeX } = mj("input/tex.js");
const { SVG } = mj("output/svg.js");
const { liteAdaptor } = mj("adaptors/liteAdaptor.js");
const { RegisterHTMLHandler } = mj("handlers/html.js");
const { AssistiveMmlHandler } = mj("a11y/assistive-mml.js");
const { AllPackages } = mj("input/tex/AllPackages.js");

function read(stream) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    stream.on("data", (c) => chunks.push(c));
    stream.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    stream.on("error", reject);
  });
}

async function main() {
  const request = JSON.parse(await read(process.stdin));
  const adaptor = liteAdaptor();
  AssistiveMmlHandler(RegisterHTMLHandler(adaptor));
  // What the book's MathJax did in the browser (myst-parser's settings): every TeX package of MathJax's
  // combined component, no numbering of its own (Sphinx numbers the equations).
  const packages = AllPackages.filter((p) => !["bussproofs", "autoload", "require"].includes(p));
  const pages = request.pages.map((items) => {
    const tex = new TeX({ packages });
    const svg = new SVG({ fontCache: "global" });
    const doc = mathjax.document("", { InputJax: tex, OutputJax: svg });
    const errors = [];
    const html = items.map((item) => {
      const node = doc.convert(item.tex, { display: item.display });
      const out = adaptor.outerHTML(node);
      if (out.includes('data-mjx-error') || out.includes("<mjx-merror")) errors.push(item.tex);
      return out;
    });
    const glyphs = adaptor.outerHTML(svg.fontCache.getCache());
    const css = adaptor.textContent(svg.styleSheet(doc));
    return { html, glyphs, css, errors };
  });
  process.stdout.write(JSON.stringify({ pages }));
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});

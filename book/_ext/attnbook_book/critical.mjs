// Each page's first screen styled by the page itself: Beasties (npm) keeps, from each of the page's
// stylesheets, the rules whose selectors match an element of that page, and writes them in a <style> just
// before the stylesheet's <link>; the <link> then loads without holding up the first paint (media="print",
// switched to "all" once loaded; a <noscript> copy for readers without JavaScript). Used by critical.py.
//
//   node critical.mjs SITE PAGE.html ...      (pages relative to SITE; each rewritten in place)
//
// Two things a page's HTML does not show, kept all the same:
// - the colour modes: a rule for html[data-theme="dark"] (or "light") is kept when the rest of its selector
//   matches, since the mode is chosen in the reader's browser, before the first paint;
// - the elements the theme's and extensions' scripts add as the page opens (ALWAYS below).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.ATTNBOOK_NODE_MODULES || path.resolve(import.meta.dirname, "../../../node_modules");
const { default: Beasties } = await import(pathToFileURL(path.join(modules, "beasties/dist/index.mjs")).href);

// The colour mode, its choice and Bootstrap's copy of it: attributes the theme's first script sets.
const MODE = /\[data-(?:theme|mode|bs-theme)=["']?\w+["']?\]/g;
const ROOT = /^\s*(?:html|:root)(?::[\w-]+(?:\([^()]*\))?)*\s*(?:>\s*)?(?=[^\s>+~])(?<=[\s>])/;
const TBODY = /\s*>\s*tbody\s*>\s*/g;
const PSEUDO_ONLY = /(^|[\s>+~])(?::[\w-]+(?:\([^()]*\))?)+(?=[\s>+~]|$)/g;
// Selectors of what scripts add as the page opens: copy buttons and their tooltips, the toggles of hidden
// cells.
const ALWAYS = [/attnbook-render-all/, /copybtn/, /o-tooltip/, /toggle-hidden/, /toggle-button/];

// A rule for the whole page in one colour mode (html[data-theme=dark]{--pst-color-text-base:...}): kept. Beasties
// matches selectors inside the <html> element, never the element itself; a RegExp is what allowRules takes.
class PageInMode extends RegExp {
  test(selector) {
    return /^(?:html)?(?::root)?$/.test(selector.replace(MODE, "").trim());
  }
}

class PageBeasties extends Beasties {
  constructor(site, page) {
    super({
      path: site,
      publicPath: "",
      preload: "media",
      noscriptFallback: true,
      inlineFonts: false, // the icons' fonts: ICON_FONTS below
      preloadFonts: false,
      pruneSource: false, // the stylesheets are shared by every page
      reduceInlineStyles: false, // the page's own <style>s (the math's, the tables') stay as they are
      mergeStylesheets: false, // one <style> before each <link>: the cascade keeps its order
      compress: true,
      allowRules: [...ALWAYS, new PageInMode("")],
      logLevel: "error",
    });
    this.site = site;
    this.dir = path.dirname(page);
  }

  // A stylesheet's href is relative to the page and may end with a version query (?v=..., ?digest=...).
  async getCssAsset(href) {
    const file = path.resolve(this.site, this.dir, href.split("?")[0]);
    return fs.existsSync(file) ? fs.readFileSync(file, "utf8") : undefined;
  }

  // The colour mode left out; a part of a selector made only of pseudo-classes (":not(li) > ul") stands for
  // any element, where Beasties would drop it and be left with a selector that matches nothing; a leading
  // "html " goes, since Beasties looks inside the <html> element (html .highlight .kn: .highlight .kn); and
  // "table > tbody > tr" matches a table written without <tbody>, which the browser adds (Sphinx's index).
  normalizeCssSelector(selector) {
    const bare = selector.replace(MODE, "").replace(PSEUDO_ONLY, "$1*").replace(ROOT, "").replace(TBODY, " ");
    return super.normalizeCssSelector(bare);
  }
}

// The theme's icons (on every page's first screen) are drawn from fonts written into the book's stylesheet as
// data: URLs (icons.py). Beasties keeps a sheet's @font-face only where the same sheet sets that font on an
// element, which the book's stylesheet does not: its @font-face rules go before its <link> as they are.
const BOOK_CSS = "attnbook/theme.css";
const ICON_FONTS = (site) =>
  (fs.readFileSync(path.join(site, "_static", BOOK_CSS), "utf8").match(/@font-face\{[^}]*\}/g) || []).join("");

function withIconFonts(html, fonts) {
  const link = new RegExp(`<link\\b[^>]*href="[^"]*_static/${BOOK_CSS}"[^>]*media="print"[^>]*>`);
  if (!fonts || !link.test(html)) return html;
  return html.replace(link, (tag) => `<style>${fonts}</style>${tag}`);
}

// The whole stylesheets are fetched once the first screen is painted, not with the page: a phone's slow network
// then carries the page's text first. Beasties leaves each <link> as media="print" (switched to "all" once
// loaded); its address moves to data-attnbook-href, and a script at the end of the page puts it back after
// the first frame. Without JavaScript the <noscript> copies load them.
const LATER = `<script>requestAnimationFrame(() => setTimeout(() => {
  for (const l of document.querySelectorAll("link[data-attnbook-href]")) l.href = l.dataset.attnbookHref;
}));</script>`;

function fetchAfterFirstPaint(html) {
  const deferred = /<link\b([^>]*?)\bhref="([^"]+)"([^>]*\bmedia="print"[^>]*\bonload="this\.media='all'"[^>]*)>/g;
  let n = 0;
  const out = html.replace(deferred, (_, a, href, b) => (n++, `<link${a}data-attnbook-href="${href}"${b}>`));
  return n ? out.replace(/<\/body>(?![\s\S]*<\/body>)/, `${LATER}\n</body>`) : out;
}

const [site, ...pages] = process.argv.slice(2);
const fonts = ICON_FONTS(site);
const sheets = new Map(); // bytes of the inlined rules per page, reported as JSON
for (const page of pages) {
  const file = path.join(site, page);
  const before = fs.readFileSync(file, "utf8");
  if (!before.includes('rel="stylesheet"')) continue;
  const after = fetchAfterFirstPaint(withIconFonts(await new PageBeasties(site, page).process(before), fonts));
  fs.writeFileSync(file, after);
  const inlined = [...after.matchAll(/<style>([^<]*)<\/style>/g)].reduce((n, m) => n + m[1].length, 0);
  sheets.set(page, inlined);
}
process.stdout.write(JSON.stringify(Object.fromEntries(sheets)));

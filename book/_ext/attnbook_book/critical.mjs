// Each page styled first by rules it carries itself: Beasties (npm) keeps, from each of the page's
// stylesheets, the rules whose selectors match an element of that page, and writes them in a <style> just
// before the stylesheet's <link>; the whole stylesheet is then fetched once the page is painted (below), and
// applies as before. Readers without JavaScript get the stylesheets from <noscript> copies. Used by
// critical.py.
//
//   node critical.mjs SITE PAGE.html ...      (pages relative to SITE; each rewritten in place)
//
// What a page's HTML does not show, kept all the same:
// - the colour modes: a rule for html[data-theme="dark"] (or "light") is kept when the rest of its selector
//   matches, since the mode is chosen in the reader's browser, before the first paint;
// - states the scripts set (an opened dialog or side panel, the current section, a scrolled page): a rule
//   for .bd-sidebar-primary[open] is kept where the page has a .bd-sidebar-primary;
// - the elements the theme's and extensions' scripts add as the page opens (ALWAYS below).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.ATTNBOOK_NODE_MODULES || path.resolve(import.meta.dirname, "../../../node_modules");
const { default: Beasties } = await import(pathToFileURL(path.join(modules, "beasties/dist/index.mjs")).href);

// The colour mode, its choice and Bootstrap's copy of it: attributes the theme's first script sets.
const MODE = /\[data-(?:theme|mode|bs-theme)=["']?\w+["']?\]/g;
// States that scripts set on elements the page has.
const STATE_SRC = String.raw`\[open\]|\[aria-current(?:=["']?\w+["']?)?\]|\.(?:show|active|scrolled)(?![\w-])`;
const STATE = new RegExp(STATE_SRC, "g");
const NOT_STATE = new RegExp(String.raw`:not\((?:${STATE_SRC})\)`, "g"); // .fade:not(.show): .fade
const STATE_ALONE = new RegExp(String.raw`(^|[\s>+~])(?:${STATE_SRC})`, "g"); // .nav .show>.a: .nav *>.a
const ROOT = /^\s*(?:html|:root)(?::[\w-]+(?:\([^()]*\))?)*\s*(?:>\s*)?(?=[^\s>+~])(?<=[\s>])/;
const TBODY = /\s*>\s*tbody\s*>\s*/g;
const PSEUDO_ONLY = /(^|[\s>+~])(?::[\w-]+(?:\([^()]*\))?)+(?=[\s>+~]|$)/g;
// Selectors of what scripts add as the page opens: copy buttons and their tooltips, the toggles of hidden
// cells and answers (togglebutton: .toggle, .toggle-hidden, .toggle-button, .tb-icon).
const ALWAYS = [/attnbook-render-all/, /copybtn/, /o-tooltip/, /\.toggle(?![\w-])|toggle-(?:hidden|button|details|chevron)|tb-icon/];

// A rule for the whole page in one colour mode (html[data-theme=dark]{--pst-color-text-base:...}): kept. Beasties
// matches selectors inside the <html> element, never the element itself; a RegExp is what allowRules takes.
class PageInMode extends RegExp {
  test(selector) {
    return /^(?:html)?(?::root)?$/.test(selector.replace(MODE, "").trim());
  }
}

const unparsed = []; // selectors Beasties could not read: the build fails on them (critical.py)

class PageBeasties extends Beasties {
  constructor(site, page) {
    super({
      path: site,
      publicPath: "",
      preload: "media",
      noscriptFallback: true,
      inlineFonts: false, // no @font-face from the stylesheets: the icons' fonts are added by withIconFonts
      preloadFonts: false,
      pruneSource: false, // the stylesheets are shared by every page
      reduceInlineStyles: false, // the page's own <style>s (the math's, the tables') stay as they are
      mergeStylesheets: false, // one <style> before each <link>: the cascade keeps its order
      compress: true,
      keyframes: "none", // the stylesheets bring them (Beasties' compressed from/to keyframes are broken)
      allowRules: [...ALWAYS, new PageInMode("")],
      logger: {
        warn: (message) => /Could not parse/.test(message) && unparsed.push(`${page}: ${message}`),
        error: (message) => unparsed.push(`${page}: ${message}`),
      },
    });
    this.site = site;
    this.dir = path.dirname(page);
  }

  // A stylesheet's href is relative to the page and may end with a version query (?v=..., ?digest=...).
  async getCssAsset(href) {
    const file = path.resolve(this.site, this.dir, href.split("?")[0]);
    return fs.existsSync(file) ? fs.readFileSync(file, "utf8") : undefined;
  }

  // Before matching: one line; the colour mode and the scripts' states left out; a part of a selector made
  // only of pseudo-classes (":not(li) > ul") stands for any element, where Beasties would drop it and be left
  // with a selector that matches nothing; a leading "html " goes, since Beasties looks inside the <html>
  // element (html .highlight .kn: .highlight .kn); and "table > tbody > tr" matches a table written without
  // <tbody>, which the browser adds (Sphinx's index).
  normalizeCssSelector(selector) {
    const bare = selector
      .replace(/\s+/g, " ")
      .replace(MODE, "")
      .replace(NOT_STATE, "")
      .replace(STATE_ALONE, "$1*")
      .replace(STATE, "")
      .replace(PSEUDO_ONLY, "$1*")
      .replace(ROOT, "")
      .replace(TBODY, " ");
    return super.normalizeCssSelector(bare);
  }
}

// The theme's icons (on every page's first screen) are drawn from fonts written into the book's stylesheet as
// data: URLs (icons.py). The page carries those @font-face rules too, before that stylesheet's <link>, so that
// the icons are drawn at the first paint without fetching anything (the theme's own @font-face rules, which
// name Font Awesome's font files, are not copied: inlineFonts above).
const BOOK_CSS = "attnbook/theme.css";
const ICON_FONTS = (site) =>
  (fs.readFileSync(path.join(site, "_static", BOOK_CSS), "utf8").match(/@font-face\s*\{[^}]*\}/g) || []).join("");

function withIconFonts(html, fonts, page) {
  const link = new RegExp(`<link\\b[^>]*[\\s"]href="[^"]*_static/${BOOK_CSS}(?:\\?[^"]*)?"[^>]*media="print"[^>]*>`);
  if (!fonts) return html;
  if (!link.test(html)) throw new Error(`${page}: no deferred <link> to ${BOOK_CSS} to put the icons' fonts before`);
  return html.replace(link, (tag) => `<style>${fonts}</style>${tag}`);
}

// The whole stylesheets are fetched once the page is painted, not with it: a phone's slow network then
// carries the page's text first. Each <link> Beasties left (media="print", onload="this.media='all'") has
// its address moved to data-attnbook-href and loses its onload attribute; the script at the end of the page
// puts the address back after the first frame (at once in a page opened in a background tab, where no frame
// is drawn; at the latest after 2 s), and turns the link on when it has loaded (so that a
// Content-Security-Policy allowing this script, and the one resolving the colour mode, by their hashes is
// enough).
const LATER = `<script>(() => {
  let done = false;
  const fetchAll = () => {
    if (done) return;
    done = true;
    for (const l of document.querySelectorAll("link[data-attnbook-href]")) {
      l.addEventListener("load", () => { l.media = "all"; }, { once: true });
      l.href = l.dataset.attnbookHref;
    }
  };
  if (document.visibilityState === "hidden") fetchAll();
  else requestAnimationFrame(() => setTimeout(fetchAll));
  setTimeout(fetchAll, 2000);
})();</script>`;

function fetchAfterFirstPaint(html) {
  const deferred = /<link\b([^>]*?[\s"])href="([^"]+)"([^>]*\bmedia="print"[^>]*\bonload="this\.media='all'"[^>]*)>/g;
  let n = 0;
  const out = html.replace(deferred, (_, a, href, b) => {
    n++;
    return `<link${a}data-attnbook-href="${href}"${b.replace(/\s*onload="this\.media='all'"/, "")}>`;
  });
  return n ? out.replace(/<\/body>(?![\s\S]*<\/body>)/, `${LATER}\n</body>`) : out;
}

// Pages whose content the scripts write (the search page's results): they keep their stylesheets as they are.
const SKIP = new Set(["search.html"]);
const PROCESSED = "data-attnbook-href"; // a page already rewritten (a build into an existing folder)

const [site, ...pages] = process.argv.slice(2);
const fonts = ICON_FONTS(site);
const sizes = new Map(); // characters of CSS in each page's <style>s, reported as JSON
for (const page of pages) {
  const file = path.join(site, page);
  const before = fs.readFileSync(file, "utf8");
  if (SKIP.has(page) || !before.includes('rel="stylesheet"') || before.includes(PROCESSED)) continue;
  const styled = (await new PageBeasties(site, page).process(before)).replace(" data-beasties-container", "");
  const after = fetchAfterFirstPaint(withIconFonts(styled, fonts, page));
  fs.writeFileSync(file, after);
  sizes.set(page, [...after.matchAll(/<style>([^<]*)<\/style>/g)].reduce((n, m) => n + m[1].length, 0));
}
if (unparsed.length) {
  process.stderr.write(`Beasties could not read these selectors:\n${unparsed.join("\n")}\n`);
  process.exit(1);
}
process.stdout.write(JSON.stringify(Object.fromEntries(sizes)));

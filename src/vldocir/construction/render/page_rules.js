// The page rules of clean.js (included there): clean-up that selectors cannot express, by name (see
// rules.py: PAGE_RULES, which source runs which, and the page feature each one targets). Each rule
// gets `api.remove(subrule, el, opts)` (recorded per subrule; refuses formulas unless opts.formulaOk)
// and `api.changed(subrule, n)` (elements changed rather than removed).
const PAGE_RULES = {
  // MediaWiki math: each formula is an SVG fallback <img> (remote: never loads offline) next to its
  // MathML, which the page hides (inline display:none, or the a11y clip of the missing stylesheet).
  // Where the image did not load, show the MathML (Chromium draws MathML) and drop the dead image.
  mediawiki_math(api) {
    for (const f of document.querySelectorAll('.mwe-math-element')) {
      const mml = f.querySelector('.mwe-math-mathml-a11y, .mwe-math-mathml-inline, .mwe-math-mathml-display');
      const math = mml && mml.querySelector('math');
      if (!math) continue;
      const img = f.querySelector('img.mwe-math-fallback-image-inline, img.mwe-math-fallback-image-display');
      if (img && img.complete && img.naturalWidth > 0) continue;  // the image draws the formula
      const block = mml.classList.contains('mwe-math-mathml-display');
      for (const [k, v] of [['display', block ? 'block' : 'inline'], ['position', 'static'], ['clip', 'auto'],
                            ['clip-path', 'none'], ['width', 'auto'], ['height', 'auto'], ['overflow', 'visible'],
                            ['opacity', '1'], ['visibility', 'visible']]) mml.style.setProperty(k, v, 'important');
      if (block) math.setAttribute('display', 'block');
      api.changed('mediawiki:show_mathml');
      if (img) api.remove('mediawiki:dead_fallback_image', img, {formulaOk: true});
    }
  },

  // KaTeX without its stylesheet (remote, missing offline): the MathML copy, normally clipped away,
  // and the HTML rendering, normally positioned by the CSS (without it fractions and scripts fall
  // flat), both show. Keep the MathML (Chromium draws it), drop the HTML rendering.
  katex_mathml(api) {
    for (const k of document.querySelectorAll('.katex')) {
      const mml = k.querySelector(':scope > .katex-mathml');
      const html = k.querySelector(':scope > .katex-html');
      if (!mml || !html || !mml.querySelector('math') || getComputedStyle(mml).position === 'absolute') continue;
      api.remove('katex:unstyled_html', html, {formulaOk: true});
    }
  },

  // SEC filings printed to HTML (EDGAR primary documents): the printed pages' furniture. Page
  // boundaries are the page-break markers (page-break-before/after: always; if there is none, <hr>).
  // The document is read as a sequence of items: text lines (elements without block children),
  // blocks (tables, elements with media) and small tables (at most two rows and four cells holding
  // text: page headers and footers laid out as tables; their cells are their lines). Candidates are
  // the items next to a boundary: the first / last three items of a printed page, counted from the
  // boundary and only through short lines, small tables and text-less blocks (a logo), so a line
  // behind a paragraph is never a candidate (nor is anything at the document's start):
  //   sec:page_number   a line that is only a page number (12, - 12 -, Page 12, Page 12 of 40, ii, A-3);
  //   sec:continued     a short line ending in "(continued)" at a page top, "Continued on next page" at a bottom;
  //   sec:running_head  a short line (at most 80 characters) at the edges of at least three printed
  //                     pages and nowhere else: a line that also stands inside a page is content (a
  //                     letter's date repeated in the notice), as are a line that is only a date and
  //                     a heading at a page top followed by the body it heads (a question asked
  //                     again). A number in it may follow the pages ("12 | 2024 Proxy Statement");
  //   sec:page_break    the page-break <hr> itself (an <hr> without page-break style stays).
  // A small table goes whole when each of its cells is furniture (all are layout, removed with
  // {furnitureTable: true}: no data table), and so does a one-row table laid out like the running
  // heads of other pages: at a page edge, with a running head or page number in the same cell of
  // one-row tables with as many cells holding text at the edges of three or more printed pages
  // (its other cells, e.g. the company's name, also found in a signature, or a 'Table of Contents'
  // link, also the title of the contents, go with it). Any other table stays, as do lines in tables.
  sec_page_furniture(api) {
    const EDGE = 3, MAX_HEAD = 80, MAX_EDGE_LINE = 120, MIN_REPEATS = 3, TABLE_ROWS = 2, TABLE_CELLS = 4;
    // zero-width characters (in the empty cells of some filing agents' tables) are no text
    const norm = s => (s || '').replace(/[\u200b-\u200d\u2060\ufeff]/g, '').replace(/\s+/g, ' ').trim();
    const isBreak = (el, side) => {
      const cs = getComputedStyle(el);
      const v = side === 'before' ? [cs.breakBefore, cs.pageBreakBefore] : [cs.breakAfter, cs.pageBreakAfter];
      return v.some(x => x === 'page' || x === 'always' || x === 'left' || x === 'right');
    };
    const styled = Array.from(document.body.querySelectorAll('*')).some(el => isBreak(el, 'before') || isBreak(el, 'after'));
    const inline = el => getComputedStyle(el).display.startsWith('inline');
    const MEDIA = 'img, svg, canvas, video, picture, table';
    const HEADING = 'h1, h2, h3, h4, h5, h6, [role=heading]';
    // The cells holding text of a small table (null for any other table).
    const smallTable = t => {
      if (t.querySelector('table')) return null;
      const rows = Array.from(t.rows).filter(r => norm(r.innerText));
      const cells = rows.flatMap(r => Array.from(r.cells)).map(c => ({el: c, text: norm(c.innerText)})).filter(c => c.text);
      const small = cells.length && rows.length <= TABLE_ROWS && cells.length <= TABLE_CELLS && cells.every(c => c.text.length <= MAX_HEAD);
      return small ? {cells: cells, rows: rows.length} : null;
    };
    // The document as a sequence of items and page breaks.
    const seq = [];
    (function walk(el) {
      const t = el.localName;
      if (t === 'script' || t === 'style' || t === 'head' || getComputedStyle(el).display === 'none') return;
      if (styled ? isBreak(el, 'before') : t === 'hr') seq.push({kind: 'break', el: el});
      if (t === 'hr') { if (styled && isBreak(el, 'after')) seq.push({kind: 'break', el: el}); return; }
      if (t === 'table') {
        const small = smallTable(el);
        seq.push(small ? {kind: 'table', el: el, cells: small.cells, rows: small.rows} : {kind: 'block', el: el, text: null});
      } else {
        const blockKids = Array.from(el.children).some(c => !inline(c) && c.localName !== 'br');
        if (!blockKids && el !== document.body) {
          const text = norm(el.innerText);
          if (text && !el.querySelector(MEDIA)) seq.push({kind: 'line', el: el, text: text, cells: [{el: el, text: text}]});
          else if (text || el.querySelector(MEDIA)) seq.push({kind: 'block', el: el, text: text});
        } else {
          for (const c of Array.from(el.children)) walk(c);
        }
      }
      if (styled && isBreak(el, 'after')) seq.push({kind: 'break', el: el});
    })(document.body);
    const breaks = seq.filter(s => s.kind === 'break');
    if (!breaks.length) return;
    // Printed pages: runs of items between breaks. An item is at a page's top (bottom) edge when it
    // is among the first (last) EDGE items and only short lines, small tables and text-less blocks
    // lie between it and the boundary. The document's start is no boundary: its first page's top
    // items are 'start' (neither edge nor inside a page).
    const pages = [[]];
    for (const s of seq) { if (s.kind === 'break') pages.push([]); else pages[pages.length - 1].push(s); }
    const passable = s => s.kind === 'table' || (s.kind === 'line' && s.text.length <= MAX_EDGE_LINE) || (s.kind === 'block' && s.text === '');
    pages.forEach((items, p) => {
      items.forEach((s, i) => { s.page = p; s.index = i; s.top = false; s.bottom = false; s.start = false; });
      for (let i = 0; i < Math.min(EDGE, items.length) && passable(items[i]); i++) items[i][p > 0 ? 'top' : 'start'] = true;
      for (let i = items.length - 1; i >= Math.max(0, items.length - EDGE) && passable(items[i]); i--) items[i].bottom = true;
    });
    const lineItems = seq.filter(s => s.kind === 'line' || s.kind === 'table');
    const edge = s => s.top || s.bottom;
    // Every candidate line: {cell: {el, text}, item} (a small table's cells share its item).
    const candidates = lineItems.filter(edge).flatMap(s => s.cells.map(c => ({cell: c, item: s})));
    const PAGE_NO = /^(page\s+)?[-\u2013\u2014]?\s*(\d{1,4}|(?=[ivxlcdm])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})|[A-Z]-\d{1,3})\s*[-\u2013\u2014]?(\s+of\s+\d{1,4})?$/i;
    const CONT_TOP = /\(continued\)$/i, CONT_BOTTOM = /^\(?continued (on|to) (the )?(next|following) page\)?\.?$/i;
    const MONTH = '(jan(uary)?|feb(ruary)?|mar(ch)?|apr(il)?|may|june?|july?|aug(ust)?|sep(t|tember)?|oct(ober)?|nov(ember)?|dec(ember)?)\\.?';
    const DATE = new RegExp('^(dated:?\\s+|as of\\s+)?(' + MONTH + '\\s+\\d{1,2},?\\s+\\d{4}|\\d{1,2}\\s+' + MONTH + ',?\\s+\\d{4}|' +
                            MONTH + ',?\\s+\\d{4}|\\d{1,2}/\\d{1,2}/\\d{2,4})\\.?$', 'i');
    // Running heads: the same line at the edges of MIN_REPEATS printed pages and never inside a
    // page; a line with a number in it ("12 | 2024 Proxy Statement") counts as the same line if the
    // number follows the pages (it minus the printed page's index is one constant), so that
    // "(Proposal No. 1)", "(Proposal No. 2)" heading successive sections are no running head.
    const keys = t => { const l = t.toLowerCase(); return /\d/.test(l) ? [l, l.replace(/\d+/g, '#')] : [l]; };
    const heads = new Map();  // key -> [{page, nums}] at page edges
    const inside = new Set();  // keys of lines that stand inside a page
    for (const s of lineItems) {
      for (const c of s.cells) {
        if (c.text.length > MAX_HEAD) continue;
        const nums = (c.text.match(/\d+/g) || []).map(Number);
        for (const k of keys(c.text)) {
          if (edge(s)) { if (!heads.has(k)) heads.set(k, []); heads.get(k).push({page: s.page, nums: nums}); }
          else if (!s.start) inside.add(k);
        }
      }
    }
    const repeated = t => new Set((heads.get(t.toLowerCase()) || []).map(o => o.page)).size >= MIN_REPEATS;
    // A heading at a page top followed on its page by something other than repeated edge lines: the
    // body it heads.
    const headsBody = (c, s) => {
      if (!s.top || !(c.el.matches(HEADING) || c.el.closest(HEADING))) return false;
      const next = pages[s.page][s.index + 1];
      return !!next && !((next.kind === 'line' || next.kind === 'table') && next.cells.every(x => repeated(x.text)));
    };
    const isHead = (c, s) => {
      const t = c.text.toLowerCase();
      if (DATE.test(c.text) || headsBody(c, s)) return false;
      if (!inside.has(t) && repeated(t)) return true;
      const pattern = t.replace(/\d+/g, '#');
      if (pattern === t || inside.has(pattern)) return false;
      const nums = (t.match(/\d+/g) || []).map(Number);
      const same = heads.get(pattern) || [];
      // some number of the line (e.g. the last of "Company | 2025 Proxy Statement | 12") follows the pages
      return nums.some((n, j) => new Set(same.filter(o => o.nums[j] - o.page === n - s.page).map(o => o.page)).size >= MIN_REPEATS);
    };
    // A page number is only believed where the document numbers its pages (at least MIN_REPEATS
    // printed pages carry one) and, if arabic, where it is no larger than the number of pages + 5
    // (a line "2019" at a page top is a year).
    const numbered = c => {
      const m = PAGE_NO.exec(c.text);
      return !!m && (!/^\d+$/.test(m[2]) || parseInt(m[2], 10) <= pages.length + 5);
    };
    const numberedPages = new Set(candidates.filter(x => numbered(x.cell)).map(x => x.item.page));
    // What each candidate line is (a sub-rule name), or null: content.
    const furniture = (c, s) => {
      const text = c.text;
      if (PAGE_NO.test(text)) return numbered(c) && numberedPages.size >= MIN_REPEATS ? 'sec:page_number' : null;
      if ((s.top && text.length <= MAX_EDGE_LINE && (CONT_TOP.test(text) || /^\(?continued\)?$/i.test(text))) ||
          (s.bottom && CONT_BOTTOM.test(text))) return 'sec:continued';
      return text.length <= MAX_HEAD && isHead(c, s) ? 'sec:running_head' : null;
    };
    const edgeItems = lineItems.filter(edge).map(s => ({item: s, subs: s.cells.map(c => furniture(c, s))}));
    // One-row tables laid out alike: '<cells holding text>/<cell>/<its running head, or # and the
    // page number less the printed page's index>' of each running head or page number cell -> the
    // printed pages holding one. (A page number must follow the pages: the last rows of a contents
    // laid out as one-row tables, at a page's bottom, are no footers.)
    const ANCHOR = new Set(['sec:running_head', 'sec:page_number']);
    const anchorText = (s, j, sub) => {
      if (sub === 'sec:running_head') return s.cells[j].text.toLowerCase().replace(/\d+/g, '#');
      const n = /\d+/.exec(s.cells[j].text);
      return '#' + (n ? parseInt(n[0], 10) - s.page : s.cells[j].text.toLowerCase());
    };
    const anchors = ({item, subs}) => item.kind !== 'table' || item.rows !== 1 ? [] : subs.flatMap((sub, j) => !ANCHOR.has(sub) ? [] :
      [item.cells.length + '/' + j + '/' + anchorText(item, j, sub)]);
    const layouts = new Map();
    for (const x of edgeItems) for (const k of anchors(x)) { if (!layouts.has(k)) layouts.set(k, new Set()); layouts.get(k).add(x.item.page); }
    const repeatedLayout = x => anchors(x).some(k => layouts.get(k).size >= MIN_REPEATS) && !isDataTable(x.item.el);
    for (const x of edgeItems) {
      const {item: s, subs} = x;
      if (s.kind === 'line') { if (subs[0]) api.remove(subs[0], s.el); continue; }
      if (subs.every(Boolean) || repeatedLayout(x)) {
        api.remove(subs.includes('sec:running_head') ? 'sec:running_head' : subs.find(Boolean), s.el, {furnitureTable: true});
      }
    }
    for (const b of breaks) if (b.el.localName === 'hr' && styled && b.el.isConnected) api.remove('sec:page_break', b.el);
  },

  // PubMed Central reader controls named by their whole text (links and buttons only, never a
  // heading or a paragraph): "Done" closing a dialog, "Open in a new tab", "Go to:", "Copy", ...
  pmc_reader_controls(api) {
    const CONTROLS = /^(done|close|dismiss|copy|cite|share|permalink|collections|add to collections|links|open in a new tab|go to:?|back to top|download \.nbib|download \.ris|show available content in|view on publisher site)$/i;
    for (const el of Array.from(document.body.querySelectorAll('a, button, [role=button], summary'))) {
      if (!el.isConnected) continue;
      const text = (el.innerText || '').replace(/\s+/g, ' ').trim();
      if (CONTROLS.test(text)) api.remove('pubmed:reader_control', el);
    }
  },

  // PubMed Central dialogs whose role=dialog sits on their title heading (PubReader's download
  // dialog): the [role=dialog] selector leaves such headings to this rule, which removes the
  // heading's container with the dialog's body when the container holds nothing else (no other
  // heading, no figure, at most 600 characters; formulas and data tables are kept by clean.js),
  // else the heading alone.
  pmc_dialog_titles(api) {
    const HEADING = 'h1, h2, h3, h4, h5, h6, [role=heading]';
    const LANDMARK = 'main, article, [role=main], #jr-content';
    for (const h of Array.from(document.querySelectorAll(':is(h1, h2, h3, h4, h5, h6)[role=dialog]'))) {
      if (!h.isConnected) continue;
      const box = h.parentElement;
      const alone = box && box !== document.body && !box.matches(LANDMARK) && !box.querySelector(LANDMARK) &&
        !Array.from(box.querySelectorAll(HEADING)).some(x => x !== h) && !box.querySelector('figure, [role=figure]') &&
        (box.innerText || '').replace(/\s+/g, ' ').trim().length <= 600;
      api.remove(alone ? 'pubmed:dialog_with_body' : 'pubmed:dialog_title', alone ? box : h);
    }
  },

  // Share links (Facebook, X / Twitter, LinkedIn, Google+, Reddit, Pinterest, e-mailing a link),
  // known by where they point, each with the box around it that holds nothing but share links
  // and a "Share" label.
  pmc_share_links(api) {
    const SHARE = /^(https?:)?\/\/([\w-]+\.)*(facebook\.com\/sharer|twitter\.com\/(intent|share|home\?status)|x\.com\/intent|linkedin\.com\/(shareArticle|sharing)|plus\.google\.com\/share|reddit\.com\/submit|pinterest\.com\/pin\/create)|^mailto:\?/i;
    const LABEL = /^(share( this( article| page)?)?|follow us)?:?$/i;
    const isShare = a => SHARE.test(a.getAttribute('href') || '');
    // the text of `el` outside share links
    const rest = el => {
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      let out = '';
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const a = n.parentElement && n.parentElement.closest('a');
        if (!(a && el.contains(a) && isShare(a))) out += n.textContent;
      }
      return out.replace(/\s+/g, ' ').trim();
    };
    for (const a of Array.from(document.querySelectorAll('a[href]')).filter(isShare)) {
      if (!a.isConnected) continue;
      let box = a;
      while (box.parentElement && box.parentElement !== document.body && LABEL.test(rest(box.parentElement)) &&
             !box.parentElement.querySelector('h1, h2, h3, h4, h5, h6, p, figure, table, math')) box = box.parentElement;
      api.remove('pubmed:share_links', box);
    }
  },
};

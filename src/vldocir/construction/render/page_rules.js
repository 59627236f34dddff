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
  // Only text lines at a printed page's top or bottom (the first / last three lines around a
  // boundary), outside tables, holding no image, are candidates:
  //   sec:page_number   a line that is only a page number (12, - 12 -, Page 12, Page 12 of 40, ii, A-3);
  //   sec:continued     a short line ending in "(continued)" at a page top, "Continued on next page" at a bottom;
  //   sec:running_head  a short line (at most 80 characters) found at page tops or bottoms of at least
  //                     three printed pages (a number in it may follow the pages: "12 | 2024 Proxy Statement");
  //   sec:page_break    the page-break <hr> itself (an <hr> without page-break style stays).
  sec_page_furniture(api) {
    const EDGE = 3, MAX_HEAD = 80, MIN_REPEATS = 3;
    const norm = s => (s || '').replace(/\s+/g, ' ').trim();
    const isBreak = (el, side) => {
      const cs = getComputedStyle(el);
      const v = side === 'before' ? [cs.breakBefore, cs.pageBreakBefore] : [cs.breakAfter, cs.pageBreakAfter];
      return v.some(x => x === 'page' || x === 'always' || x === 'left' || x === 'right');
    };
    const styled = Array.from(document.body.querySelectorAll('*')).some(el => isBreak(el, 'before') || isBreak(el, 'after'));
    const inline = el => getComputedStyle(el).display.startsWith('inline');
    const MEDIA = 'img, svg, canvas, video, picture, table';
    // The document as a sequence of lines, tables and page breaks.
    const seq = [];
    (function walk(el) {
      const t = el.localName;
      if (t === 'script' || t === 'style' || t === 'head' || getComputedStyle(el).display === 'none') return;
      if (styled ? isBreak(el, 'before') : t === 'hr') seq.push({kind: 'break', el: el});
      if (t === 'hr') { if (styled && isBreak(el, 'after')) seq.push({kind: 'break', el: el}); return; }
      if (t === 'table') { seq.push({kind: 'block', el: el}); }
      else {
        const blockKids = Array.from(el.children).some(c => !inline(c) && c.localName !== 'br');
        if (!blockKids && el !== document.body) {
          const text = norm(el.innerText);
          if (text || el.querySelector(MEDIA)) seq.push({kind: text && !el.querySelector(MEDIA) ? 'line' : 'block', el: el, text: text});
        } else {
          for (const c of Array.from(el.children)) walk(c);
        }
      }
      if (styled && isBreak(el, 'after')) seq.push({kind: 'break', el: el});
    })(document.body);
    const breaks = seq.filter(s => s.kind === 'break');
    if (!breaks.length) return;
    // Printed pages: runs of lines and blocks between breaks; the lines at their edges are candidates.
    const pages = [[]];
    for (const s of seq) { if (s.kind === 'break') pages.push([]); else pages[pages.length - 1].push(s); }
    const edges = [];  // {line, page, top}
    pages.forEach((items, p) => {
      items.forEach((s, i) => {
        const top = i < EDGE && p > 0, bottom = i >= items.length - EDGE;
        if (s.kind === 'line' && (top || bottom) && !s.el.closest('table')) edges.push({s: s, page: p, top: top, bottom: bottom});
      });
    });
    const PAGE_NO = /^(page\s+)?[-\u2013\u2014]?\s*(\d{1,4}|(?=[ivxlcdm])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})|[A-Z]-\d{1,3})\s*[-\u2013\u2014]?(\s+of\s+\d{1,4})?$/i;
    const CONT_TOP = /\(continued\)$/i, CONT_BOTTOM = /^\(?continued (on|to) (the )?(next|following) page\)?\.?$/i;
    // Running heads: the same line at the edges of MIN_REPEATS printed pages; a line with a number in
    // it ("12 | 2024 Proxy Statement") counts as the same line if the number follows the pages (it
    // minus the printed page's index is one constant), so that "(Proposal No. 1)", "(Proposal No. 2)"
    // heading successive sections are no running head.
    const heads = new Map();  // key -> [{page, nums}]
    for (const e of edges) {
      if (e.s.text.length > MAX_HEAD) continue;
      const t = e.s.text.toLowerCase(), nums = (t.match(/\d+/g) || []).map(Number);
      for (const k of nums.length ? [t, t.replace(/\d+/g, '#')] : [t]) {
        if (!heads.has(k)) heads.set(k, []);
        heads.get(k).push({page: e.page, nums: nums});
      }
    }
    const isHead = e => {
      const t = e.s.text.toLowerCase();
      if (new Set(heads.get(t).map(o => o.page)).size >= MIN_REPEATS) return true;
      const nums = (t.match(/\d+/g) || []).map(Number);
      const same = heads.get(t.replace(/\d+/g, '#')) || [];
      // some number of the line (e.g. the last of "Company | 2025 Proxy Statement | 12") follows the pages
      return nums.some((n, j) => new Set(same.filter(o => o.nums[j] - o.page === n - e.page).map(o => o.page)).size >= MIN_REPEATS);
    };
    // A page number is only believed where the document numbers its pages (at least MIN_REPEATS
    // printed pages carry one) and, if arabic, where it is no larger than the number of pages + 5
    // (a line "2019" at a page top is a year).
    const numbered = e => {
      const m = PAGE_NO.exec(e.s.text);
      return !!m && (!/^\d+$/.test(m[2]) || parseInt(m[2], 10) <= pages.length + 5);
    };
    const numberedPages = new Set(edges.filter(numbered).map(e => e.page));
    for (const e of edges) {
      const text = e.s.text;
      if (PAGE_NO.test(text)) { if (numbered(e) && numberedPages.size >= MIN_REPEATS) api.remove('sec:page_number', e.s.el); }
      else if ((e.top && text.length <= 120 && (CONT_TOP.test(text) || /^\(?continued\)?$/i.test(text))) ||
               (e.bottom && CONT_BOTTOM.test(text))) api.remove('sec:continued', e.s.el);
      else if (text.length <= MAX_HEAD && isHead(e)) api.remove('sec:running_head', e.s.el);
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
};

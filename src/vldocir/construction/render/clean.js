// Step 2 (cleanup.py): the clean-up, rule by rule: the clutter selectors of the document's source,
// its page rules (page_rules.js), position:fixed elements, invisible elements. Formulas and data
// tables are content: no selector or page rule removes an element that is, holds or lies inside a
// formula, or that is or holds a data table (isDataTable, tables.js; such elements are kept and
// counted as kept_formula, kept_table); only a page rule written for one formula renderer may
// rework a formula's insides, and only a page rule that has found a table to be page furniture may
// remove it (opts.furnitureTable). A list item or list that a removal leaves empty goes too (kind
// 'emptied', under the rule that emptied it). Returns the removal record: one entry per rule that
// matched anything, with the content elements its removals held (counted before removing) and the
// texts of its first three removals, and the selectors the browser rejected.
([selectors, pageRules, removeFixed]) => {
  // @include formula.js
  // @include tables.js
  // @include page_rules.js
  const root = document.body || document.documentElement;
  const entries = new Map();
  const bad = [];
  const entry = (rule, source, kind) => {
    const key = kind + '\u0000' + rule;
    if (!entries.has(key)) entries.set(key, {rule: rule, source: source, kind: kind, removed: 0, kept_formula: 0,
                                             kept_table: 0, changed: 0, content: {}, samples: [], kept_samples: []});
    return entries.get(key);
  };
  const protectedEl = el => el === document.body || el === document.documentElement || el === document.head;
  const norm = s => (s || '').replace(/\s+/g, ' ').trim();
  // The content elements of `el`'s subtree: data tables (isDataTable; a table that a page rule
  // removes as page furniture counts as layout_table), figures, images, headlines, paragraphs and
  // formulas (once: a formula's insides are not formulas).
  function contentOf(el, furnitureTable) {
    const c = {};
    const add = k => { c[k] = (c[k] || 0) + 1; };
    for (const d of [el, ...el.getElementsByTagName('*')]) {
      const t = d.localName;
      if (isFormula(d)) { if (!(d.parentElement && formulaOf(d.parentElement))) add('formula'); continue; }
      if (t === 'table') {
        if (furnitureTable && d === el) add('layout_table');
        else if (isDataTable(d)) add('table');
      } else if (t === 'figure' || d.getAttribute('role') === 'figure') add('figure');
      else if (t === 'img' || t === 'canvas' || t === 'video' || (t === 'svg' && !d.parentElement.closest('svg'))) {
        if (!formulaOf(d)) add('image');
      } else if (/^h[1-6]$/.test(t)) add('headline');
      else if (t === 'p') add('paragraph');
    }
    return c;
  }
  // Remove `el` for rule `e` unless it touches a formula (opts.formulaOk: a formula's own insides,
  // for rules that rework one renderer's formulas) or, for a selector or page rule, it is or holds a
  // data table (opts.furnitureTable: `el` is a table that the rule found to be page furniture).
  // Returns whether it was removed.
  function removeFor(e, el, opts) {
    opts = opts || {};
    if (!el.isConnected || protectedEl(el)) return false;
    if (!opts.formulaOk && touchesFormula(el)) { e.kept_formula++; return false; }
    const guarded = e.kind === 'selector' || e.kind === 'page_rule';
    if (guarded && !opts.furnitureTable && holdsDataTable(el)) {
      e.kept_table++;
      if (e.kept_samples.length < 3) e.kept_samples.push(norm(el.innerText || el.textContent).slice(0, 80));
      return false;
    }
    for (const [k, n] of Object.entries(contentOf(el, opts.furnitureTable))) e.content[k] = (e.content[k] || 0) + n;
    if (e.samples.length < 3) {
      const text = norm(el.innerText || el.textContent);
      if (text) e.samples.push(text.slice(0, 80));
    }
    const parent = el.parentElement;
    el.remove();
    e.removed++;
    dropEmptiedLists(e, parent);
    return true;
  }
  // A list item left with nothing to show by a removal (its only content was removed, alone or inside
  // wrappers it left empty: a bullet with nothing after it) goes, and so does a list left without items; recorded per rule that emptied
  // them, as kind 'emptied'. Items and lists that hold text, a picture, a formula, a table or a
  // control stay.
  const SHOWS = 'img, svg, canvas, video, picture, iframe, object, embed, math, mjx-container, table, input, select, textarea, button, hr';
  const LISTS = /^(li|ul|ol|menu)$/;
  const showsNothing = (x) => !protectedEl(x) && !norm(x.innerText) && !x.matches(SHOWS) && !x.querySelector(SHOWS) &&
    !touchesFormula(x);
  function dropEmptiedLists(e, p) {
    // through the wrappers the removal left empty (li > p > removed) up to the nearest list item
    let q = p;
    while (q && q !== root && q !== document.body && !LISTS.test(q.localName) && showsNothing(q)) q = q.parentElement;
    p = q && LISTS.test(q.localName) ? q : null;
    while (p && LISTS.test(p.localName) && showsNothing(p)) {
      const up = p.parentElement;
      p.remove();
      entry(e.rule, e.source, 'emptied').removed++;
      p = up;
    }
  }

  // 1. clutter selectors ([selector, source group] pairs)
  for (const [sel, source] of selectors) {
    let els;
    try { els = document.querySelectorAll(sel); } catch (err) { bad.push(sel); continue; }
    if (!els.length) continue;
    const e = entry(sel, source, 'selector');
    for (const el of els) removeFor(e, el);
  }
  // 2. page rules of the source (page_rules.js): each removes or changes through its own entries
  for (const [name, source] of pageRules) {
    const rule = PAGE_RULES[name];
    if (!rule) { bad.push('page rule ' + name); continue; }
    rule({
      remove: (sub, el, opts) => removeFor(entry(sub, source, 'page_rule'), el, opts),
      changed: (sub, n) => { entry(sub, source, 'page_rule').changed += (n === undefined ? 1 : n); },
    });
  }
  // 3. position: fixed (overlays, toolbars, banners) go; sticky ones are drawn once, where they belong
  const fixedEntry = entry('position: fixed', '*', 'fixed');
  for (const el of Array.from(root.querySelectorAll('*'))) {
    if (!el.isConnected) continue;
    const pos = getComputedStyle(el).position;
    if (pos === 'fixed' && removeFixed && removeFor(fixedEntry, el)) continue;
    if (pos === 'sticky' || pos === 'fixed') el.style.setProperty('position', pos === 'sticky' ? 'static' : 'absolute', 'important');
  }
  // 4. Invisible elements, children first. The insides of replaced / foreign content and of formulas
  // are left alone.
  const invisible = entry('invisible', '*', 'invisible');
  const OPAQUE = new Set(['svg', 'math', 'mjx-container', 'picture', 'video', 'audio', 'canvas',
                          'object', 'iframe', 'select', 'head', 'script', 'style', 'template']);
  const width = document.documentElement.clientWidth;
  const sx = window.scrollX, sy = window.scrollY;
  function visibleInside(el) {
    for (const d of el.querySelectorAll('*')) if (getComputedStyle(d).visibility === 'visible') return true;
    return false;
  }
  function prune(el) {
    const t = el.localName;
    if (t === 'script' || t === 'style' || t === 'template') return;  // never drawn; MathJax v2 keeps TeX in scripts
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.opacity === '0') { removeFor(invisible, el); return; }
    if (!OPAQUE.has(t) && !isFormula(el)) for (const c of Array.from(el.children)) prune(c);
    if (cs.visibility !== 'visible' && !visibleInside(el)) { removeFor(invisible, el); return; }
    if (cs.display === 'contents' || t === 'br' || t === 'wbr') return;
    const r = el.getBoundingClientRect();
    // Empty zero-size elements are left alone (they show nothing, but may hold margins); those that
    // hold text clipped away (zero or one pixel with overflow hidden: "visually hidden") go.
    const clipped = /hidden|clip/.test(cs.overflow);
    if (clipped && (r.width <= 1 || r.height <= 1) && (el.textContent || '').trim()) { removeFor(invisible, el); return; }
    // Moved out of sight: above or left of the document, or (out of flow: absolute / fixed) right of
    // it. In-flow content beyond the right edge is content too wide for the viewport: fit.js lays it out.
    if (r.width > 0 && r.height > 0) {
      const offRight = r.left + sx >= width && (cs.position === 'absolute' || cs.position === 'fixed');
      if (r.right + sx <= 0 || r.bottom + sy <= 0 || offRight) { removeFor(invisible, el); return; }
    }
  }
  for (const c of Array.from(root.children)) prune(c);
  const rules = Array.from(entries.values()).filter(e => e.removed || e.kept_formula || e.kept_table || e.changed ||
                                                         e.kind === 'fixed' || e.kind === 'invisible');
  return {rules: rules, bad_selectors: bad};
}

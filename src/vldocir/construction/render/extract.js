// Step 3 (layout.py): tag every content element with its element id and record its type, box
// (CSS px, document coordinates), text and fact, in document order. Element types: layout.py.
([factAttr, idAttr, maxRowHeight]) => {
  // @include formula.js
  const HEAD = /^h[1-6]$/;
  const TEXT = new Set(['p', 'blockquote', 'dd', 'dt', 'li', 'pre', 'address']);
  const LIST = new Set(['ul', 'ol', 'dl', 'menu']);
  const IMAGE = new Set(['img', 'svg', 'canvas', 'picture', 'video']);
  const CAPTION = new Set(['figcaption', 'caption']);
  const SKIP = new Set(['script', 'style', 'noscript', 'template', 'head', 'meta', 'link', 'title',
    'iframe', 'frame', 'frameset', 'object', 'embed', 'audio', 'select', 'option', 'optgroup',
    'datalist', 'br', 'wbr', 'area', 'map', 'source', 'track', 'input', 'textarea', 'button']);
  const BLOCK_SEL = 'p,h1,h2,h3,h4,h5,h6,ul,ol,dl,table,blockquote,pre,li,dd,dt,figure,div,section,' +
    'article,aside,header,footer,main,figcaption,address,form,fieldset,details,hr';
  const sx = window.scrollX, sy = window.scrollY;
  const out = [];
  const norm = s => (s || '').replace(/\s+/g, ' ').trim();
  const textOf = el => norm(el.innerText !== undefined ? el.innerText : el.textContent);
  const isInline = el => getComputedStyle(el).display.startsWith('inline');
  // Inline content proper: an inline element that holds no block (the parser puts blocks inside
  // unclosed <b>, <a>, ... of malformed HTML) and is no image.
  const inlineLeaf = el => isInline(el) && !IMAGE.has(el.localName) && !hasBlockContent(el);
  const docBox = r => [r.left + sx, r.top + sy, r.right + sx, r.bottom + sy];

  function kind(el) {
    const t = el.localName;
    if (isFormula(el)) return 'formula';
    if (IMAGE.has(t)) return 'image';
    if (HEAD.test(t)) return 'headline';
    if (t === 'table') return 'table';
    if (t === 'tr') return 'table_row';
    if (LIST.has(t)) return 'list';
    if (CAPTION.has(t)) return 'caption';
    if (TEXT.has(t)) return 'text';
    return null;
  }
  function hasBlockContent(el) {
    for (const d of el.querySelectorAll(BLOCK_SEL)) if (!isInline(d)) return true;
    return false;
  }
  function record(el, k, box, text, atomic, nested) {
    if (!(box[2] - box[0] > 0 && box[3] - box[1] > 0)) return false;
    const id = 'e' + String(out.length).padStart(5, '0');
    el.setAttribute(idAttr, id);
    out.push({id: id, type: k, box: box, text: text, fact: factAttr ? el.getAttribute(factAttr) : null,
              atomic: atomic, nested: nested});
    return true;
  }
  // The element's own inline content (text nodes and inline children), as one text unit.
  function recordOwn(el, k) {
    const parts = [];
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    const add = r => {
      if (r.width <= 0 && r.height <= 0) return;
      x0 = Math.min(x0, r.left); y0 = Math.min(y0, r.top); x1 = Math.max(x1, r.right); y1 = Math.max(y1, r.bottom);
    };
    for (const n of el.childNodes) {
      if (n.nodeType === Node.TEXT_NODE) {
        if (!n.data.trim()) { parts.push(' '); continue; }
        const range = document.createRange();
        range.selectNodeContents(n);
        add(range.getBoundingClientRect());
        parts.push(n.data);
      } else if (n.nodeType === Node.ELEMENT_NODE) {
        if (SKIP.has(n.localName) || !inlineLeaf(n)) { parts.push(' '); continue; }
        const t = n.innerText !== undefined ? n.innerText : n.textContent;
        if (!norm(t)) continue;
        add(n.getBoundingClientRect());
        parts.push(t);
      }
    }
    const text = norm(parts.join(''));
    if (!text || x0 === Infinity) return false;
    return record(el, k, [x0 + sx, y0 + sy, x1 + sx, y1 + sy], text, true, false);
  }
  function visit(el, inUnit) {
    const t = el.localName;
    if (SKIP.has(t)) return;
    const k = kind(el);
    if (k === 'image' || k === 'formula') {
      const text = k === 'formula' ? formulaText(el) : (t === 'svg' ? norm(el.textContent) : '');
      // A formula with no text and no drawing is empty in the source (e.g. MathJax left no output).
      if (k === 'formula' && !text && !el.querySelector('img, svg, canvas')) return;
      record(el, k, docBox(el.getBoundingClientRect()), text, true, inUnit);
      return;
    }
    if (inUnit) { for (const c of el.children) visit(c, true); return; }
    if (k === 'table' || k === 'list') {
      record(el, k, docBox(el.getBoundingClientRect()), textOf(el), false, false);
      for (const c of el.children) visit(c, false);
      return;
    }
    if (k !== null) {
      const r = el.getBoundingClientRect();
      const container = k === 'table_row' ? (!!el.querySelector('table') || r.height > maxRowHeight)
                                          : hasBlockContent(el);
      if (!container) {
        const text = textOf(el);
        if (text) record(el, k, docBox(r), text, true, false);
        for (const c of el.children) visit(c, true);
        return;
      }
    }
    // A generic block (or a text unit holding blocks): its own inline content, then its children.
    const own = (k === 'table_row') ? false : recordOwn(el, k === null ? 'text' : k);
    for (const c of el.children) visit(c, own && inlineLeaf(c));
  }
  visit(document.body || document.documentElement, false);
  return out;
}

// Step 3 (layout.py): tag every content element with its element id and record its type, box
// (CSS px, document coordinates), text and fact, in document order. Element types: layout.py.
// An element drawn in two or more separate places (a note broken across CSS columns) also gets its
// `fragments`: one box per column it is drawn in (see `fragmentsOf`); null when it is one box.
([factAttr, idAttr, maxRowHeight]) => {
  // @include formula.js
  // @include tables.js
  const HEAD = /^h[1-6]$/;
  const TEXT = new Set(['p', 'blockquote', 'dd', 'dt', 'li', 'pre', 'address']);
  const LIST = new Set(['ul', 'ol', 'dl', 'menu']);
  const IMAGE = new Set(['img', 'svg', 'canvas', 'picture']);
  const MEDIA = new Set(['video', 'audio']);
  const EMBED = new Set(['iframe', 'frame', 'object', 'embed']);
  const CAPTION = new Set(['figcaption', 'caption']);
  const SKIP = new Set(['script', 'style', 'template', 'head', 'meta', 'link', 'title',
    'select', 'option', 'optgroup', 'datalist', 'br', 'wbr', 'area', 'map', 'source', 'track', 'input',
    'textarea', 'button']);
  const BLOCK_SEL = 'p,h1,h2,h3,h4,h5,h6,ul,ol,dl,table,blockquote,pre,li,dd,dt,figure,div,section,' +
    'article,aside,header,footer,main,figcaption,address,form,fieldset,details,hr';
  const sx = window.scrollX, sy = window.scrollY;
  const out = [];
  const norm = s => (s || '').replace(/\s+/g, ' ').trim();
  const textOf = el => norm(el.innerText !== undefined ? el.innerText : el.textContent);
  const isInline = el => getComputedStyle(el).display.startsWith('inline');
  // Replaced content (pictures, players, frames): recorded on its own, never read as text.
  const replaced = el => IMAGE.has(el.localName) || MEDIA.has(el.localName) || EMBED.has(el.localName);
  // Inline content proper: an inline element that holds no block (the parser puts blocks inside
  // unclosed <b>, <a>, ... of malformed HTML) and is no replaced content.
  const inlineLeaf = el => isInline(el) && !replaced(el) && !hasBlockContent(el);
  const docBox = r => [r.left + sx, r.top + sy, r.right + sx, r.bottom + sy];
  // The boxes an element is drawn in, from its client rects in flow order: those of a block are its
  // fragments (one per column it is broken across); those of inline content are its line boxes, and
  // a line box that lies wholly above the previous one starts a new fragment (the flow went on at the
  // top of the next column) while the others (the next line, the next piece of a line) are merged
  // into the current one. Document coordinates; null when there is one fragment (the box says all).
  function fragmentsOf(rects, lines) {
    const frags = [];
    let cur = null, last = null;
    for (const r of rects) {
      if (r.width <= 0 && r.height <= 0) continue;
      if (cur === null || !lines || r.bottom <= last.top + 1) {
        cur = [r.left, r.top, r.right, r.bottom];
        frags.push(cur);
      } else {
        cur[0] = Math.min(cur[0], r.left); cur[1] = Math.min(cur[1], r.top);
        cur[2] = Math.max(cur[2], r.right); cur[3] = Math.max(cur[3], r.bottom);
      }
      last = r;
    }
    return frags.length > 1 ? frags.map(f => [f[0] + sx, f[1] + sy, f[2] + sx, f[3] + sy]) : null;
  }

  // Images that failed to load draw their alt text: it is their text, and the text of the unit they
  // are in. innerText leaves it out, so the texts of the units holding one are read again at the end
  // with the alt texts in place (`later`).
  const failedAlt = new Map();  // img -> its alt text, drawn
  for (const img of document.images) {
    const alt = norm(img.getAttribute('alt'));
    if (alt && img.complete && img.naturalWidth === 0 && img.getClientRects().length) failedAlt.set(img, alt);
  }
  const holdsAlt = new Set();  // the ancestors of those images
  for (const img of failedAlt.keys()) for (let n = img.parentElement; n && !holdsAlt.has(n); n = n.parentElement) holdsAlt.add(n);
  const later = [];  // [record, function reading its text]
  const altOf = el => failedAlt.get(el.localName === 'picture' ? el.querySelector('img') : el) || '';

  const layoutTables = new Map();
  const layoutTable = t => {
    if (!layoutTables.has(t)) layoutTables.set(t, isLayoutTable(t));
    return layoutTables.get(t);
  };
  // A video is an image when it shows a picture: its poster (loaded: images_ready.js) or a frame.
  function showsPicture(video) {
    const poster = window.__vldocirPosters && window.__vldocirPosters.get(video);
    return !!(poster && poster.complete && poster.naturalWidth > 0) || (video.readyState >= 2 && video.videoWidth > 0);
  }

  function kind(el) {
    const t = el.localName;
    if (isFormula(el)) return 'formula';
    if (t === 'video') return showsPicture(el) ? 'image' : 'media';
    if (IMAGE.has(t)) return 'image';
    if (MEDIA.has(t)) return 'media';
    if (EMBED.has(t)) return 'embed';
    if (HEAD.test(t)) return 'headline';
    if (t === 'table') return layoutTable(el) ? null : 'table';
    if (t === 'tr') {
      const table = el.closest('table');
      return table && layoutTable(table) ? null : 'table_row';
    }
    if (LIST.has(t)) return 'list';
    if (CAPTION.has(t)) return 'caption';
    if (TEXT.has(t)) return 'text';
    return null;
  }
  function hasBlockContent(el) {
    for (const d of el.querySelectorAll(BLOCK_SEL)) if (!isInline(d)) return true;
    return false;
  }
  // Records the element; `reread`: how to read its text again once alt texts are in place; `rects`:
  // the line boxes of what it records (default: the element's own client rects), for its fragments.
  function record(el, k, box, text, atomic, nested, reread, rects) {
    if (!(box[2] - box[0] > 0 && box[3] - box[1] > 0)) return false;
    const id = 'e' + String(out.length).padStart(5, '0');
    el.setAttribute(idAttr, id);
    const own = rects ? null : el.getClientRects();
    const fragments = own === null ? fragmentsOf(rects, true) : own.length > 1 ? fragmentsOf(own, isInline(el)) : null;
    const rec = {id: id, type: k, box: box, text: text, fact: factAttr ? el.getAttribute(factAttr) : null,
                 atomic: atomic, nested: nested, fragments: fragments};
    out.push(rec);
    if (reread && holdsAlt.has(el)) later.push([rec, reread]);
    return true;
  }
  // The text of the element's own inline content (text nodes and inline children; an inline child
  // of white space alone adds nothing).
  function ownText(el) {
    const parts = [];
    for (const n of el.childNodes) {
      if (n.nodeType === Node.TEXT_NODE) parts.push(n.data);
      else if (n.nodeType === Node.ELEMENT_NODE) {
        if (SKIP.has(n.localName) || !inlineLeaf(n)) { parts.push(' '); continue; }
        const t = n.innerText !== undefined ? n.innerText : n.textContent;
        if (norm(t)) parts.push(t);
      }
    }
    return norm(parts.join(''));
  }
  // The element's own inline content, as one text unit.
  function recordOwn(el, k) {
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    const add = r => {
      if (r.width <= 0 && r.height <= 0) return;
      x0 = Math.min(x0, r.left); y0 = Math.min(y0, r.top); x1 = Math.max(x1, r.right); y1 = Math.max(y1, r.bottom);
    };
    let alt = false;
    const rects = [];  // the line boxes of that content, in flow order
    for (const n of el.childNodes) {
      if (n.nodeType === Node.TEXT_NODE) {
        if (!n.data.trim()) continue;
        const range = document.createRange();
        range.selectNodeContents(n);
        add(range.getBoundingClientRect());
        rects.push(...range.getClientRects());
      } else if (n.nodeType === Node.ELEMENT_NODE) {
        if (SKIP.has(n.localName) || !inlineLeaf(n)) continue;
        const shows = holdsAlt.has(n);
        if (!shows && !norm(n.innerText !== undefined ? n.innerText : n.textContent)) continue;
        alt = alt || shows;
        add(n.getBoundingClientRect());
        rects.push(...n.getClientRects());
      }
    }
    const text = ownText(el);
    if ((!text && !alt) || x0 === Infinity) return false;
    return record(el, k, [x0 + sx, y0 + sy, x1 + sx, y1 + sy], text, true, false, alt ? () => ownText(el) : null,
                  rects);
  }
  function visit(el, inUnit) {
    const t = el.localName;
    if (SKIP.has(t)) return;
    const k = kind(el);
    if (k === 'image' || k === 'formula' || k === 'media' || k === 'embed') {
      const text = k === 'formula' ? formulaText(el) : (t === 'svg' ? norm(el.textContent) : altOf(el));
      // A formula with no text and no drawing is empty in the source (e.g. MathJax left no output).
      if (k === 'formula' && !text && !el.querySelector('img, svg, canvas')) return;
      record(el, k, docBox(el.getBoundingClientRect()), text, true, inUnit);
      return;
    }
    if (inUnit) { for (const c of el.children) visit(c, true); return; }
    if (k === 'table' || k === 'list') {
      record(el, k, docBox(el.getBoundingClientRect()), textOf(el), false, false, () => textOf(el));
      for (const c of el.children) visit(c, false);
      return;
    }
    if (k !== null) {
      const r = el.getBoundingClientRect();
      const container = k === 'table_row' ? (!!el.querySelector('table') || r.height > maxRowHeight)
                                          : hasBlockContent(el);
      if (!container) {
        // A unit that draws no text (a row of images) is none: what it holds is recorded on its own.
        const text = textOf(el);
        const unit = !!text || holdsAlt.has(el);
        if (unit) record(el, k, docBox(r), text, true, false, () => textOf(el));
        for (const c of el.children) visit(c, unit);
        return;
      }
    }
    // A generic block (or a text unit holding blocks): its own inline content, then its children.
    const own = (k === 'table_row') ? false : recordOwn(el, k === null ? 'text' : k);
    for (const c of el.children) visit(c, own && inlineLeaf(c));
  }
  visit(document.body || document.documentElement, false);

  if (later.length) {
    // The alt texts as text beside their images, only while the texts are read: text nodes match
    // no selector, and the page is as it was once they are gone.
    const shown = Array.from(failedAlt, ([img, alt]) => {
      const node = document.createTextNode(' ' + alt + ' ');
      img.after(node);
      return node;
    });
    for (const [rec, reread] of later) rec.text = reread();
    for (const node of shown) node.remove();
  }
  return out;
}

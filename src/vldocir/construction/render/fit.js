// Step 2, after the clean-up (cleanup.py): lay out content wider than the viewport instead of
// letting it spill past the page's right edge (where the page image would cut it):
//   1. long words wrap (overflow-wrap: break-word, which never changes a line that fits);
//   2. scroll containers are opened (overflow visible; no max-height; as wide as what they hold, so
//      that their border still encloses it): nothing stays hidden in them;
//   3. content reaching past the viewport's right edge is scaled with CSS `zoom` (the layout, not
//      only the drawing, shrinks): an element whose own box is too wide is scaled together with the
//      siblings on its line (a row of figure panels keeps its proportions) so that the row fits the
//      width left of it; an element that is narrow enough but whose content spills (a `pre` of long
//      lines) is searched inside, and scaled itself when nothing inside is to blame. Elements
//      holding text are not scaled below minTextScale (they would be unreadable); images, SVG,
//      canvas and video have no bound. Out-of-flow (absolute, fixed) elements are left alone.
//      Three passes (the layout changes after each).
// Returns {opened, scaled: [{tag, id, class, width_css, scale}]}; what still overflows is listed
// after the elements are recorded (overflow.js).
([minTextScale]) => {
  const style = document.createElement('style');
  style.setAttribute('data-vldocir', 'fit');
  style.textContent = 'body{overflow-wrap:break-word !important}';
  (document.head || document.documentElement).appendChild(style);
  const de = document.documentElement, body = document.body || de;
  const W = de.clientWidth;
  const out = {opened: 0, scaled: []};
  for (const el of Array.from(body.querySelectorAll('*'))) {
    const cs = getComputedStyle(el);
    const x = /auto|scroll/.test(cs.overflowX) && el.scrollWidth > el.clientWidth + 1;
    const y = /auto|scroll/.test(cs.overflowY) && el.scrollHeight > el.clientHeight + 1;
    if (!x && !y) continue;
    el.style.setProperty('overflow', 'visible', 'important');
    if (x) {
      const pad = cs.boxSizing === 'border-box' ? 0 : parseFloat(cs.paddingLeft) + parseFloat(cs.paddingRight);
      el.style.setProperty('min-width', (el.scrollWidth - pad) + 'px', 'important');
      el.style.setProperty('max-width', 'none', 'important');
    }
    if (y) { el.style.setProperty('max-height', 'none', 'important'); el.style.setProperty('height', 'auto', 'important'); }
    out.opened++;
  }

  const MEDIA = new Set(['img', 'svg', 'canvas', 'video', 'picture']);
  const SKIP = new Set(['head', 'script', 'style', 'template', 'br', 'wbr']);
  const placed = el => { const p = getComputedStyle(el).position; return p !== 'absolute' && p !== 'fixed'; };
  const hasText = el => !MEDIA.has(el.localName) && (el.textContent || '').trim().length > 0;
  // How far right the element's content reaches (its box, or what spills out of it).
  const reach = el => {
    const r = el.getBoundingClientRect();
    if (!(el instanceof HTMLElement) || !el.offsetWidth) return r.right;  // SVG: its box
    return Math.max(r.right, r.left + el.scrollWidth * r.width / el.offsetWidth);
  };
  const scaled = new Map();  // element -> its record (scale: the product of all passes)
  function scale(els) {
    const boxes = els.map(e => e.getBoundingClientRect());
    const left = Math.min(...boxes.map(b => b.left)), right = Math.max(...els.map(reach));
    const avail = W - Math.max(0, left) - 1;  // a pixel to spare: zoomed text does not scale exactly
    if (avail < 1 || right - left <= 0) return false;  // starts past the right edge: stays overflowing
    const floor = els.some(hasText) ? minTextScale : 0.01;
    let changed = false;
    els.forEach((el, i) => {
      const rec = scaled.get(el);
      const before = rec ? rec.scale : 1;
      const total = Math.max(floor, before * avail / (right - left));
      if (total >= before * (1 - 1e-4)) return;  // fits, or already at its floor
      const prev = parseFloat(getComputedStyle(el).zoom) || 1;
      el.style.setProperty('zoom', String(prev * total / before), 'important');
      changed = true;
      if (rec) rec.scale = total;
      else {
        const r0 = {tag: el.localName, id: el.id || '', class: (typeof el.className === 'string' ? el.className : '').slice(0, 80),
                    width_css: Math.round(boxes[i].width * 10) / 10, scale: total};
        scaled.set(el, r0);
        out.scaled.push(r0);
      }
    });
    return changed;
  }
  // Scales what is too wide inside `el`; returns whether anything changed.
  function visit(el) {
    const kids = Array.from(el.children).filter(c => !SKIP.has(c.localName) && placed(c));
    const done = new Set();
    let changed = false;
    for (const k of kids) {
      if (done.has(k)) continue;
      if (getComputedStyle(k).display === 'contents') { changed = visit(k) || changed; continue; }
      const r = k.getBoundingClientRect();
      if (r.width > 0 && r.right > W + 0.5) {
        const row = kids.filter(s => {
          if (s === k) return true;
          const q = s.getBoundingClientRect();
          return q.width > 0 && q.height > 0 && q.top < r.bottom && q.bottom > r.top;
        });
        row.forEach(s => done.add(s));
        changed = scale(row) || changed;
      } else if (reach(k) > W + 0.5) {
        if (visit(k)) changed = true;
        else if (k !== body && hasText(k)) changed = scale([k]) || changed;
      }
    }
    return changed;
  }
  for (let pass = 0; pass < 3; pass++) if (!visit(de)) break;
  for (const r of out.scaled) r.scale = Math.round(r.scale * 1000) / 1000;
  return out;
}

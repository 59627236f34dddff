// Step 2 (renderer.py): remove clutter selectors, fixed elements and invisible elements;
// returns what was removed and the selectors the browser could not parse.
([selectors, removeFixed]) => {
  const removed = {clutter: 0, fixed: 0, invisible: 0, bad_selectors: []};
  const root = document.body || document.documentElement;
  const protectedEl = el => el === document.body || el === document.documentElement || el === document.head;
  for (const sel of selectors) {
    let els;
    try { els = document.querySelectorAll(sel); } catch (e) { removed.bad_selectors.push(sel); continue; }
    for (const el of els) if (el.isConnected && !protectedEl(el)) { el.remove(); removed.clutter++; }
  }
  for (const el of Array.from(root.querySelectorAll('*'))) {
    if (!el.isConnected) continue;
    const pos = getComputedStyle(el).position;
    if (pos === 'fixed' && removeFixed) { el.remove(); removed.fixed++; }
    else if (pos === 'sticky' || pos === 'fixed') el.style.setProperty('position', pos === 'sticky' ? 'static' : 'absolute', 'important');
  }
  // Invisible elements, children first. The insides of replaced / foreign content are left alone.
  const OPAQUE = new Set(['svg', 'math', 'mjx-container', 'picture', 'video', 'audio', 'canvas',
                          'object', 'iframe', 'select', 'head']);
  const width = document.documentElement.clientWidth;
  const sx = window.scrollX, sy = window.scrollY;
  function visibleInside(el) {
    for (const d of el.querySelectorAll('*')) if (getComputedStyle(d).visibility === 'visible') return true;
    return false;
  }
  function prune(el) {
    const cs = getComputedStyle(el);
    if (cs.display === 'none') { el.remove(); removed.invisible++; return; }
    if (cs.opacity === '0') { el.remove(); removed.invisible++; return; }
    if (!OPAQUE.has(el.localName)) for (const c of Array.from(el.children)) prune(c);
    if (cs.visibility !== 'visible' && !visibleInside(el)) { el.remove(); removed.invisible++; return; }
    if (cs.display === 'contents' || el.localName === 'br' || el.localName === 'wbr') return;
    const r = el.getBoundingClientRect();
    // Empty zero-size elements are left alone (they show nothing, but may hold margins); those that
    // hold text clipped away (zero or one pixel with overflow hidden: "visually hidden") go.
    const clipped = /hidden|clip/.test(cs.overflow);
    if (clipped && (r.width <= 1 || r.height <= 1) && (el.textContent || '').trim()) {
      el.remove(); removed.invisible++; return;
    }
    if (r.width > 0 && r.height > 0 && (r.right + sx <= 0 || r.bottom + sy <= 0 || r.left + sx >= width)) {
      el.remove(); removed.invisible++; return;
    }
  }
  for (const c of Array.from(root.children)) prune(c);
  return removed;
}

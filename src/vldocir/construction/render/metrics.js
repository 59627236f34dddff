// Step 3 (layout.py): the document's content height (CSS px) and background colour.
() => {
  // The content's height, not the viewport's (the root scroller, and a quirks-mode body, are at
  // least as tall as the viewport): the bottom of everything in the body plus the body's bottom
  // padding, border and margin, within what the document can scroll to.
  const de = document.documentElement, body = document.body || de;
  const px = v => parseFloat(v) || 0;
  const bcs = getComputedStyle(body);
  const range = document.createRange();
  range.selectNodeContents(body);
  const content = range.getBoundingClientRect();
  const bottom = content.bottom + window.scrollY + px(bcs.paddingBottom) + px(bcs.borderBottomWidth) + px(bcs.marginBottom);
  const height = Math.max(1, Math.min(de.scrollHeight, bottom));
  function colour(el) {
    if (!el) return null;
    const m = getComputedStyle(el).backgroundColor.match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(s => s).map(Number);
    const a = p.length > 3 ? p[3] : 1;
    if (!(a > 0)) return null;
    return [0, 1, 2].map(i => Math.round(p[i] * a + 255 * (1 - a)));
  }
  return {height: height, background: colour(de) || colour(body) || [255, 255, 255]};
}

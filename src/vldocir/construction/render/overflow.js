// Step 3 (layout.py): the recorded elements whose box or content (what spills out of the box, e.g.
// a long line) still reaches past the viewport's left or right side after fit.js, outermost only
// (an element inside one already listed is not listed again). Returns [{id, box, reach}] in CSS px,
// document coordinates; reach: the rightmost point of the content.
([idAttr, tolerance]) => {
  const W = document.documentElement.clientWidth;
  const sx = window.scrollX, sy = window.scrollY;
  const listed = [];
  const out = [];
  for (const el of document.querySelectorAll('[' + idAttr + ']')) {
    const r = el.getBoundingClientRect();
    if (!(r.width > 0 || r.height > 0)) continue;
    const reach = el instanceof HTMLElement && el.offsetWidth
      ? Math.max(r.right, r.left + el.scrollWidth * r.width / el.offsetWidth) : r.right;
    if (!(reach > W + tolerance || r.left < -tolerance)) continue;
    if (listed.some(a => a.contains(el))) continue;
    listed.push(el);
    out.push({id: el.getAttribute(idAttr), box: [r.left + sx, r.top + sy, r.right + sx, r.bottom + sy], reach: reach + sx});
  }
  return out;
}

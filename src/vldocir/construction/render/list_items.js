// Pagination (renderer.py): the element ids of the recorded list items (li), which a cut that
// must go through elements avoids; extract.js records them as text.
([idAttr]) => Array.from(document.querySelectorAll('li[' + idAttr + ']'), el => el.getAttribute(idAttr))

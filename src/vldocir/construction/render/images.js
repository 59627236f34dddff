// Images (images.py), in three modes:
//   'sources' (step 1): number every <img> and <picture><source> (attribute data-vldocir-img) and
//             return their URLs, absolute: src, srcset candidates, and the lazy loaders' attributes
//             (data-src, data-lazy-src, data-original; data-srcset, data-lazy-srcset);
//   'apply'   (step 1): set src / srcset as decided in Python ([{i, src, srcset}]; srcset null: remove);
//   'report'  (after step 3): every <img> left, with what it shows (complete, naturalWidth) and its
//             element id.
([mode, data, idAttr]) => {
  const LAZY_SRC = ['data-src', 'data-lazy-src', 'data-original'];
  const LAZY_SRCSET = ['data-srcset', 'data-lazy-srcset'];
  const abs = u => { try { return new URL(u, document.baseURI).href; } catch (e) { return u; } };
  // srcset: "url [descriptor], ..." -> [[absolute url, descriptor], ...]
  // (a srcset of data: URLs, whose commas cannot be told apart, gives none: nothing to resolve)
  const parseSrcset = v => (!v || /data:/i.test(v) ? [] : v.split(/\s*,\s*/)).filter(s => s)
    .map(s => { const [u, d] = s.split(/\s+/, 2); return [abs(u), d || '1x']; });
  const all = () => Array.from(document.querySelectorAll('img, picture > source'));
  if (mode === 'sources') {
    return all().map((el, i) => {
      el.setAttribute('data-vldocir-img', String(i));
      const src = el.getAttribute('src');
      return {
        i: i, tag: el.localName,
        src: src && src.trim() ? abs(src.trim()) : null,
        srcset: parseSrcset(el.getAttribute('srcset')),
        lazy_src: LAZY_SRC.map(a => el.getAttribute(a)).filter(v => v && v.trim()).map(v => abs(v.trim())),
        lazy_srcset: [].concat(...LAZY_SRCSET.map(a => parseSrcset(el.getAttribute(a)))),
      };
    });
  }
  if (mode === 'apply') {
    for (const c of data) {
      const el = document.querySelector('[data-vldocir-img="' + c.i + '"]');
      if (!el) continue;
      if (c.srcset === null) el.removeAttribute('srcset');
      else if (c.srcset !== undefined) el.setAttribute('srcset', c.srcset);
      if (c.src) { el.loading = 'eager'; el.setAttribute('src', c.src); }
    }
    return data.length;
  }
  // 'report'
  return Array.from(document.images).map(img => ({
    url: img.currentSrc || (img.getAttribute('src') ? abs(img.getAttribute('src')) : ''),
    lazy: LAZY_SRC.map(a => img.getAttribute(a)).filter(v => v && v.trim()).map(v => abs(v.trim()))
      .concat(...LAZY_SRCSET.map(a => parseSrcset(img.getAttribute(a)).map(c => c[0]))),
    complete: img.complete,
    natural_width: img.naturalWidth,
    element_id: img.getAttribute(idAttr),
    alt: (img.getAttribute('alt') || '').slice(0, 200),
  }));
}

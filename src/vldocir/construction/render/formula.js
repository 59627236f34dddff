// Formulas, shared by clean.js, extract.js and prepare.js (included: `// @include formula.js`).
// A formula is MathML (<math>), MathJax v3 (<mjx-container>), MathJax v2 and server-side MathJax
// CHTML/SVG (classes MathJax*, mjx-*), KaTeX (katex*), LaTeXML (ltx_Math, ltx_DisplayMath,
// ltx_equation*), MediaWiki (mwe-math-element) or a class starting with formula / equation.
const FORMULA_CLASS = /^(formula|equation|katex|mathjax|mjx-|ltx_equation|ltx_math$|ltx_displaymath$|mwe-math-element)/i;

function isFormula(el) {
  const t = el.localName;
  if (t === 'math' || t === 'mjx-container') return true;
  if (!el.classList) return false;
  for (const c of el.classList) if (FORMULA_CLASS.test(c)) return true;
  return false;
}

// The outermost formula holding `el` (el itself included), or null.
function formulaOf(el) {
  let found = null;
  for (let n = el; n && n.nodeType === 1; n = n.parentElement) if (isFormula(n)) found = n;
  return found;
}

// Whether `el` is, holds or lies inside a formula.
function touchesFormula(el) {
  if (formulaOf(el)) return true;
  for (const d of el.getElementsByTagName('*')) if (isFormula(d)) return true;
  return false;
}

// The source text of one rendering of a formula (TeX or the MathML's text), or null when `el` is
// no rendering whose source is known: MathML alttext / TeX annotation, MathJax's aria-label or
// assistive MathML, KaTeX's TeX annotation, MathJax v2's <script type="math/tex">, MediaWiki's
// MathML (or its fallback image's alt text).
function mathSource(el) {
  const t = el.localName;
  const attr = n => (n.getAttribute('alttext') || n.getAttribute('aria-label') || '').trim();
  const tex = n => {
    const a = n.querySelector('annotation[encoding="application/x-tex"], annotation[encoding="TeX"]');
    return a ? a.textContent.trim() : '';
  };
  if (t === 'math') return attr(el) || tex(el) || el.textContent;
  if (t === 'mjx-container') {
    const m = el.querySelector('mjx-assistive-mml math, math');
    return (m && mathSource(m)) || attr(el) || null;
  }
  if (t === 'script') return /^math\//i.test(el.type || '') ? el.textContent : null;
  const cls = el.classList;
  if (!cls) return null;
  if (cls.contains('mwe-math-element')) {
    const m = el.querySelector('math');
    if (m) return mathSource(m);
    const img = el.querySelector('img[alt]');
    return img ? img.alt : null;
  }
  if (cls.contains('katex')) return tex(el) || null;
  if (cls.contains('mjx-math') && el.hasAttribute('aria-label')) return attr(el);
  if (/^MathJax(_Display|_SVG|_CHTML|_SVG_Display|_CHTML_Display)?$/.test(el.className)) {
    // MathJax v2 keeps the source as the next sibling of the rendering (or of its display wrapper).
    for (const n of [el, el.parentElement]) {
      const s = n && n.nextElementSibling;
      if (s && s.localName === 'script' && /^math\//i.test(s.type || '')) return s.textContent;
    }
  }
  return null;
}

// The text of a formula element: its renderings replaced by their sources, other text (an
// equation number) kept; rendered-away parts (display: none) skipped.
function formulaText(el) {
  const parts = [];
  (function walk(n) {
    if (n.nodeType === Node.TEXT_NODE) { parts.push(n.data); return; }
    if (n.nodeType !== Node.ELEMENT_NODE) return;
    const src = mathSource(n);
    if (src !== null) { parts.push(' ' + src + ' '); return; }
    if (n.localName === 'script' || n.localName === 'style') return;
    if (getComputedStyle(n).display === 'none') return;
    for (const c of n.childNodes) walk(c);
  })(el);
  return parts.join('').replace(/\s+/g, ' ').trim();
}

// MathML <mfenced> (MathML 3; no longer in MathML Core, so Chromium draws neither its fences nor its
// separators) rewritten as the <mrow> MathML 3 defines it to be: <mo> fences `open` (default "(")
// and `close` (default ")") around the arguments, separated by the `separators` characters (default
// ","; the last one repeats; "" for none). Its other attributes go to the outer <mrow>. Returns the
// number rewritten.
function expandMfenced(root) {
  const NS = 'http://www.w3.org/1998/Math/MathML';
  const mo = (text, attrs) => {
    const o = document.createElementNS(NS, 'mo');
    for (const [k, v] of Object.entries(attrs)) o.setAttribute(k, v);
    o.textContent = text;
    return o;
  };
  const found = Array.from(root.querySelectorAll('mfenced'));
  for (const f of found) {
    const open = f.hasAttribute('open') ? f.getAttribute('open').trim() : '(';
    const close = f.hasAttribute('close') ? f.getAttribute('close').trim() : ')';
    const seps = Array.from((f.hasAttribute('separators') ? f.getAttribute('separators') : ',').replace(/\s+/g, ''));
    const args = Array.from(f.children);
    const outer = document.createElementNS(NS, 'mrow');
    for (const a of Array.from(f.attributes)) {
      if (!['open', 'close', 'separators'].includes(a.name)) outer.setAttribute(a.name, a.value);
    }
    if (open) outer.appendChild(mo(open, {fence: 'true', form: 'prefix'}));
    const inner = args.length > 1 ? document.createElementNS(NS, 'mrow') : outer;
    args.forEach((a, i) => {
      if (i > 0 && seps.length) inner.appendChild(mo(seps[Math.min(i - 1, seps.length - 1)], {separator: 'true'}));
      inner.appendChild(a);
    });
    if (inner !== outer) outer.appendChild(inner);
    if (close) outer.appendChild(mo(close, {fence: 'true', form: 'postfix'}));
    f.replaceWith(outer);
  }
  return found.length;
}

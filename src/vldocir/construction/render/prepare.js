// Step 1 (renderer.py): finish animations, make lazy content eager, draw what Chromium would not
// draw as the document means it (noscript, mfenced); returns whether the document's scripts could
// still load something on scrolling (they listen to scrolling or observe intersections:
// scroll_hooks.js; or scroll handlers are set). `scripting`: whether the document was loaded with
// its scripts on (RenderConfig.javascript).
([scripting]) => {
  // @include formula.js
  const style = document.createElement('style');
  style.setAttribute('data-vldocir', 'style');
  style.textContent = 'html{scroll-behavior:auto !important}' +
    '*,*::before,*::after{transition:none !important;caret-color:transparent !important;' +
    'content-visibility:visible !important}';
  (document.head || document.documentElement).appendChild(style);
  if (document.getAnimations) {
    for (const a of document.getAnimations()) {
      try {
        const t = a.effect && a.effect.getComputedTiming();
        if (t && isFinite(t.endTime)) a.finish(); else a.cancel();
      } catch (e) {}
    }
  }
  for (const e of document.querySelectorAll('img[loading="lazy"], iframe[loading="lazy"]')) e.loading = 'eager';
  // With scripts on, the parser keeps a <noscript>'s content as text, and nothing of it is shown; the
  // renderer switches scripts off before the clean-up, and Chromium would then draw that text: raw
  // markup (`<img src=...>`). It goes. (With scripts off from the start its content is markup, shown
  // as in a browser without scripts: content, recorded like any other.)
  if (scripting) for (const e of Array.from(document.querySelectorAll('noscript'))) e.remove();
  expandMfenced(document);
  // Whether anything could load lazily on scrolling: only the document's scripts can (lazy
  // attributes were just turned off, content-visibility forced visible), and only through what
  // reacts to scrolling. Frames of the same origin count too.
  const code = Array.from(document.scripts).some(sc => !sc.type || /(java|ecma)script|module/i.test(sc.type));
  let hooks = !!window.__vldocirScrollHooks || window.onscroll !== null || document.onscroll !== null;
  for (let i = 0; i < window.frames.length && !hooks; i++) {
    try { hooks = !!window.frames[i].__vldocirScrollHooks; } catch (e) {}
  }
  return (code && hooks) || !!document.querySelector('[onscroll]');
}

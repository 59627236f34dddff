// Step 1 (renderer.py): finish animations, make lazy content eager; returns whether the
// document's scripts could still load something on scrolling (they listen to scrolling or observe
// intersections: scroll_hooks.js; or scroll handlers are set).
() => {
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

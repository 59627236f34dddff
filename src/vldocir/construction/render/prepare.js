// Step 1 (renderer.py): finish animations, make lazy content eager; returns whether the
// document has scripts (only they could still load something on scrolling).
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
  // attributes were just turned off, content-visibility forced visible).
  const code = Array.from(document.scripts).some(sc => !sc.type || /(java|ecma)script|module/i.test(sc.type));
  return code || !!document.querySelector('[onscroll]');
}

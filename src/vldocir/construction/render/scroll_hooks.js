// Init script of every browser context (browser.py): notes whether the document's scripts could
// react to scrolling (scroll, wheel or touch listeners, IntersectionObserver), so that step 1
// scrolls through only the documents that could load something lazily (prepare.js).
(() => {
  const mark = () => { window.__vldocirScrollHooks = true; };
  const add = EventTarget.prototype.addEventListener;
  const SCROLLING = /^(scroll|scrollend|wheel|mousewheel|touchmove)$/i;
  EventTarget.prototype.addEventListener = function (type, ...rest) {
    if (SCROLLING.test(String(type))) mark();
    return add.call(this, type, ...rest);
  };
  if (window.IntersectionObserver) {
    window.IntersectionObserver = new Proxy(window.IntersectionObserver, {
      construct(target, args, newTarget) { mark(); return Reflect.construct(target, args, newTarget); },
    });
  }
})();

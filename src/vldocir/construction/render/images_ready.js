// Step 1 (renderer.py): wait, bounded, for images, web fonts and video posters; false when the bound
// ran out. A poster is loaded as an image of its own (a <video> tells nothing of its poster) and kept
// in window.__vldocirPosters (video -> Image): extract.js reads whether the video shows a picture.
async ([timeoutMs]) => {
  const posters = window.__vldocirPosters = new WeakMap();
  const pending = [];
  for (const v of document.querySelectorAll('video[poster]')) {
    if (!v.poster) continue;
    const img = new Image();
    img.src = v.poster;
    posters.set(v, img);
    pending.push(img);
  }
  const ready = () => Array.from(document.images).every(i => i.complete) && pending.every(i => i.complete) &&
                      (!document.fonts || document.fonts.status === 'loaded');
  const end = Date.now() + timeoutMs;
  while (!ready()) {
    if (Date.now() > end) return false;
    await new Promise(r => setTimeout(r, 50));
  }
  return true;
}

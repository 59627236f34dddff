// Step 1 (renderer.py): wait, bounded, for images and web fonts; false when the bound ran out.
async ([timeoutMs]) => {
  const ready = () => Array.from(document.images).every(i => i.complete) &&
                      (!document.fonts || document.fonts.status === 'loaded');
  const end = Date.now() + timeoutMs;
  while (!ready()) {
    if (Date.now() > end) return false;
    await new Promise(r => setTimeout(r, 50));
  }
  return true;
}

// Step 1 (renderer.py): scroll through the document a viewport at a time, to trigger lazily
// loaded content; returns the number of steps.
async ([maxSteps]) => {
  const frame = () => new Promise(r => { requestAnimationFrame(() => r()); setTimeout(r, 100); });
  const se = document.scrollingElement || document.documentElement;
  let y = 0, steps = 0;
  while (steps < maxSteps) {
    window.scrollTo(0, y);
    await frame();
    steps++;
    if (y + window.innerHeight >= se.scrollHeight) break;
    y += window.innerHeight;
  }
  window.scrollTo(0, 0);
  await frame();
  return steps;
}

// Step 4 (capture.py): show or hide the white overlay below the cut and scroll; returns
// [scrollY, innerHeight].
([overlayTop, overlayHeight, overlayWidth, scrollY]) => {
  let ov = document.getElementById('__vldocir_pad');
  if (overlayHeight > 0) {
    if (!ov) {
      ov = document.createElement('div');
      ov.id = '__vldocir_pad';
      document.documentElement.appendChild(ov);
    }
    ov.setAttribute('style', 'position:absolute !important;left:0 !important;margin:0 !important;' +
      'padding:0 !important;border:0 !important;background:#ffffff !important;display:block !important;' +
      'z-index:2147483647 !important;pointer-events:none !important;transform:none !important;' +
      'opacity:1 !important;visibility:visible !important;box-sizing:border-box !important;' +
      'top:' + overlayTop + 'px !important;height:' + overlayHeight + 'px !important;' +
      'width:' + overlayWidth + 'px !important');
  } else if (ov) {
    ov.style.setProperty('display', 'none', 'important');
  }
  window.scrollTo(0, scrollY);
  return [window.scrollY, window.innerHeight];
}

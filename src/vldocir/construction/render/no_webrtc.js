// Init script of every browser context (browser.py): removes the WebRTC and WebTransport
// interfaces before the document's own scripts run.
(() => {
  // Installed in every frame before the document's own scripts: no way to open a peer connection
  // (or a WebTransport session) from a page. The launch flags (NO_WEBRTC_ARGS) hold even without it.
  for (const name of ['RTCPeerConnection', 'webkitRTCPeerConnection', 'RTCDataChannel', 'RTCRtpSender',
                      'RTCRtpReceiver', 'RTCRtpTransceiver', 'RTCIceCandidate', 'RTCIceTransport',
                      'RTCDtlsTransport', 'RTCSctpTransport', 'RTCSessionDescription', 'RTCCertificate',
                      'RTCRtpScriptTransform', 'RTCEncodedAudioFrame', 'RTCEncodedVideoFrame', 'WebTransport']) {
    try { delete globalThis[name]; } catch (e) {}
  }
})();

"""Chromium: where it is, how it is launched, and what it may reach.

Isolation, in layers: every browser context aborts each request outside the current document's
own folder (:func:`new_session`); no host name resolves (:data:`CHROMIUM_ARGS`, which also stops
WebTransport and TURN over TCP, connections the interception never sees); WebRTC may not use UDP
(:data:`NO_WEBRTC_ARGS`) and its interfaces are removed from every document before its scripts run
(:data:`NO_WEBRTC_SCRIPT`). Processes are tracked by id, so that a hung browser can be killed
(:func:`kill_process_tree`) without touching any other Chromium on the machine.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
from contextlib import suppress
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from vldocir.construction.render.config import RenderConfig, RenderError
from vldocir.errors import VldocirError

log = logging.getLogger(__name__)

MAX_BLOCKED_LOGGED = 100


def page_script(name: str) -> str:
    """The in-page script ``name``: a ``.js`` file of this package (kept out of Python strings so
    that editors and linters see JavaScript). A line ``// @include other.js`` is replaced by that
    file (functions shared by several scripts, e.g. what a formula is)."""
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return re.sub(r"^[ \t]*// @include ([\w.-]+\.js)[ \t]*$", lambda m: page_script(m.group(1)), text, flags=re.M)


class ScriptRunner:
    """Runs the in-page scripts (``.js`` files: a function taking one argument, or none) in the
    page's main world through the DevTools protocol, ``Runtime.evaluate`` with the result returned
    as JSON. Has the ``evaluate(script, arg)`` of a Playwright page for what the renderer runs, at
    a fraction of its cost: Playwright serialises and validates a result value by value in Python
    and in its driver (about 0.1 CPU-s and 0.2 s for the elements of a long document, against
    0.01 and 0.06 here). Results must be JSON values."""

    def __init__(self, cdp: Any):
        self.cdp = cdp

    def evaluate(self, script: str, arg: Any = None) -> Any:
        call = f"({script})()" if arg is None else f"({script})({json.dumps(arg)})"
        res = self.cdp.send("Runtime.evaluate", {"expression": call, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            details = res["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text") or "error"
            raise RenderError(f"in-page script failed: {text.splitlines()[0][:500]}")
        return res["result"].get("value")


NO_WEBRTC_ARGS: tuple[str, ...] = (
    # WebRTC's UDP sockets (STUN binding requests, TURN allocations, host candidates) bypass both
    # the request interception and the resolver rules, even to IP literals: a page could send
    # packets anywhere. UDP only through a proxy, and there is none: no candidate, no packet.
    # (``--force-webrtc-ip-handling-policy`` has no effect on Chromium 156: packets still go out.)
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--no-proxy-server",
)
"""Flags that keep WebRTC from sending anything (part of :data:`CHROMIUM_ARGS`); the WebRTC
interfaces are also removed from every document by :data:`NO_WEBRTC_SCRIPT`."""

NO_WEBRTC_SCRIPT = page_script("no_webrtc.js")
"""Init script of every browser context: removes the WebRTC and WebTransport interfaces."""

SCROLL_HOOKS_SCRIPT = page_script("scroll_hooks.js")
"""Init script of every browser context: notes whether the document's scripts react to scrolling
(only then does the renderer scroll through it to trigger lazy content)."""

CHROMIUM_ARGS: tuple[str, ...] = (
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-gpu",
    "--disable-quic",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    # Defence in depth behind the request interception: no host name resolves. It also stops the
    # connections that the interception never sees, even to IP literals: WebTransport (QUIC over
    # UDP, from pages and workers alike) and TURN over TCP.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    *NO_WEBRTC_ARGS,
)
"""Flags for every launch (``--no-sandbox`` is added when running as root, see RenderConfig)."""

SYSTEM_CHROMIUM_PATHS: tuple[str, ...] = ("/usr/bin/chromium",)
SYSTEM_CHROMIUM_NAMES: tuple[str, ...] = ("chromium", "chromium-browser", "google-chrome")


class ChromiumNotFoundError(VldocirError, RuntimeError):
    """No Chromium executable was found; the message names what was tried."""


def find_chromium(configured: str | None = None, playwright: Any = None) -> str:
    """The Chromium executable to launch.

    In order: ``configured``; ``$VLDOCIR_CHROMIUM``; Playwright's own Chromium when that file exists
    (asked from ``playwright``, a started Playwright instance, or from a short-lived one);
    ``/usr/bin/chromium``; ``chromium``, ``chromium-browser``, ``google-chrome`` on ``PATH``.

    A configured path or ``$VLDOCIR_CHROMIUM`` that is not an executable is an error (it is not
    silently replaced by another browser). Raises :class:`ChromiumNotFoundError` naming every place
    tried and how to install Chromium.
    """
    tried: list[str] = []
    hint = (
        "Install one with `apt-get install chromium` (Debian/Ubuntu), or set $VLDOCIR_CHROMIUM or "
        "RenderConfig.chromium_path to a Chromium executable."
    )

    def ok(path: str | None) -> bool:
        return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)

    # An explicit choice that does not work is an error, not a reason to pick another browser.
    if configured:
        found = configured if ok(configured) else shutil.which(configured)
        if found:
            return found
        raise ChromiumNotFoundError(f"configured Chromium {configured!r} is not an executable file. {hint}")
    env = os.environ.get("VLDOCIR_CHROMIUM")
    if env:
        found = env if ok(env) else shutil.which(env)
        if found:
            return found
        raise ChromiumNotFoundError(f"$VLDOCIR_CHROMIUM={env!r} is not an executable file. {hint}")
    tried.append("RenderConfig.chromium_path (unset)")
    tried.append("$VLDOCIR_CHROMIUM (unset)")
    managed = None
    try:
        if playwright is not None:
            managed = playwright.chromium.executable_path
        else:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as p:
                managed = p.chromium.executable_path
    except Exception as exc:  # Playwright missing or its driver unusable: try the system ones
        log.debug("cannot ask Playwright for its Chromium: %s", exc)
    if ok(managed):
        return str(managed)
    tried.append(f"Playwright-managed Chromium {managed!r}" if managed else "Playwright-managed Chromium")
    for path in SYSTEM_CHROMIUM_PATHS:
        if ok(path):
            return path
        tried.append(path)
    for name in SYSTEM_CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
        tried.append(f"{name} on PATH")
    raise ChromiumNotFoundError("no Chromium executable found; tried: " + "; ".join(tried) + ". " + hint)


def start_playwright() -> tuple[Any, set[int]]:
    """A started Playwright and the process ids of its driver (whose children are browsers)."""
    import psutil
    from playwright.sync_api import sync_playwright

    me = psutil.Process()
    before = {c.pid for c in me.children()}
    pw = sync_playwright().start()
    return pw, {c.pid for c in me.children()} - before


def launch(pw: Any, executable: str, cfg: RenderConfig, driver_pids: set[int]) -> tuple[Any, int | None]:
    """Launch headless Chromium with :data:`CHROMIUM_ARGS`: ``(browser, its process id or None)``."""
    import psutil

    args = list(CHROMIUM_ARGS)
    no_sandbox = cfg.no_sandbox if cfg.no_sandbox is not None else (hasattr(os, "geteuid") and os.geteuid() == 0)
    if no_sandbox:
        args.append("--no-sandbox")
    args += list(cfg.extra_args)
    drivers = [psutil.Process(p) for p in driver_pids if psutil.pid_exists(p)]
    before = {c.pid for d in drivers for c in d.children()}
    browser = pw.chromium.launch(
        executable_path=executable,
        headless=True,
        args=args,
        timeout=cfg.launch_timeout_s * 1000,
        handle_sigint=False,
        handle_sigterm=False,
        handle_sighup=False,
    )
    after = [c for d in drivers for c in d.children() if c.pid not in before]
    return browser, (after[0].pid if after else None)


def kill_process_tree(pid: int) -> None:
    """Kill the process ``pid`` and its descendants, by id (safe from any thread)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        family = proc.children(recursive=True)
        proc.kill()
    except psutil.NoSuchProcess:
        return
    for child in family:
        with suppress(psutil.NoSuchProcess):
            child.kill()


@dataclass
class Session:
    """A browser context with one page, reused for up to ``context_reuse`` documents."""

    context: Any
    page: Any = None
    cdp: Any = None
    scripts: ScriptRunner | None = None
    """The page's scripts, run through ``cdp``."""
    root: Path | None = None
    """The current document's folder: the only place its requests may read from."""
    blocked: list[str] = field(default_factory=list)
    documents: int = 0


def file_allowed(url: str, root: Path | None) -> bool:
    """Whether a request for ``url`` may be served to a document whose folder is ``root`` (a real,
    resolved path): only a ``file://`` URL naming a file under ``root`` once every symbolic link is
    resolved, so neither ``file:///etc/passwd`` (an ``<img>``, an ``<iframe>``, a navigation) nor a
    link ``img.png -> /etc/passwd`` inside the folder reaches anything outside it."""
    if root is None or not url.startswith("file:"):
        return False
    try:
        parsed = urlparse(url)
        if parsed.netloc not in ("", "localhost"):
            return False  # file://host/...: a network share
        path = Path(unquote(parsed.path)).resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return path == root or root in path.parents


def new_session(browser: Any, cfg: RenderConfig) -> Session:
    """A fresh, isolated browser context and page (see the module docstring)."""
    context = browser.new_context(
        viewport={
            "width": int(cfg.viewport_width_css),
            "height": math.ceil(cfg.page_height / cfg.device_scale_factor) + 1,
        },
        device_scale_factor=cfg.device_scale_factor,
        service_workers="block",
        accept_downloads=False,
        java_script_enabled=cfg.javascript,
    )
    session = Session(context)

    def handle(route) -> None:
        # Only files under the current document's folder; everything else is aborted.
        if file_allowed(route.request.url, session.root):
            route.continue_()
            return
        url = route.request.url
        if len(session.blocked) < MAX_BLOCKED_LOGGED:
            session.blocked.append(url)
        route.abort("blockedbyclient")

    context.add_init_script(script=NO_WEBRTC_SCRIPT)
    context.add_init_script(script=SCROLL_HOOKS_SCRIPT)
    context.route("**/*", handle)
    with suppress(Exception):  # older Playwright: websockets are still stopped by the resolver rules
        context.route_web_socket("**/*", lambda ws: ws.close())
    session.page = context.new_page()
    session.page.on("dialog", lambda d: d.dismiss())
    session.cdp = context.new_cdp_session(session.page)
    session.scripts = ScriptRunner(session.cdp)
    return session

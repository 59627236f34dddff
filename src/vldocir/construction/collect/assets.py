"""A collected page made self-contained: the images and stylesheets it references are fetched (through
the collector's polite client, so they are rate-limited and stored like any response) and written
beside it, and its references rewritten to those local files.

What :func:`localize` does to a page:

- resolves every reference against the page's final URL (or its ``<base href>``, then removed);
- fetches ``<img src>``, ``<input type=image src>``, ``<link rel=stylesheet href>`` and the ``url()``
  and ``@import`` references inside stylesheets, ``<style>`` elements and ``style`` attributes (fonts
  and background images included), into ``assets/<sha256(url)[:16]><ext>``; a stylesheet's own
  references become files of the same folder;
- drops ``srcset`` / ``sizes`` (and ``<picture><source>``): the localized ``src`` is the one image;
- drops ``<script>`` elements when ``drop_scripts`` (a collected page is static HTML for the
  renderer, which loads nothing from the network anyway);
- writes the page as UTF-8 with ``<meta charset="utf-8">`` first in its head, any other charset
  declaration removed (SEC filings often declare ISO-8859-1).

An asset that cannot be fetched (after the client's retries) is listed in
:attr:`LocalPage.failed` with its error; its reference is left pointing at the remote URL (made
absolute) and the page is kept. ``data:`` URLs are left as they are.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from vldocir.construction.collect.http import CollectError, MalformedResponse, Response, content_charset
from vldocir.errors import ConfigError

ASSETS_DIR = "assets"
_EXTENSIONS = {
    "text/css": ".css",
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/jpg": ".jpg",
    "image/gif": ".gif",
    "image/svg+xml": ".svg",
    "image/webp": ".webp",
    "image/avif": ".avif",
    "image/x-icon": ".ico",
    "image/vnd.microsoft.icon": ".ico",
    "font/woff2": ".woff2",
    "font/woff": ".woff",
    "application/font-woff": ".woff",
    "font/ttf": ".ttf",
    "font/otf": ".otf",
    "application/vnd.ms-fontobject": ".eot",
}
_CSS_REFERENCE = re.compile(  # @import "x.css" | @import url(x.css) | url(x.png)
    r"""@import\s+(?:url\(\s*)?(?P<q1>['"]?)(?P<import>[^'")\s;]+)(?P=q1)\s*\)?"""
    r"""|url\(\s*(?P<q2>['"]?)(?P<url>[^'")]*?)(?P=q2)\s*\)""",
    re.I,
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>", re.I)
MAX_CSS_DEPTH = 3  # @import chains followed this deep


@dataclass
class AssetSpec:
    """Which references of a page are made local (``collect.assets`` in conf/collect.yaml).

    Args:
        images: ``<img>`` / ``<input type=image>`` sources.
        stylesheets: ``<link rel=stylesheet>`` and the files stylesheets reference (fonts, images).
        drop_scripts: remove ``<script>`` elements.
        max_assets: the most assets fetched per page; the rest are listed as failed (``max_assets``).
    """

    images: bool = True
    stylesheets: bool = True
    drop_scripts: bool = True
    max_assets: int = 300

    def __post_init__(self) -> None:
        if isinstance(self.max_assets, bool) or int(self.max_assets) < 0:
            raise ConfigError(f"collect.assets.max_assets must be >= 0, got {self.max_assets!r}")


@dataclass
class LocalPage:
    """A localized page: ``html`` (UTF-8 text), ``assets`` ({remote URL: file name in ``assets/``}),
    ``failed`` ([{"url", "error"}]), ``title`` (its ``citation_title`` / ``og:title`` meta, else its
    ``<title>``; "" if none)."""

    html: str
    title: str = ""
    assets: dict[str, str] = field(default_factory=dict)
    failed: list[dict[str, str]] = field(default_factory=list)


def decode_html(response: Response) -> str:
    """The text of an HTML answer: the charset of its Content-Type, else of its ``<meta>``, else
    UTF-8, else Windows-1252; a leading XML declaration removed (lxml refuses it in a string)."""
    body = response.body
    if body.startswith(b"\xef\xbb\xbf"):
        body = body[3:]
    meta = _META_CHARSET.search(body[:4096])
    candidates = [content_charset(response.content_type), meta.group(1).decode("ascii") if meta else None, "utf-8"]
    for encoding in filter(None, candidates):
        try:
            text = body.decode(encoding)
            break
        except (LookupError, UnicodeDecodeError):
            continue
    else:
        text = body.decode("cp1252", errors="replace")
    return _XML_DECLARATION.sub("", text, count=1)


def parse_html(text: str, url: str):
    """An lxml document of ``text``; :class:`MalformedResponse` naming ``url`` for an empty page."""
    import lxml.html
    from lxml.etree import ParserError

    try:
        root = lxml.html.document_fromstring(text)
    except (ParserError, ValueError) as error:
        raise MalformedResponse(url, f"not an HTML page ({error})") from error
    body = root.find("body")
    if body is None or (not len(body) and not (body.text or "").strip()):
        raise MalformedResponse(url, "an HTML page with an empty body")
    return root


class _Localizer:
    def __init__(self, fetch: Callable[[str], Response], assets_dir: Path, spec: AssetSpec):
        self.fetch, self.assets_dir, self.spec = fetch, assets_dir, spec
        self.assets: dict[str, str] = {}
        self.failed: dict[str, str] = {}

    def asset(self, url: str, kind: str, depth: int = 0) -> str | None:
        """The local file name of the asset at absolute ``url`` (fetched once), or None if it failed."""
        if url in self.assets:
            return self.assets[url]
        if url in self.failed:
            return None
        if len(self.assets) >= int(self.spec.max_assets):
            self.failed[url] = f"max_assets: more than {self.spec.max_assets} assets on the page"
            return None
        try:
            response = self.fetch(url)
        except CollectError as error:
            self.failed[url] = f"{error.reason}: {error}"
            return None
        name = hashlib.sha256(url.encode()).hexdigest()[:16] + _extension(url, response.content_type, kind)
        self.assets[url] = name  # before the stylesheet's own references: an @import cycle stops here
        data = response.body
        if kind == "stylesheet":
            base = response.final_url or url
            css = self.css(response.text(), base, prefix="", depth=depth + 1)
            data = css.encode("utf-8")
        self.assets_dir.mkdir(parents=True, exist_ok=True)
        (self.assets_dir / name).write_bytes(data)
        return name

    def css(self, text: str, base: str, prefix: str, depth: int) -> str:
        """``text`` with its ``@import`` and ``url()`` references localized (``prefix`` + file name),
        in one pass (a rewritten reference is never read again)."""

        def replace(match: re.Match) -> str:
            is_import = match.group("import") is not None
            reference = match.group("import") if is_import else match.group("url")
            url = _absolute(base, reference.strip())
            if url is None:
                return match.group(0)
            name = None
            if self.spec.stylesheets and not (is_import and depth > MAX_CSS_DEPTH):
                name = self.asset(url, "stylesheet" if is_import else "file", depth)
            target = prefix + name if name else url
            return f'@import url("{target}")' if is_import else f'url("{target}")'

        return _CSS_REFERENCE.sub(replace, text)


def localize(
    html: str, page_url: str, fetch: Callable[[str], Response], doc_dir: str | Path, spec: AssetSpec
) -> LocalPage:
    """Fetch the assets of ``html`` (served at ``page_url``) into ``doc_dir/assets/`` and return the
    page rewritten to them (see the module docstring). ``fetch(url)`` is the collector's
    ``client.get``; it raises :class:`CollectError` for an asset that cannot be had."""
    import lxml.html
    from lxml import etree

    root = parse_html(html, page_url)
    base = page_url
    for element in root.iter("base"):
        if element.get("href"):
            base = urljoin(page_url, element.get("href").strip())
            break
    for element in list(root.iter("base")):
        element.drop_tree()
    if spec.drop_scripts:
        for element in list(root.iter("script")):
            element.drop_tree()
    local = _Localizer(fetch, Path(doc_dir) / ASSETS_DIR, spec)
    prefix = f"{ASSETS_DIR}/"

    for element in list(root.iter("source")):
        if element.getparent() is not None and element.getparent().tag == "picture" and element.get("srcset"):
            # not drop_tree: libxml2 (HTML 4) does not know <source> is empty and nests the <img> in it
            element.drop_tag()
    for element in root.iter("img", "input", "source"):
        for attribute in ("srcset", "sizes"):
            element.attrib.pop(attribute, None)
        if element.tag == "source" or (element.tag == "input" and (element.get("type") or "").lower() != "image"):
            continue  # <video>/<audio> sources are not fetched
        src = (element.get("src") or "").strip()
        url = _absolute(base, src)
        if url is None:
            continue
        name = local.asset(url, "image") if spec.images else None
        element.set("src", prefix + name if name else url)
    for element in root.iter("link"):
        rel = (element.get("rel") or "").lower().split()
        url = _absolute(base, (element.get("href") or "").strip())
        if url is None:
            continue
        if "stylesheet" in rel and spec.stylesheets:
            name = local.asset(url, "stylesheet")
            element.set("href", prefix + name if name else url)
        else:
            element.set("href", url)  # canonical, icons, ...: made absolute, not fetched
    for element in root.iter("style"):
        if element.text:
            element.text = local.css(element.text, base, prefix, depth=1)
    for element in root.iter():
        if isinstance(element.tag, str) and element.get("style") and "url(" in element.get("style").lower():
            element.set("style", local.css(element.get("style"), base, prefix, depth=1))
    for element in root.iter("a"):
        url = _absolute(base, (element.get("href") or "").strip(), keep_fragment=True)
        if url is not None:
            element.set("href", url)  # links stay links to the web, made absolute (the <base> is gone)

    _set_utf8(root, etree)
    text = lxml.html.tostring(root, encoding="unicode", method="html", doctype="<!DOCTYPE html>")
    failed = [{"url": url, "error": error} for url, error in local.failed.items()]
    return LocalPage(html=text, title=page_title(root), assets=dict(local.assets), failed=failed)


def page_title(root) -> str:
    """The title a page gives itself: ``citation_title`` or ``og:title`` meta, else ``<title>``."""
    for meta in root.iter("meta"):
        named = (meta.get("name") or meta.get("property") or "").lower() in ("citation_title", "og:title")
        if named and (meta.get("content") or "").strip():
            return " ".join(meta.get("content").split())
    title = root.find(".//title")
    return " ".join((title.text_content() if title is not None else "").split())


def _set_utf8(root, etree) -> None:
    head = root.find("head")
    if head is None:
        head = etree.Element("head")
        root.insert(0, head)
    for meta in list(root.iter("meta")):
        if meta.get("charset") is not None or (meta.get("http-equiv") or "").lower() == "content-type":
            meta.drop_tree()
    meta = etree.Element("meta")
    meta.set("charset", "utf-8")
    head.insert(0, meta)


def _absolute(base: str, reference: str, keep_fragment: bool = False) -> str | None:
    """``reference`` resolved against ``base``; None for data:, javascript:, fragment-only or empty ones."""
    if not reference or reference.startswith("#"):
        return None
    url = urljoin(base, reference)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return None
    return url if keep_fragment else parts._replace(fragment="").geturl()


def _extension(url: str, content_type: str, kind: str) -> str:
    if kind == "stylesheet":
        return ".css"
    mime = (content_type or "").split(";")[0].strip().lower()
    if mime in _EXTENSIONS:
        return _EXTENSIONS[mime]
    suffix = Path(urlsplit(url).path).suffix.lower()
    return suffix if re.fullmatch(r"\.[a-z0-9]{1,5}", suffix) else ".bin"

"""Pictures for the documents: tiny deterministic PNGs (a "photo" or a "scan") written beside
``index.html``, and inline SVG drawings (bar and line plots, a dimensioned tower elevation or scan)
whose own text (title, value label) can state an image fact."""

from __future__ import annotations

import math
import re
import struct
import zlib

import numpy as np

from vldocir.construction.html_docs.text import _esc


def _png(rng: np.random.Generator, width: int, height: int, palette: str) -> bytes:
    """A deterministic RGB PNG: a gradient with a few soft blobs (a "photo" or a "scan")."""
    y, x = np.mgrid[0:height, 0:width].astype(float)
    if palette == "scan":
        img = np.full((height, width, 3), 20.0)
        img += (
            60 * np.exp(-(((x - width / 2) / (width / 2.6)) ** 2 + ((y - height / 2) / (height / 2.4)) ** 2))[..., None]
        )
    else:
        top, bottom = rng.uniform(90, 220, 3), rng.uniform(30, 160, 3)
        img = top + (bottom - top) * (y / height)[..., None]
    for _ in range(int(rng.integers(3, 7))):
        cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(8, width / 3)
        color = rng.uniform(0, 255, 3) if palette != "scan" else np.full(3, rng.uniform(120, 230))
        weight = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None]
        img = img * (1 - weight) + color * weight
    raw = np.clip(img, 0, 255).astype(np.uint8)
    scanlines = b"".join(b"\x00" + raw[row].tobytes() for row in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(scanlines, 9))
        + chunk(b"IEND", b"")
    )


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    return next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= value)


def _tick(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 or v == int(v) else f"{v:.3g}"


def _title(text: str, w: float, size: int = 12, fill: str = "#000") -> tuple[list[str], float]:
    """A drawing's title as SVG text lines wrapped by words, and the height they take.

    Every line but the last ends with a space, so the drawing's text content (what the renderer
    and the tests read) holds the title as one unbroken phrase.
    """
    per_line = max(10, int(w / (0.56 * size)))
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= per_line:
            lines[-1] += " " + word
        else:
            lines.append(word)
    out = [
        f'<text x="{w / 2:.0f}" y="{4 + size + i * (size + 3)}" font-size="{size}" font-weight="bold" '
        f'text-anchor="middle" fill="{fill}">{_esc(line + (" " if i < len(lines) - 1 else ""))}</text>'
        for i, line in enumerate(lines)
    ]
    return out, 8 + len(lines) * (size + 3)


def _axes(w: int, h: int, top: float, ymax: float, xlabel: str, ylabel: str) -> list[str]:
    """Axes, y ticks and axis labels of a plot whose plot area is x 70..w-20, y top+8..h-50."""
    x0, x1, y0, y1 = 70, w - 20, top + 8, h - 50
    out = [
        f'<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="#333"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/>',
    ]
    for i in range(5):
        v = ymax * i / 4
        yy = y1 - (y1 - y0) * i / 4
        out.append(f'<line x1="{x0 - 4}" y1="{yy:.1f}" x2="{x0}" y2="{yy:.1f}" stroke="#333"/>')
        out.append(f'<text x="{x0 - 7}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">{_tick(v)}</text>')
    out.append(f'<text x="{(x0 + x1) / 2:.0f}" y="{h - 10}" font-size="13" text-anchor="middle">{_esc(xlabel)}</text>')
    out.append(
        f'<text transform="translate(16,{(y0 + y1) / 2:.0f}) rotate(-90)" font-size="13" '
        f'text-anchor="middle">{_esc(ylabel)}</text>'
    )
    return out


def _svg(w: int, h: int, inner: list[str], label: str) -> str:
    return (
        f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{_esc(label)}" '
        f'font-family="sans-serif">' + "".join(inner) + "</svg>"
    )


def _bar_plot(
    categories: list[str],
    values: list[float],
    labels: list[str],
    highlight: int | None,
    xlabel: str,
    ylabel: str,
    title: str,
    w: int = 600,
    h: int = 320,
) -> str:
    """Bars with a value label above each; the ``highlight`` bar is drawn darker."""
    out, top = _title(title, w)
    ymax = _nice_max(max(values) * 1.15)
    out += _axes(w, h, top, ymax, xlabel, ylabel)
    x0, x1, y0, y1 = 70, w - 20, top + 8, h - 50
    slot = (x1 - x0) / len(values)
    for i, (cat, v, lab) in enumerate(zip(categories, values, labels, strict=True)):
        bh = (y1 - y0) * v / ymax
        bx = x0 + i * slot + slot * 0.2
        fill = "#1f4e79" if i == highlight else "#9dbcd4"
        cx = bx + slot * 0.3
        out.append(f'<rect x="{bx:.1f}" y="{y1 - bh:.1f}" width="{slot * 0.6:.1f}" height="{bh:.1f}" fill="{fill}"/>')
        out.append(f'<text x="{cx:.1f}" y="{y1 - bh - 4:.1f}" font-size="11" text-anchor="middle">{_esc(lab)}</text>')
        out.append(f'<text x="{cx:.1f}" y="{y1 + 15}" font-size="11" text-anchor="middle">{_esc(cat)}</text>')
    return _svg(w, h, out, title)


def _line_plot(
    xs: list[float],
    series: list[tuple[str, list[float]]],
    xlabel: str,
    ylabel: str,
    title: str,
    mark: tuple[int, int, str] | None = None,
    w: int = 600,
    h: int = 320,
) -> str:
    """Line series with a legend; ``mark`` = (series index, point index, label) annotates a point."""
    out, top = _title(title, w)
    ymax = _nice_max(max(max(ys) for _, ys in series) * 1.1)
    out += _axes(w, h, top, ymax, xlabel, ylabel)
    x0, x1, y0, y1 = 70, w - 20, top + 8, h - 50
    colors = ("#1f4e79", "#c0504d", "#4f9a4f", "#8064a2")

    def px(i: int) -> float:
        return x0 + (x1 - x0) * (i / max(1, len(xs) - 1))

    def py(v: float) -> float:
        return y1 - (y1 - y0) * v / ymax

    for i, x in enumerate(xs):
        out.append(f'<text x="{px(i):.1f}" y="{y1 + 15}" font-size="11" text-anchor="middle">{x:g}</text>')
    for k, (name, ys) in enumerate(series):
        pts = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(ys))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colors[k % 4]}" stroke-width="2"/>')
        out.append(f'<rect x="{x1 - 150}" y="{y0 + 4 + 16 * k}" width="12" height="3" fill="{colors[k % 4]}"/>')
        out.append(f'<text x="{x1 - 134}" y="{y0 + 9 + 16 * k}" font-size="11">{_esc(name)}</text>')
    if mark is not None:
        k, i, label = mark
        cx, cy = px(i), py(series[k][1][i])
        anchor, dx = ("end", -8) if i > len(xs) / 2 else ("start", 8)
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="#000"/>')
        out.append(
            f'<text x="{cx + dx:.1f}" y="{cy - 8:.1f}" font-size="12" font-weight="bold" '
            f'text-anchor="{anchor}">{_esc(label)}</text>'
        )
    return _svg(w, h, out, title)


def _dimension_drawing(label: str, style: str, title: str, w: int = 260, h: int = 300) -> str:
    """A tower elevation (``style="tower"``) or a scan with a lesion (``"scan"``), with a
    dimension line labelled ``label``, under ``title``."""
    if style == "scan":
        heading, top = _title(title, w, 11, "#fff")
        mid = (top + h) / 2
        inner = [
            f'<rect width="{w}" height="{h}" fill="#111"/>',
            *heading,
            f'<ellipse cx="{w / 2}" cy="{mid:.1f}" rx="{w * 0.4}" ry="{(h - top) * 0.44:.1f}" fill="#555"/>',
            f'<ellipse cx="{w * 0.58}" cy="{mid - 10:.1f}" rx="{w * 0.12}" ry="{h * 0.09}" fill="#ccc"/>',
            f'<line x1="{w * 0.46}" y1="{mid + 30:.1f}" x2="{w * 0.7}" y2="{mid + 30:.1f}" stroke="#ff0" stroke-width="2"/>',
            f'<text x="{w * 0.58}" y="{mid + 50:.1f}" font-size="13" fill="#ff0" text-anchor="middle">{_esc(label)}</text>',
        ]
    else:
        heading, top = _title(title, w, 11)
        peak = top + 12
        inner = [
            f'<rect width="{w}" height="{h}" fill="#eef3f8"/>',
            *heading,
            f'<polygon points="{w * 0.42},{h - 20} {w * 0.47},{peak + 12} {w * 0.53},{peak + 12} {w * 0.58},{h - 20}" fill="#7a6a58"/>',
            f'<rect x="{w * 0.455}" y="{peak}" width="{w * 0.09}" height="14" fill="#5b4d3f"/>',
            f'<line x1="{w * 0.72}" y1="{peak}" x2="{w * 0.72}" y2="{h - 20}" stroke="#000"/>',
            f'<text x="{w * 0.75}" y="{(peak + h) / 2:.0f}" font-size="13">{_esc(label)}</text>',
        ]
    return _svg(w, h, inner, title)


def _with_attribute(markup: str, name: str, value: str) -> str:
    """``markup`` with ``name="value"`` added to its first (root) element."""
    return re.sub(r"^<([a-zA-Z]+)", lambda m: f'<{m.group(1)} {name}="{_esc(value)}"', markup, count=1)


def _img(src: str, width: int, height: int, alt: str, extra: str = "") -> str:
    return f'<img src="{_esc(src)}" width="{width}" height="{height}" alt="{_esc(alt)}"{extra}>'

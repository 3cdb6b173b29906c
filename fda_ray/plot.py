"""PNG charts drawn with numpy: line charts (with error bars, several panels, a legend) and heat maps.

Why not matplotlib: the product's dependency list is fixed (ray, torch, torchvision, numpy, pyarrow,
pytest), and a sweep must leave its plots behind on any machine it ran on, a bare cluster node included.
Charts here need lines, markers, error bars, axes with ticks, text and colours, which is a few hundred
lines: an RGB array, a 5x7 bitmap font, anti-aliased thick segments, and a PNG writer (zlib + struct).

    line_chart([Panel("ours", "noise", "accuracy (%)", [Series("FedGP", xs, ys, yerr)])], "acc.png", title=...)
    heatmap(values (R, C), row_labels, col_labels, "d.png", title=...)             # continuous, colour bar
    heatmap(codes (R, C) int, ..., categories=["FedDA", "FedGP"])                   # one colour per category
"""
from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

# 5x7 font, ASCII 32..126: five column bytes per glyph, bit 0 is the top row (the classic HD44780 table).
_FONT_HEX = (
    "0000000000 00005f0000 0007000700 147f147f14 242a7f2a12 2313086462 3649552250 0005030000 001c224100 "
    "0041221c00 082a1c2a08 08083e0808 0050300000 0808080808 0060600000 2010080402 3e5149453e 00427f4000 "
    "4261514946 2141454b31 1814127f10 2745454539 3c4a494930 0171090503 3649494936 064949291e 0036360000 "
    "0056360000 0008142241 1414141414 4122140800 0201510906 324979413e 7e1111117e 7f49494936 3e41414122 "
    "7f4141221c 7f49494941 7f09090101 3e41415132 7f0808087f 00417f4100 2040413f01 7f08142241 7f40404040 "
    "7f0204027f 7f0408107f 3e4141413e 7f09090906 3e4151215e 7f09192946 4649494931 01017f0101 3f4040403f "
    "1f2040201f 7f2018207f 6314081463 0304780403 6151494543 00007f4141 0204081020 41417f0000 0402010204 "
    "4040404040 0001020400 2054545478 7f48444438 3844444420 384444487f 3854545418 087e090102 081454543c "
    "7f08040478 00447d4000 2040443d00 007f102844 00417f4000 7c04180478 7c08040478 3844444438 7c14141408 "
    "081414187c 7c08040408 4854545420 043f444020 3c4040207c 1c2040201c 3c4030403c 4428102844 0c5050503c "
    "4464544c44 0008364100 00007f0000 0041360800 08082a1c08"
).split()
_GLYPHS: dict[str, np.ndarray] = {}
for _i, _h in enumerate(_FONT_HEX):
    _cols = bytes.fromhex(_h)
    _GLYPHS[chr(32 + _i)] = np.array([[(c >> r) & 1 for c in _cols] for r in range(7)], dtype=bool)  # (7, 5)
_REPLACE = {"±": "+-", "β": "beta", "σ": "sigma", "π": "pi", "–": "-", "—": "-", "×": "x", "…": "..."}

# Tableau-10: distinguishable, and the colours researchers are used to from matplotlib.
PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]
MARKERS = ("circle", "square", "triangle", "diamond")
BLACK, GREY, LIGHT = (0, 0, 0), (110, 110, 110), (225, 225, 225)
# Viridis at five anchors, interpolated linearly: perceptually ordered, readable in grey.
_VIRIDIS = np.array([(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)], dtype=float)


def write_png(path: str | Path, rgb: np.ndarray) -> None:
    """rgb: (H, W, 3) uint8. An 8-bit truecolour PNG, written atomically (a reader never sees half a file)."""
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()  # filter 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(png)
    tmp.replace(path)


def read_png(path: str | Path) -> np.ndarray:
    """The (H, W, 3) pixels of a PNG this module wrote (8-bit RGB, filter 0): what the tests look at."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"path={str(path)!r} is invalid: not a PNG file")
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 3 * w)
    return rows[:, 1:].reshape(h, w, 3).copy()


def _ascii(s: str) -> str:
    for k, v in _REPLACE.items():
        s = s.replace(k, v)
    return "".join(c if c in _GLYPHS else "?" for c in s)


def text_size(s: str, scale: int = 2) -> tuple[int, int]:
    """(width, height) in pixels of a one-line string."""
    n = len(_ascii(s))
    return (max(0, 6 * n - 1) * scale, 7 * scale)


class Canvas:
    """An RGB image with the drawing operations the charts need (coordinates: x right, y down, pixels)."""

    def __init__(self, width: int, height: int) -> None:
        self.px = np.full((height, width, 3), 255, dtype=np.uint8)  # (H, W, 3)

    @property
    def size(self) -> tuple[int, int]:
        return self.px.shape[1], self.px.shape[0]

    def _blend(self, y0: int, x0: int, alpha: np.ndarray, color: tuple[int, int, int]) -> None:
        """Paint `color` with per-pixel coverage alpha (h, w) at (x0, y0), clipped to the image."""
        h, w = alpha.shape
        H, W = self.px.shape[:2]
        ya, xa, yb, xb = max(0, y0), max(0, x0), min(H, y0 + h), min(W, x0 + w)
        if ya >= yb or xa >= xb:
            return
        a = alpha[ya - y0:yb - y0, xa - x0:xb - x0, None]
        region = self.px[ya:yb, xa:xb].astype(float)
        self.px[ya:yb, xa:xb] = np.round(region * (1 - a) + np.array(color, float) * a).astype(np.uint8)

    def rect(self, x0: float, y0: float, x1: float, y1: float, color: tuple[int, int, int]) -> None:
        x0, x1 = sorted((int(round(x0)), int(round(x1))))
        y0, y1 = sorted((int(round(y0)), int(round(y1))))
        self._blend(y0, x0, np.ones((y1 - y0 + 1, x1 - x0 + 1)), color)

    def line(self, x0: float, y0: float, x1: float, y1: float, color: tuple[int, int, int], width: float = 2.0,
             dash: float = 0.0) -> None:
        """An anti-aliased segment `width` px thick; dash > 0: dashes and gaps of that length."""
        length = math.hypot(x1 - x0, y1 - y0)
        if dash > 0 and length > dash:
            n = int(length // dash)
            for k in range(0, n + 1, 2):
                a, b = k * dash / length, min(1.0, (k + 1) * dash / length)
                self.line(x0 + a * (x1 - x0), y0 + a * (y1 - y0), x0 + b * (x1 - x0), y0 + b * (y1 - y0), color, width)
            return
        r = width / 2
        xa, ya = int(math.floor(min(x0, x1) - r - 1)), int(math.floor(min(y0, y1) - r - 1))
        xb, yb = int(math.ceil(max(x0, x1) + r + 1)), int(math.ceil(max(y0, y1) + r + 1))
        ys, xs = np.mgrid[ya:yb + 1, xa:xb + 1].astype(float)  # pixel centres of the bounding box
        dx, dy = x1 - x0, y1 - y0
        t = np.clip(((xs - x0) * dx + (ys - y0) * dy) / max(dx * dx + dy * dy, 1e-12), 0, 1)
        dist = np.hypot(xs - (x0 + t * dx), ys - (y0 + t * dy))
        self._blend(ya, xa, np.clip(r + 0.5 - dist, 0, 1), color)

    def polyline(self, pts: Sequence[tuple[float, float]], color: tuple[int, int, int], width: float = 2.0,
                 dash: float = 0.0) -> None:
        for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
            self.line(xa, ya, xb, yb, color, width, dash)

    def marker(self, x: float, y: float, shape: str, color: tuple[int, int, int], size: float = 4.0) -> None:
        """A filled marker of radius `size` centred at (x, y)."""
        xa, ya = int(math.floor(x - size - 1)), int(math.floor(y - size - 1))
        n = int(2 * size + 3)
        ys, xs = np.mgrid[ya:ya + n, xa:xa + n].astype(float)
        u, v = xs - x, ys - y
        if shape == "square":
            d = np.maximum(abs(u), abs(v)) - size * 0.85
        elif shape == "diamond":
            d = (abs(u) + abs(v)) / 1.2 - size
        elif shape == "triangle":  # pointing up: inside all three edges
            d = np.maximum(v - size * 0.8, np.maximum(-1.6 * u - v - size, 1.6 * u - v - size) / 1.9)
        else:
            d = np.hypot(u, v) - size
        self._blend(ya, xa, np.clip(0.5 - d, 0, 1), color)

    def text(self, x: float, y: float, s: str, color: tuple[int, int, int] = BLACK, scale: int = 2,
             anchor: str = "lt", vertical: bool = False) -> None:
        """Text with its anchor at (x, y): anchor = horizontal l/c/r + vertical t/m/b (of the unrotated text);
        vertical: rotated a quarter turn anticlockwise (a y-axis label), anchored around its centre."""
        s = _ascii(s)
        if not s:
            return
        bits = np.zeros((7, 6 * len(s) - 1), dtype=bool)
        for i, ch in enumerate(s):
            bits[:, 6 * i:6 * i + 5] = _GLYPHS[ch]
        bits = np.kron(bits, np.ones((scale, scale), dtype=bool))  # (7 s, (6 n - 1) s)
        if vertical:
            bits = np.rot90(bits)
        h, w = bits.shape
        ox = {"l": 0, "c": w / 2, "r": w}[anchor[0]]
        oy = {"t": 0, "m": h / 2, "b": h}[anchor[1]]
        if vertical:
            ox, oy = w / 2, h / 2
        self._blend(int(round(y - oy)), int(round(x - ox)), bits.astype(float), color)

    def save(self, path: str | Path) -> None:
        write_png(path, self.px)


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi] with about `target` ticks."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"axis range [{lo}, {hi}] is invalid: finite numbers are needed")
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    raw = (hi - lo) / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step + 1e-9) * step
    ticks = []
    k = 0
    while first + k * step <= hi + step * 1e-9 or not ticks or ticks[-1] < hi:
        ticks.append(round(first + k * step, 12))
        k += 1
    return ticks


def _fmt(v: float) -> str:
    return f"{v:g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


@dataclass
class Series:
    """One line: points (x, y), optional symmetric error bars; NaN y leaves a gap."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    yerr: Sequence[float] | None = None
    dash: bool = False


@dataclass
class Panel:
    title: str
    xlabel: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    xticks: Sequence[float] | None = None  # default: round numbers over the data


def _styles(labels: list[str]) -> dict[str, tuple[tuple[int, int, int], str]]:
    return {lab: (PALETTE[i % len(PALETTE)], MARKERS[(i // len(PALETTE) + i) % len(MARKERS)])
            for i, lab in enumerate(labels)}


def line_chart(panels: list[Panel], path: str | Path, title: str = "", share_y: bool = True,
               panel_size: tuple[int, int] = (470, 340), columns: int | None = None) -> None:
    """Panels side by side (wrapping after `columns`), one legend below for every series label."""
    if not panels:
        raise ValueError("panels=[] is invalid: a chart needs at least one panel")
    labels = list(dict.fromkeys(s.label for p in panels for s in p.series))
    style = _styles(labels)
    cols = columns or min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    pw, ph = panel_size
    left, right, top, bottom = 78, 16, 30, 52
    legend_cols = max(1, (cols * pw) // 230)
    legend_h = 12 + 24 * math.ceil(len(labels) / legend_cols)
    title_h = 36 if title else 8
    canvas = Canvas(cols * pw, title_h + rows * ph + legend_h)
    if title:
        canvas.text(canvas.size[0] / 2, 10, title, anchor="ct")

    def finite(vals):
        return [float(v) for v in vals if v is not None and math.isfinite(float(v))]

    def yrange(ps: list[Panel]) -> tuple[float, float]:
        lo, hi = math.inf, -math.inf
        for p in ps:
            for s in p.series:
                err = s.yerr or [0.0] * len(s.y)
                for y, e in zip(s.y, err):
                    if y is not None and math.isfinite(float(y)):
                        e = float(e) if e is not None and math.isfinite(float(e)) else 0.0
                        lo, hi = min(lo, float(y) - e), max(hi, float(y) + e)
        return (lo, hi) if lo <= hi else (0.0, 1.0)

    shared = yrange(panels) if share_y else None
    for k, p in enumerate(panels):
        ox, oy = (k % cols) * pw, title_h + (k // cols) * ph
        x0, x1, y0, y1 = ox + left, ox + pw - right, oy + top, oy + ph - bottom  # plot area
        xs = finite(v for s in p.series for v in s.x)
        xt = list(p.xticks) if p.xticks is not None else nice_ticks(min(xs, default=0), max(xs, default=1))
        yt = nice_ticks(*(shared or yrange([p])))
        xlo, xhi = min(xt + xs), max(xt + xs)
        ylo, yhi = yt[0], yt[-1]
        pad = 0.04 * (xhi - xlo or 1)
        xlo, xhi = xlo - pad, xhi + pad

        def X(v: float) -> float:
            return x0 + (v - xlo) / (xhi - xlo) * (x1 - x0)

        def Y(v: float) -> float:
            return y1 - (v - ylo) / (yhi - ylo or 1) * (y1 - y0)

        canvas.text((x0 + x1) / 2, oy + 8, p.title, anchor="ct")
        for v in yt:
            canvas.line(x0, Y(v), x1, Y(v), LIGHT, 1)
            canvas.text(x0 - 6, Y(v), _fmt(v), GREY, anchor="rm")
        for v in xt:
            canvas.line(X(v), y1, X(v), y1 + 4, GREY, 1)
            canvas.text(X(v), y1 + 8, _fmt(v), GREY, anchor="ct")
        canvas.line(x0, y0, x0, y1, GREY, 1)
        canvas.line(x0, y1, x1, y1, GREY, 1)
        canvas.text((x0 + x1) / 2, y1 + 30, p.xlabel, anchor="ct")
        canvas.text(ox + 12, (y0 + y1) / 2, p.ylabel, vertical=True)
        for s in p.series:
            color, shape = style[s.label]
            pts = [(X(float(x)), Y(float(y))) if y is not None and math.isfinite(float(y)) else None
                   for x, y in zip(s.x, s.y)]
            run: list[tuple[float, float]] = []
            for q in pts + [None]:  # a NaN ends a stretch of line
                if q is None:
                    canvas.polyline(run, color, 2.0, dash=7.0 if s.dash else 0.0)
                    run = []
                else:
                    run.append(q)
            for i, q in enumerate(pts):
                if q is None:
                    continue
                if s.yerr is not None and s.yerr[i] is not None and math.isfinite(float(s.yerr[i])) and s.yerr[i] > 0:
                    y = float(s.y[i])
                    e = float(s.yerr[i])
                    canvas.line(q[0], Y(y - e), q[0], Y(y + e), color, 1.5)
                    for yy in (Y(y - e), Y(y + e)):
                        canvas.line(q[0] - 4, yy, q[0] + 4, yy, color, 1.5)
                canvas.marker(q[0], q[1], shape, color, 4.0)
    ly = title_h + rows * ph + 8
    cw = canvas.size[0] // legend_cols
    for i, lab in enumerate(labels):
        color, shape = style[lab]
        lx, lyy = (i % legend_cols) * cw + 20, ly + 24 * (i // legend_cols) + 8
        canvas.line(lx, lyy, lx + 28, lyy, color, 2.0)
        canvas.marker(lx + 14, lyy, shape, color, 4.0)
        canvas.text(lx + 36, lyy, lab, anchor="lm")
    canvas.save(path)


def colormap(t: np.ndarray) -> np.ndarray:
    """Viridis-like colours (..., 3) uint8 for t in [0, 1]."""
    t = np.clip(np.asarray(t, float), 0, 1) * (len(_VIRIDIS) - 1)
    i = np.minimum(t.astype(int), len(_VIRIDIS) - 2)
    f = (t - i)[..., None]
    return np.round(_VIRIDIS[i] * (1 - f) + _VIRIDIS[i + 1] * f).astype(np.uint8)


def heatmap(values: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], path: str | Path,
            title: str = "", xlabel: str = "", ylabel: str = "", categories: Sequence[str] | None = None,
            annotate: bool = True, cell: int = 56) -> None:
    """A (R, C) heat map. categories given: `values` are integer codes into it (-1: none), one colour each
    and a legend; else a continuous colour bar, and each cell annotated with its value."""
    values = np.asarray(values)
    if values.ndim != 2 or values.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"values shape {values.shape} is invalid: expected ({len(row_labels)}, {len(col_labels)}) "
                         "for the row and column labels")
    R, C = values.shape
    label_w = max([text_size(s)[0] for s in row_labels] + [0]) + 12
    left, top = 30 + label_w, (40 if title else 10)
    side = 150 if categories is None else max(text_size(c)[0] for c in categories) + 60
    canvas = Canvas(left + C * cell + side, top + R * cell + 70)
    if title:
        canvas.text(canvas.size[0] / 2, 10, title, anchor="ct")
    if categories is None:
        finite = values[np.isfinite(values)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        span = hi - lo or 1.0
    for r in range(R):
        for c in range(C):
            x, y = left + c * cell, top + r * cell
            v = values[r, c]
            if categories is not None:
                color = PALETTE[int(v) % len(PALETTE)] if int(v) >= 0 else LIGHT
            elif math.isfinite(float(v)):
                color = tuple(int(u) for u in colormap((float(v) - lo) / span))
            else:
                color = LIGHT
            canvas.rect(x, y, x + cell - 2, y + cell - 2, color)
            if annotate and categories is None and math.isfinite(float(v)):
                ink = BLACK if sum(color) > 380 else (255, 255, 255)
                canvas.text(x + cell / 2 - 1, y + cell / 2 - 1, f"{float(v):.3g}", ink, scale=1, anchor="cm")
    for r, lab in enumerate(row_labels):
        canvas.text(left - 8, top + r * cell + cell / 2, lab, anchor="rm")
    for c, lab in enumerate(col_labels):
        canvas.text(left + c * cell + cell / 2, top + R * cell + 6, lab, anchor="ct")
    if xlabel:
        canvas.text(left + C * cell / 2, top + R * cell + 36, xlabel, anchor="ct")
    if ylabel:
        canvas.text(12, top + R * cell / 2, ylabel, vertical=True)
    sx = left + C * cell + 24
    if categories is not None:
        for i, name in enumerate(categories):
            yy = top + 10 + 26 * i
            canvas.rect(sx, yy, sx + 16, yy + 16, PALETTE[i % len(PALETTE)])
            canvas.text(sx + 24, yy + 8, name, anchor="lm")
    else:
        bar_h = R * cell
        ramp = colormap(np.linspace(1, 0, bar_h))  # (bar_h, 3): top is the maximum
        canvas.px[top:top + bar_h, sx:sx + 18] = ramp[:, None, :]
        for v in nice_ticks(lo, hi, 4):
            if lo <= v <= hi:
                yy = top + (hi - v) / span * (bar_h - 1)
                canvas.line(sx + 18, yy, sx + 24, yy, GREY, 1)
                canvas.text(sx + 28, yy, _fmt(v), anchor="lm")
    canvas.save(path)

"""Procedural pictures for the sandbox, the question-image perturbation, and image features.

Each entity type has its drawing styles, seeded by a key; ``lookalike`` makes near copies for
distractor pages. A task's question image is a perturbed copy (crop, resize, colour shift, JPEG),
so image search must be near-duplicate search over ``image_features``.
"""

from __future__ import annotations

import hashlib
import io
import math
import random
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFont

from vsearcher_lite.runio import atomic_write_bytes

WIDTH, HEIGHT = 160, 120

PALETTE: tuple[tuple[int, int, int], ...] = (
    (200, 30, 45), (240, 240, 235), (20, 60, 150), (250, 200, 30), (20, 120, 60), (10, 10, 10),
    (120, 40, 140), (240, 120, 20), (90, 170, 220), (130, 80, 40), (230, 110, 150), (60, 60, 70),
    (160, 200, 60), (0, 140, 140), (180, 160, 120), (100, 20, 30),
)

# Which drawing style each entity type gets (the first entry of a pair is the common one).
STYLES_BY_TYPE: dict[str, tuple[tuple[str, float], ...]] = {
    "region": (("flag", 1.0),), "settlement": (("skyline", 1.0),), "river": (("river", 1.0),),
    "mountain": (("mountain", 1.0),), "lake": (("lake", 1.0),), "building": (("facade", 1.0),),
    "organisation": (("emblem", 0.6), ("text", 0.4)), "person": (("portrait", 1.0),),
    "artwork": (("abstract", 1.0),), "event": (("poster", 0.7), ("text", 0.3)),
    "species": (("specimen", 1.0),), "vessel": (("ship", 1.0),),
}
SIMPLE_STYLES = frozenset({"flag", "text"})


def key_rng(key: str) -> random.Random:
    return random.Random(f"vsearcher-image:{key}")


def key_np_rng(key: str) -> np.random.Generator:
    digest = hashlib.sha256(f"vsearcher-image-np:{key}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def choose_style(entity_type: str, rng: random.Random) -> str:
    options = STYLES_BY_TYPE[entity_type]
    return rng.choices([s for s, _ in options], weights=[w for _, w in options])[0]


def _colour(rng: random.Random, jitter: int = 25) -> tuple[int, int, int]:
    base = rng.choice(PALETTE)
    return tuple(int(min(255, max(0, c + rng.randint(-jitter, jitter)))) for c in base)  # type: ignore[return-value]


RGB = tuple[int, int, int]


def _gradient(top: RGB, bottom: RGB, height: int = HEIGHT) -> np.ndarray:
    t = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    col = (1 - t) * np.asarray(top, np.float32) + t * np.asarray(bottom, np.float32)
    return np.broadcast_to(col, (height, WIDTH, 3)).copy()


def _to_image(arr: np.ndarray) -> Image.Image:
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def _add_noise(img: Image.Image, key: str, amount: float) -> Image.Image:
    """Film grain: low-resolution noise scaled up, so PNG files stay small."""
    nrng = key_np_rng(key + ":noise")
    grain = nrng.normal(0.0, amount, (HEIGHT // 4, WIDTH // 4, 1)).astype(np.float32)
    grain = np.repeat(np.repeat(grain, 4, axis=0), 4, axis=1)
    return _to_image(np.asarray(img, np.float32) + grain)


_FONTS: dict[int, ImageFont.ImageFont] = {}


def _font(size: int):
    if size not in _FONTS:
        try:
            _FONTS[size] = ImageFont.load_default(size=size)
        except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
            _FONTS[size] = ImageFont.load_default()
    return _FONTS[size]


# -- the styles ------------------------------------------------------------------------

def _flag(rng: random.Random, label: str) -> Image.Image:
    a, b = rng.sample(PALETTE, 2)
    img = Image.new("RGB", (WIDTH, HEIGHT), a)
    d = ImageDraw.Draw(img)
    layout = rng.choice(("horizontal", "vertical", "cross", "diagonal", "canton", "triband",
                         "border", "disc"))
    if layout == "horizontal":
        d.rectangle([0, HEIGHT // 2, WIDTH, HEIGHT], fill=b)
    elif layout == "vertical":
        d.rectangle([WIDTH // 2, 0, WIDTH, HEIGHT], fill=b)
    elif layout == "cross":
        x = rng.choice((WIDTH // 2, WIDTH // 3))
        d.rectangle([x - 10, 0, x + 10, HEIGHT], fill=b)
        d.rectangle([0, HEIGHT // 2 - 10, WIDTH, HEIGHT // 2 + 10], fill=b)
    elif layout == "diagonal":
        d.polygon([(0, HEIGHT), (WIDTH, 0), (WIDTH, HEIGHT)], fill=b)
    elif layout == "canton":
        d.rectangle([0, 0, WIDTH // 2, HEIGHT // 2], fill=b)
    elif layout == "triband":
        d.rectangle([0, HEIGHT // 3, WIDTH, 2 * HEIGHT // 3], fill=b)
    elif layout == "border":
        d.rectangle([12, 12, WIDTH - 12, HEIGHT - 12], fill=b)
    else:
        r = rng.randint(22, 40)
        cx = rng.choice((WIDTH // 2, WIDTH // 3))
        d.ellipse([cx - r, HEIGHT // 2 - r, cx + r, HEIGHT // 2 + r], fill=b)
    return img


def _text_card(rng: random.Random, label: str) -> Image.Image:
    bg = (rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255))
    fg = (250, 250, 250) if sum(bg) < 380 else (15, 15, 15)
    img = Image.new("RGB", (WIDTH, HEIGHT), bg)
    d = ImageDraw.Draw(img)
    words = label.split()
    lines, line = [], ""
    for w in words:
        if len(line) + len(w) > 12 and line:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    size = rng.choice((14, 16, 18, 20, 22))
    y = max(2, (HEIGHT - len(lines) * (size + 4)) // 2 + rng.randint(-20, 20))
    x = rng.randint(4, 24)
    for ln in lines[:4]:
        d.text((x, y), ln, fill=fg, font=_font(size))
        y += size + 4
    return img


def _emblem(rng: random.Random, label: str) -> Image.Image:
    bg, ring, fg = _colour(rng), _colour(rng), _colour(rng)
    img = _to_image(_gradient(bg, tuple(int(c * 0.7) for c in bg)))
    d = ImageDraw.Draw(img)
    cx, cy, r = WIDTH // 2 + rng.randint(-20, 20), HEIGHT // 2, rng.randint(34, 50)
    if rng.random() < 0.5:
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=ring, outline=fg, width=4)
    else:
        shield = [(cx - r, cy - r), (cx + r, cy - r), (cx + r, cy + r // 3), (cx, cy + r),
                  (cx - r, cy + r // 3)]
        d.polygon(shield, fill=ring, outline=fg)
    initials = "".join(w[0] for w in label.split() if w[:1].isupper())[:3] or label[:2]
    d.text((cx - 8 * len(initials), cy - 14), initials, fill=fg, font=_font(26))
    for _ in range(rng.randint(2, 6)):
        x, y = rng.randint(0, WIDTH), rng.randint(0, HEIGHT)
        d.regular_polygon((x, y, rng.randint(4, 9)), rng.randint(3, 6), fill=fg)
    return img


def _sky(rng: random.Random) -> np.ndarray:
    top = (rng.randint(20, 120), rng.randint(60, 160), rng.randint(140, 255))
    if rng.random() < 0.3:  # dusk
        top = (rng.randint(120, 220), rng.randint(60, 120), rng.randint(80, 160))
    bottom = (rng.randint(180, 255), rng.randint(170, 240), rng.randint(150, 230))
    return _gradient(top, bottom)


def _ridge(rng: random.Random, base_y: int, amplitude: int,
           roughness: int) -> list[tuple[int, int]]:
    pts = [(0, HEIGHT)]
    n = rng.randint(4, 9)
    for i in range(n + 1):
        x = int(i * WIDTH / n)
        y = base_y - rng.randint(0, amplitude) + rng.randint(-roughness, roughness)
        pts.append((x, y))
    pts.append((WIDTH, HEIGHT))
    return pts


def _mountain(rng: random.Random, label: str) -> Image.Image:
    img = _to_image(_sky(rng))
    d = ImageDraw.Draw(img)
    if rng.random() < 0.5:
        r = rng.randint(6, 14)
        x, y = rng.randint(10, WIDTH - 10), rng.randint(8, 40)
        d.ellipse([x - r, y - r, x + r, y + r], fill=(255, 240, 200))
    for layer in range(rng.randint(2, 3)):
        shade = 60 + 40 * layer
        col = (shade + rng.randint(-20, 20), shade + rng.randint(-20, 20),
               shade + 20 + rng.randint(-20, 20))
        d.polygon(_ridge(rng, 60 + 20 * layer, 50 - 10 * layer, 6), fill=col)
    peak_x, peak_y = rng.randint(40, 120), rng.randint(12, 35)
    width = rng.randint(40, 70)
    d.polygon([(peak_x - width, 100), (peak_x, peak_y), (peak_x + width, 100)], fill=(90, 85, 95))
    cap_y = peak_y + 18
    snow = [(peak_x - width // 4, cap_y), (peak_x, peak_y), (peak_x + width // 4, cap_y)]
    d.polygon(snow, fill=(245, 245, 250))
    grass = (40 + rng.randint(0, 40), 100 + rng.randint(0, 40), 40)
    d.rectangle([0, 100, WIDTH, HEIGHT], fill=grass)
    return img


def _river(rng: random.Random, label: str) -> Image.Image:
    arr = _sky(rng)
    arr[45:] = _gradient((60, 130 + rng.randint(0, 40), 50), (30, 90, 30))[45:]
    img = _to_image(arr)
    d = ImageDraw.Draw(img)
    d.polygon(_ridge(rng, 48, 14, 4), fill=(70, 110, 80))
    water = (40 + rng.randint(0, 40), 90 + rng.randint(0, 50), 170 + rng.randint(0, 60))
    x = rng.randint(30, 130)
    phase, amp = rng.uniform(0, math.tau), rng.randint(10, 35)
    for y in range(45, HEIGHT):
        t = (y - 45) / (HEIGHT - 45)
        cx = x + amp * math.sin(phase + 4 * t)
        half = 3 + 22 * t
        d.line([(cx - half, y), (cx + half, y)], fill=water)
    for _ in range(rng.randint(3, 8)):
        tx, ty = rng.randint(0, WIDTH), rng.randint(50, 110)
        d.ellipse([tx - 6, ty - 10, tx + 6, ty + 4], fill=(20, 70 + rng.randint(0, 40), 30))
    return img


def _lake(rng: random.Random, label: str) -> Image.Image:
    img = _to_image(_sky(rng))
    d = ImageDraw.Draw(img)
    d.polygon(_ridge(rng, 55, 25, 5), fill=(70 + rng.randint(0, 30), 100, 90))
    d.rectangle([0, 62, WIDTH, HEIGHT], fill=(50, 110 + rng.randint(0, 30), 50))
    cx, w, h = rng.randint(50, 110), rng.randint(50, 75), rng.randint(18, 30)
    water = (40 + rng.randint(0, 30), 100 + rng.randint(0, 60), 160 + rng.randint(0, 80))
    d.ellipse([cx - w, 88 - h, cx + w, 88 + h], fill=water)
    for _ in range(rng.randint(2, 5)):
        x = rng.randint(0, WIDTH)
        d.line([(x, 80), (x + rng.randint(10, 25), 80)], fill=(220, 230, 240), width=1)
    return img


def _skyline(rng: random.Random, label: str) -> Image.Image:
    img = _to_image(_sky(rng))
    d = ImageDraw.Draw(img)
    x = 0
    while x < WIDTH:
        w = rng.randint(10, 28)
        h = rng.randint(20, 75)
        col = _colour(rng, 30)
        col = tuple(int(c * 0.6) for c in col)
        d.rectangle([x, HEIGHT - h, x + w, HEIGHT], fill=col)
        if rng.random() < 0.3:
            roof = HEIGHT - h - rng.randint(6, 18)
            d.polygon([(x, HEIGHT - h), (x + w // 2, roof), (x + w, HEIGHT - h)], fill=col)
        for wy in range(HEIGHT - h + 4, HEIGHT - 4, 8):
            for wx in range(x + 3, x + w - 3, 6):
                if rng.random() < 0.5:
                    d.rectangle([wx, wy, wx + 2, wy + 3], fill=(250, 230, 140))
        x += w + rng.randint(0, 4)
    return img


def _facade(rng: random.Random, label: str) -> Image.Image:
    img = _to_image(_sky(rng))
    d = ImageDraw.Draw(img)
    wall = _colour(rng, 30)
    roof = _colour(rng, 20)
    left, right = rng.randint(15, 50), rng.randint(110, 145)
    top = rng.randint(30, 60)
    d.rectangle([left, top, right, HEIGHT - 8], fill=wall)
    roof_kind = rng.choice(("gable", "dome", "flat", "spire"))
    mid = (left + right) // 2
    if roof_kind == "gable":
        d.polygon([(left - 5, top), (mid, top - rng.randint(15, 28)), (right + 5, top)], fill=roof)
    elif roof_kind == "dome":
        r = (right - left) // 3
        d.pieslice([mid - r, top - r, mid + r, top + r], 180, 360, fill=roof)
    elif roof_kind == "spire":
        d.polygon([(mid - 8, top), (mid, 4), (mid + 8, top)], fill=roof)
    rows, cols = rng.randint(2, 5), rng.randint(3, 7)
    win = (rng.randint(20, 80), rng.randint(20, 80), rng.randint(60, 140))
    arched = rng.random() < 0.5
    for r in range(rows):
        for c in range(cols):
            wx = left + 6 + c * (right - left - 12) // cols
            wy = top + 6 + r * (HEIGHT - 20 - top) // rows
            if arched:
                d.chord([wx, wy, wx + 7, wy + 8], 180, 360, fill=win)
                d.rectangle([wx, wy + 4, wx + 7, wy + 10], fill=win)
            else:
                d.rectangle([wx, wy, wx + 7, wy + 10], fill=win)
    d.rectangle([mid - 7, HEIGHT - 26, mid + 7, HEIGHT - 8], fill=tuple(int(c * 0.4) for c in wall))
    d.rectangle([0, HEIGHT - 8, WIDTH, HEIGHT], fill=(90, 90, 85))
    return img


def _portrait(rng: random.Random, label: str) -> Image.Image:
    bg = _colour(rng, 30)
    img = _to_image(_gradient(bg, tuple(int(c * 0.5) for c in bg)))
    d = ImageDraw.Draw(img)
    if rng.random() < 0.5:  # patterned wallpaper
        stripe = tuple(min(255, int(c * 1.2)) for c in bg)
        step = rng.randint(8, 16)
        for x in range(0, WIDTH, step):
            d.line([(x, 0), (x, HEIGHT)], fill=stripe, width=2)
    skin = rng.choice(((240, 200, 170), (200, 150, 110), (150, 100, 70), (100, 65, 45),
                       (225, 180, 140)))
    coat = _colour(rng, 20)
    cx = WIDTH // 2 + rng.randint(-25, 25)
    d.pieslice([cx - 55, 80, cx + 55, 190], 180, 360, fill=coat)
    head_w, head_h = rng.randint(20, 27), rng.randint(27, 34)
    d.ellipse([cx - head_w, 52 - head_h, cx + head_w, 52 + head_h], fill=skin)
    hair = rng.choice(((30, 20, 10), (90, 60, 30), (200, 170, 90), (150, 150, 150), (120, 40, 20)))
    d.chord([cx - head_w - 2, 52 - head_h - 4, cx + head_w + 2, 52 + 6], 180, 360, fill=hair)
    for ex in (cx - head_w // 2.5, cx + head_w // 2.5):
        d.ellipse([ex - 3, 50, ex + 3, 55], fill=(30, 30, 40))
    d.arc([cx - 8, 60, cx + 8, 72], 20, 160, fill=(120, 40, 40), width=2)
    return img


def _abstract(rng: random.Random, label: str) -> Image.Image:
    img = _to_image(_gradient(_colour(rng), _colour(rng)))
    d = ImageDraw.Draw(img)
    if rng.random() < 0.4:
        step, col = rng.randint(6, 14), _colour(rng)
        for x in range(-HEIGHT, WIDTH, step):
            d.line([(x, 0), (x + HEIGHT, HEIGHT)], fill=col, width=2)
    for _ in range(rng.randint(4, 10)):
        col = _colour(rng, 40)
        x0, y0 = rng.randint(-20, WIDTH), rng.randint(-20, HEIGHT)
        x1, y1 = x0 + rng.randint(15, 70), y0 + rng.randint(15, 60)
        shape = rng.choice(("rect", "ellipse", "triangle", "line"))
        if shape == "rect":
            d.rectangle([x0, y0, x1, y1], fill=col)
        elif shape == "ellipse":
            d.ellipse([x0, y0, x1, y1], fill=col)
        elif shape == "triangle":
            d.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=col)
        else:
            d.line([(x0, y0), (x1, y1)], fill=col, width=rng.randint(2, 6))
    return img


def _poster(rng: random.Random, label: str) -> Image.Image:
    img = _to_image(_gradient(_colour(rng), _colour(rng)))
    d = ImageDraw.Draw(img)
    for _ in range(rng.randint(2, 5)):
        r, col = rng.randint(10, 40), _colour(rng)
        x, y = rng.randint(0, WIDTH), rng.randint(0, HEIGHT)
        d.ellipse([x - r, y - r, x + r, y + r], outline=col, width=rng.randint(2, 5))
    d.rectangle([0, HEIGHT - 34, WIDTH, HEIGHT], fill=_colour(rng, 10))
    words = label.split()
    d.text((6, HEIGHT - 30), " ".join(words[:2])[:18], fill=(250, 250, 250), font=_font(14))
    d.text((6, HEIGHT - 15), " ".join(words[2:])[:22], fill=(250, 250, 240), font=_font(11))
    return img


def _specimen(rng: random.Random, label: str) -> Image.Image:
    tint = [rng.randint(150, 255) for _ in range(3)]
    img = _to_image(_gradient(tuple(tint), tuple(int(c * rng.uniform(0.6, 1.0)) for c in tint)))
    d = ImageDraw.Draw(img)
    cx, cy = WIDTH // 2 + rng.randint(-25, 25), HEIGHT // 2 + rng.randint(-12, 12)
    body = (rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255))
    pts = []
    n = rng.randint(9, 16)
    rx, ry = rng.randint(32, 62), rng.randint(20, 42)
    for i in range(n):
        a = math.tau * i / n
        k = rng.uniform(0.7, 1.3)
        pts.append((cx + k * rx * math.cos(a), cy + k * ry * math.sin(a)))
    d.polygon(pts, fill=body, outline=(40, 30, 20))
    spot = _colour(rng, 20)
    for _ in range(rng.randint(3, 12)):
        x = cx + rng.randint(-rx // 2, rx // 2)
        y = cy + rng.randint(-ry // 2, ry // 2)
        r = rng.randint(2, 6)
        d.ellipse([x - r, y - r, x + r, y + r], fill=spot)
    for _ in range(rng.randint(2, 6)):  # legs, antennae or leaves
        a = rng.uniform(0, math.tau)
        tip = (cx + 1.6 * rx * math.cos(a), cy + 1.6 * ry * math.sin(a))
        d.line([(cx, cy), tip], fill=(40, 30, 20), width=2)
    d.text((6, HEIGHT - 14), label[:26], fill=(60, 50, 40), font=_font(10))
    return img


def _ship(rng: random.Random, label: str) -> Image.Image:
    arr = _sky(rng)
    sea_top = rng.randint(70, 85)
    sea = (30, 80 + rng.randint(0, 40), 130 + rng.randint(0, 50))
    arr[sea_top:] = _gradient(sea, (10, 40, 80))[sea_top:]
    img = _to_image(arr)
    d = ImageDraw.Draw(img)
    hull = _colour(rng, 20)
    x0 = rng.randint(15, 45)
    x1 = x0 + rng.randint(80, 105)
    top, bottom = sea_top - 12, sea_top + 6
    d.polygon([(x0, top), (x1, top), (x1 - 12, bottom), (x0 + 8, bottom)], fill=hull)
    d.rectangle([x0 + 20, sea_top - 26, x1 - 30, sea_top - 12], fill=(235, 235, 230))
    for i in range(rng.randint(1, 3)):
        fx = x0 + 30 + 14 * i
        d.rectangle([fx, sea_top - 40, fx + 7, sea_top - 26], fill=_colour(rng, 10))
    if rng.random() < 0.4:
        d.line([(x0 + 10, sea_top - 12), (x0 + 10, sea_top - 55)], fill=(60, 40, 20), width=2)
        sail = [(x0 + 11, sea_top - 52), (x0 + 35, sea_top - 18), (x0 + 11, sea_top - 18)]
        d.polygon(sail, fill=(245, 240, 225))
    for _ in range(rng.randint(3, 8)):
        wx, wy = rng.randint(0, WIDTH), rng.randint(sea_top + 8, HEIGHT - 2)
        d.arc([wx, wy, wx + 12, wy + 5], 200, 340, fill=(200, 220, 240))
    return img


DRAWERS = {
    "flag": _flag, "text": _text_card, "emblem": _emblem, "mountain": _mountain, "river": _river,
    "lake": _lake, "skyline": _skyline, "facade": _facade, "portrait": _portrait,
    "abstract": _abstract, "poster": _poster, "specimen": _specimen, "ship": _ship,
}


def draw_image(style: str, key: str, label: str = "") -> Image.Image:
    """The picture of one entity. Rich styles get a light film grain; simple ones stay flat."""
    rng = key_rng(key)
    img = DRAWERS[style](rng, label)
    if style not in SIMPLE_STYLES:
        img = _add_noise(img, key, 4.0)
    return img


def lookalike(img: Image.Image, key: str) -> Image.Image:
    """A near copy of ``img``: a few patches repainted, a tint, a shape added."""
    rng = key_rng(key + ":lookalike")
    out = img.copy()
    d = ImageDraw.Draw(out)
    for _ in range(rng.randint(1, 3)):
        w, h = rng.randint(14, 40), rng.randint(10, 30)
        x, y = rng.randint(0, WIDTH - w), rng.randint(0, HEIGHT - h)
        if rng.random() < 0.5:
            d.rectangle([x, y, x + w, y + h], fill=_colour(rng))
        else:
            d.ellipse([x, y, x + w, y + h], fill=_colour(rng))
    arr = np.asarray(out, np.float32)
    tint = np.asarray([rng.uniform(0.85, 1.15) for _ in range(3)], np.float32)
    return _to_image(arr * tint)


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


# -- the question-image perturbation ---------------------------------------------------

def perturb(img: Image.Image, seed: int | str) -> Image.Image:
    """Crop (keep 85-97% of each side), resize (x0.8-1.6), mild colour shift; no encoding."""
    rng = random.Random(f"vsearcher-perturb:{seed}")
    img = img.convert("RGB")
    w, h = img.size
    keep_w, keep_h = rng.uniform(0.85, 0.97), rng.uniform(0.85, 0.97)
    cw, ch = max(8, int(w * keep_w)), max(8, int(h * keep_h))
    x0, y0 = rng.randint(0, w - cw), rng.randint(0, h - ch)
    img = img.crop((x0, y0, x0 + cw, y0 + ch))
    scale = rng.uniform(0.8, 1.6)
    img = img.resize((max(16, int(cw * scale)), max(12, int(ch * scale))), Image.BICUBIC)
    img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.9, 1.1))
    img = ImageEnhance.Contrast(img).enhance(rng.uniform(0.9, 1.1))
    img = ImageEnhance.Color(img).enhance(rng.uniform(0.85, 1.15))
    return img


def perturb_image(src_path: str | Path, dst_path: str | Path, seed: int | str = 0,
                  quality: int | None = None) -> Path:
    """Write the perturbed JPEG copy of ``src_path`` (seeded; quality 70-90 unless given)."""
    src_path, dst_path = Path(src_path), Path(dst_path)
    if not src_path.is_file():
        raise FileNotFoundError(f"{src_path}: image not found")
    with Image.open(src_path) as im:
        img = perturb(im, seed)
    if quality is None:
        quality = random.Random(f"vsearcher-perturb-quality:{seed}").randint(70, 90)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return atomic_write_bytes(dst_path, buf.getvalue())


# -- features for near-duplicate search -------------------------------------------------

LAYOUT_SIZES = ((12, 9), (8, 6))
HIST_BINS = 6
FEATURE_DIM = sum(w * h * 3 for w, h in LAYOUT_SIZES) + HIST_BINS ** 3 + 3
# Weights in the cosine similarity, chosen on perturbed queries of a 10k-entity world: the colour
# layouts separate pictures, the histogram and mean colour separate flat cards of one layout.
W_LAYOUTS, W_HIST, W_MEAN = (1.0, 0.7), 0.7, 0.5


def _unit(v: np.ndarray) -> np.ndarray:
    return v / (np.linalg.norm(v) + 1e-6)


def image_features(img: Image.Image) -> np.ndarray:
    """An L2-normalised float32 vector for cosine near-duplicate search: mean-centred colour
    thumbnails (coarse enough that a 85% crop moves content by about one cell), a colour
    histogram and the mean colour (damped: a grey picture has no meaningful hue)."""
    img = img.convert("RGB")
    parts = []
    for size, weight in zip(LAYOUT_SIZES, W_LAYOUTS):
        thumb = np.asarray(img.resize(size, Image.BOX), np.float32) / 255.0
        parts.append(weight * _unit((thumb - thumb.mean(axis=(0, 1), keepdims=True)).ravel()))
    pixels = np.asarray(img.resize((40, 30), Image.BOX), np.int32)
    small = np.minimum(pixels * HIST_BINS // 256, HIST_BINS - 1)
    idx = (small[..., 0] * HIST_BINS + small[..., 1]) * HIST_BINS + small[..., 2]
    hist = np.bincount(idx.ravel(), minlength=HIST_BINS ** 3).astype(np.float32)
    parts.append(W_HIST * _unit(np.sqrt(hist / hist.sum())))
    mean = np.asarray(img.resize((8, 6), Image.BOX), np.float32).mean(axis=(0, 1)) / 255.0 - 0.5
    parts.append(W_MEAN * mean / (np.linalg.norm(mean) + 0.3))
    vec = np.concatenate(parts).astype(np.float32)
    return vec / (np.linalg.norm(vec) + 1e-9)


def image_complexity(img: Image.Image) -> dict:
    """How busy a picture is, for the image-too-simple filter of synthesis."""
    arr = np.asarray(img.convert("RGB").resize((WIDTH, HEIGHT)), np.int32)
    quant = (arr // 16).reshape(-1, 3)
    codes = (quant[:, 0] * 16 + quant[:, 1]) * 16 + quant[:, 2]
    counts = np.bincount(codes)
    p = counts[counts > 0] / codes.size
    gray = arr.mean(axis=2)
    edges = sum((np.abs(np.diff(gray, axis=axis)) > 24).mean() for axis in (0, 1))
    return {
        "colours": int((counts > 0).sum()),
        "entropy": float(-(p * np.log2(p)).sum()),
        "edge_density": float(edges / 2),
    }

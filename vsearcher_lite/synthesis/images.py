"""Fetching a live entity's picture, so that image injection perturbs a local, checked copy."""

from __future__ import annotations

import io
from pathlib import Path

MAX_IMAGE_BYTES = 20_000_000


class ImageDownloadError(ValueError):
    """The URL did not give a readable image; the message names the URL."""


def download_image(url: str, dst: str | Path, *, client=None) -> Path:
    """Download ``url`` to ``dst`` (atomic), after checking that the bytes decode as an image."""
    from PIL import Image, UnidentifiedImageError

    from vsearcher_lite.net.http import HttpClient, HttpError

    client = client or HttpClient("images", timeout=30.0, max_retries=3)
    try:
        response = client.get(url, max_bytes=MAX_IMAGE_BYTES)
    except HttpError as exc:
        raise ImageDownloadError(f"{url}: download failed ({exc})") from None
    data = response.content
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except (UnidentifiedImageError, OSError) as exc:
        raise ImageDownloadError(f"{url}: not an image ({type(exc).__name__})") from None
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(dst)
    return dst

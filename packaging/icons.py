"""Render the app's icon files from ``resources/icons/barnraise.svg``.

    .venv/bin/python packaging/icons.py          # rewrite the files in resources/icons/
    .venv/bin/python packaging/icons.py --check  # exit 1 if a file is missing or has the wrong size

Writes ``barnraise-<size>.png`` for every size in ``PNG_SIZES`` (the freedesktop hicolor sizes up
to 512), ``barnraise.ico`` (Windows: the executable, the installer, the Start menu) and
``barnraise.icns`` (macOS: the ``.app``). The SVG is rendered with Qt's ``QSvgRenderer`` (PySide6 is
already a dependency); the ICO and ICNS containers are written here: both are a small header and a
table of PNG images, so no imaging library is needed. Run it after changing the SVG and commit what
it writes.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ICONS = ROOT / "resources" / "icons"
SVG = ICONS / "barnraise.svg"
NAME = "barnraise"

PNG_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
"""The PNGs kept in the repository: the hicolor theme's sizes (the tray asks for 16-24)."""
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
"""Windows asks for 16-48 in lists and menus and 256 for large views; 256 is the ICO format's limit."""
ICNS_TYPES = {
    "icp4": 16,
    "icp5": 32,
    "icp6": 64,
    "ic07": 128,
    "ic08": 256,
    "ic09": 512,
    "ic10": 1024,  # 512 at 2x
    "ic11": 32,  # 16 at 2x
    "ic12": 64,  # 32 at 2x
    "ic13": 256,  # 128 at 2x
    "ic14": 512,  # 256 at 2x
}
"""ICNS element types whose payload is a PNG, and the pixel size each holds."""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_path(size: int, folder: Path = ICONS) -> Path:
    return folder / f"{NAME}-{size}.png"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header (its first chunk is always IHDR)."""
    if not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def dib_bytes(width: int, height: int, bgra: bytes) -> bytes:
    """An icon image as a 32-bit device-independent bitmap, the form every Windows reads.

    ``bgra`` holds the rows top to bottom, 4 bytes a pixel (blue, green, red, alpha, as Qt's
    ``Format_ARGB32`` lays them out in memory). In an icon the header's height counts the colour
    rows and the 1-bit mask's rows (so it is doubled), the rows run bottom to top, and the mask is
    all zeros: the alpha channel says what shows.
    """
    row = width * 4
    if len(bgra) != row * height:
        raise ValueError(f"{len(bgra)} bytes are not {width}x{height} BGRA pixels")
    header = struct.pack("<IiiHHIIiiII", 40, width, height * 2, 1, 32, 0, 0, 0, 0, 0, 0)
    rows = b"".join(bgra[y * row : (y + 1) * row] for y in reversed(range(height)))
    mask_row = ((width + 31) // 32) * 4
    return header + rows + bytes(mask_row * height)


def image_size(data: bytes) -> tuple[int, int]:
    """Width and height of an icon image, a PNG or a DIB written by ``dib_bytes``."""
    if data.startswith(PNG_SIGNATURE):
        return png_size(data)
    size, width, doubled = struct.unpack("<Iii", data[:12])
    if size != 40:
        raise ValueError("neither a PNG nor a bitmap")
    return width, doubled // 2


def ico_bytes(images: Iterable[bytes]) -> bytes:
    """An ICO holding the images (each a DIB from ``dib_bytes`` or a PNG).

    Layout: ICONDIR (reserved 0, type 1, count), one 16-byte ICONDIRENTRY per image (width and
    height as a byte, 0 meaning 256; colour count, reserved, planes, bits per pixel, data size,
    data offset), then the images. Windows reads PNG images since Vista, and everywhere only at
    256 pixels; the smaller ones are bitmaps, as Windows' own icons are.
    """
    images = list(images)
    header = struct.pack("<HHH", 0, 1, len(images))
    offset = len(header) + 16 * len(images)
    entries = b""
    for data in images:
        width, height = image_size(data)
        if width > 256 or height > 256:
            raise ValueError(f"an ICO image is at most 256 pixels, not {width}x{height}")
        entries += struct.pack(
            "<BBBBHHII", width % 256, height % 256, 0, 0, 1, 32, len(data), offset
        )
        offset += len(data)
    return header + entries + b"".join(images)


def read_ico(data: bytes) -> list[tuple[int, int, bytes]]:
    """(width, height, image) of every image in an ICO written by ``ico_bytes``."""
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    if reserved != 0 or kind != 1:
        raise ValueError("not an icon file")
    images = []
    for index in range(count):
        width, height, _, _, _, _, length, offset = struct.unpack(
            "<BBBBHHII", data[6 + 16 * index : 22 + 16 * index]
        )
        images.append((width or 256, height or 256, data[offset : offset + length]))
    return images


def icns_bytes(elements: Mapping[str, bytes]) -> bytes:
    """An ICNS: the magic ``icns`` and the file's length, then (type, length, data) elements."""
    body = b"".join(
        kind.encode("ascii") + struct.pack(">I", 8 + len(data)) + data
        for kind, data in elements.items()
    )
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def read_icns(data: bytes) -> dict[str, bytes]:
    if data[:4] != b"icns" or struct.unpack(">I", data[4:8])[0] != len(data):
        raise ValueError("not an icns file")
    elements: dict[str, bytes] = {}
    at = 8
    while at < len(data):
        kind = data[at : at + 4].decode("ascii")
        (length,) = struct.unpack(">I", data[at + 4 : at + 8])
        elements[kind] = data[at + 8 : at + length]
        at += length
    return elements


def render(svg: Path, sizes: Iterable[int]) -> dict[int, tuple[bytes, bytes]]:
    """The SVG at each size as (PNG, top-down BGRA pixels), drawn by Qt offscreen."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt  # noqa: PLC0415
    from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: PLC0415
    from PySide6.QtSvg import QSvgRenderer  # noqa: PLC0415

    _app = QGuiApplication.instance() or QGuiApplication([])
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not an SVG Qt can draw")
    out: dict[int, tuple[bytes, bytes]] = {}
    for size in sorted(set(sizes)):
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        array = QByteArray()
        buffer = QBuffer(array)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        if not image.save(buffer, "PNG"):
            raise OSError(f"Qt could not encode a {size} px PNG")
        buffer.close()
        pixels = bytes(image.constBits())[: size * size * 4]  # rows are never padded at 4 B/px
        out[size] = (bytes(array.data()), pixels)
    return out


def write_all(svg: Path = SVG, folder: Path = ICONS) -> list[Path]:
    rendered = render(svg, {*PNG_SIZES, *ICO_SIZES, *ICNS_TYPES.values()})
    png = {size: data for size, (data, _) in rendered.items()}
    written = []
    for size in PNG_SIZES:
        path = png_path(size, folder)
        path.write_bytes(png[size])
        written.append(path)
    ico = folder / f"{NAME}.ico"
    ico.write_bytes(
        ico_bytes(
            png[size] if size >= 256 else dib_bytes(size, size, rendered[size][1])
            for size in ICO_SIZES
        )
    )
    icns = folder / f"{NAME}.icns"
    icns.write_bytes(icns_bytes({kind: png[size] for kind, size in ICNS_TYPES.items()}))
    return [*written, ico, icns]


def problems(folder: Path = ICONS) -> list[str]:
    """What is missing or wrong among the icon files (empty when they are all there)."""
    found: list[str] = []
    if not (folder / f"{NAME}.svg").is_file():
        found.append(f"{NAME}.svg is missing")
    for size in PNG_SIZES:
        path = png_path(size, folder)
        if not path.is_file():
            found.append(f"{path.name} is missing")
        elif png_size(path.read_bytes()) != (size, size):
            found.append(f"{path.name} is not {size}x{size}")
    ico = folder / f"{NAME}.ico"
    if not ico.is_file():
        found.append(f"{ico.name} is missing")
    else:
        sizes = [(w, h) for w, h, data in read_ico(ico.read_bytes()) if image_size(data) == (w, h)]
        if sorted(sizes) != [(s, s) for s in sorted(ICO_SIZES)]:
            found.append(f"{ico.name} holds {sizes}, not {list(ICO_SIZES)}")
    icns = folder / f"{NAME}.icns"
    if not icns.is_file():
        found.append(f"{icns.name} is missing")
    else:
        elements = read_icns(icns.read_bytes())
        for kind, size in ICNS_TYPES.items():
            if kind not in elements or png_size(elements[kind]) != (size, size):
                found.append(f"{icns.name} lacks a {size} px {kind}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the files")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        for line in found:
            print(f"icons: {line}", file=sys.stderr)
        return 1 if found else 0
    for path in write_all():
        print(f"{path.relative_to(ROOT)}  {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

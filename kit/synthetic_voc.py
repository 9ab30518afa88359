"""A small synthetic stand-in of PASCAL VOC2012 in the real archive's format (host side, Pillow).

VOCtrainval_11-May-2012.tar, uncompressed as the publisher's, with VOCdevkit/VOC2012/Annotations/<id>.xml in
VOC's XML schema (folder, filename, source, size, segmented, object/name/pose/truncated/difficult/bndbox),
JPEGImages/<id>.jpg and ImageSets/Main/train.txt and val.txt, so the trial's real reader
(kit.workloads.voc) and mAP code run on hosts without the data. Each image is a textured background with one
to three objects of four VOC classes, each class a shape and colour of its own (so a detector can learn
them); some small objects are marked difficult, some at the border truncated. Deterministic from the seed
(fixed tar headers; Pillow's JPEG encoder at fixed quality). It is never the real data: the registry calls the
source ``synthetic`` and the reports say so.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np

TAR_NAME = "VOCtrainval_11-May-2012.tar"
_ROOT = "VOCdevkit/VOC2012"
_SEED = 20240607
# class -> (shape, RGB): four of VOC's classes, each drawn its own way
_LOOK = {"aeroplane": ("rectangle", (220, 40, 40)), "car": ("ellipse", (40, 70, 230)),
         "dog": ("triangle", (40, 200, 60)), "person": ("stripes", (240, 220, 30))}


def _draw(rng: np.random.Generator, width: int, height: int) -> tuple[bytes, list[tuple[str, int, int, int, int, int,
                                                                                         int]]]:
    """One JPEG and its objects (class, xmin, ymin, xmax, ymax, difficult, truncated) in VOC's 1-based pixels."""
    from PIL import Image, ImageDraw

    base = rng.integers(60, 160, size=3)
    noise = rng.normal(0, 18, size=(height, width, 3))
    img = Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    objects = []
    for _ in range(int(rng.integers(1, 4))):
        name = str(rng.choice(list(_LOOK)))
        shape, colour = _LOOK[name]
        small = rng.random() < 0.15
        bw = int(rng.integers(8, 14)) if small else int(rng.integers(width // 4, width // 2))
        bh = int(rng.integers(8, 14)) if small else int(rng.integers(height // 4, height // 2))
        x0 = int(rng.integers(0, width - bw + 1))
        y0 = int(rng.integers(0, height - bh + 1))
        x1, y1 = x0 + bw - 1, y0 + bh - 1  # inclusive 0-based corners
        tint = tuple(int(np.clip(c + rng.integers(-25, 26), 0, 255)) for c in colour)
        if shape == "rectangle":
            draw.rectangle((x0, y0, x1, y1), fill=tint)
        elif shape == "ellipse":
            draw.ellipse((x0, y0, x1, y1), fill=tint)
        elif shape == "triangle":
            draw.polygon(((x0, y1), ((x0 + x1) // 2, y0), (x1, y1)), fill=tint)
        else:
            for k, yy in enumerate(range(y0, y1 + 1, 3)):
                draw.line((x0, yy, x1, yy), fill=tint if k % 2 == 0 else (30, 30, 30), width=2)
        truncated = int(x0 == 0 or y0 == 0 or x1 == width - 1 or y1 == height - 1)
        objects.append((name, x0 + 1, y0 + 1, x1 + 1, y1 + 1, int(small), truncated))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue(), objects


def annotation_xml(image_id: str, width: int, height: int,
                   objects: list[tuple[str, int, int, int, int, int, int]]) -> bytes:
    """An annotation in VOC2012's schema and layout (tab-indented, as the publisher's files)."""
    objs = "".join(
        f"\t<object>\n\t\t<name>{name}</name>\n\t\t<pose>Unspecified</pose>\n\t\t<truncated>{trunc}</truncated>\n"
        f"\t\t<occluded>0</occluded>\n\t\t<bndbox>\n\t\t\t<xmin>{x1}</xmin>\n\t\t\t<ymin>{y1}</ymin>\n"
        f"\t\t\t<xmax>{x2}</xmax>\n\t\t\t<ymax>{y2}</ymax>\n\t\t</bndbox>\n\t\t<difficult>{diff}</difficult>\n"
        "\t</object>\n"
        for name, x1, y1, x2, y2, diff, trunc in objects)
    return (f"<annotation>\n\t<folder>VOC2012</folder>\n\t<filename>{image_id}.jpg</filename>\n\t<source>\n"
            "\t\t<database>SYNTHETIC stand-in written by kit.synthetic_voc</database>\n"
            "\t\t<annotation>PASCAL VOC2012 format</annotation>\n\t\t<image>synthetic</image>\n\t</source>\n"
            f"\t<size>\n\t\t<width>{width}</width>\n\t\t<height>{height}</height>\n\t\t<depth>3</depth>\n"
            f"\t</size>\n\t<segmented>0</segmented>\n{objs}</annotation>\n").encode()


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    """An uncompressed ustar archive with fixed timestamps and owners, directories first, as the real one."""
    with tarfile.open(path, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        dirs: set[str] = set()
        for name, data in members:
            parts = name.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_336_694_400
                    tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_336_694_400
            tar.addfile(info, io.BytesIO(data))


def voc_members(n_train: int, n_test: int, seed: int = _SEED) -> list[tuple[str, bytes]]:
    """The archive's members (name, bytes): images of 96-128 px a side, ids in VOC's YYYY_NNNNNN form."""
    rng = np.random.default_rng([seed, 2012])
    ids = [f"2012_{i + 1:06d}" for i in range(n_train + n_test)]
    annotations, images = [], []
    for image_id in ids:
        w, h = int(rng.integers(96, 129)), int(rng.integers(96, 129))
        jpeg, objects = _draw(rng, w, h)
        annotations.append((f"{_ROOT}/Annotations/{image_id}.xml", annotation_xml(image_id, w, h, objects)))
        images.append((f"{_ROOT}/JPEGImages/{image_id}.jpg", jpeg))
    lists = [(f"{_ROOT}/ImageSets/Main/train.txt", "".join(f"{i}\n" for i in ids[:n_train]).encode()),
             (f"{_ROOT}/ImageSets/Main/val.txt", "".join(f"{i}\n" for i in ids[n_train:]).encode())]
    return [*annotations, *lists, *images]


def write_voc2012(directory: Path, n_train: int = 32, n_test: int = 16, seed: int = _SEED) -> list[str]:
    """VOCtrainval_11-May-2012.tar with ``n_train`` images in train.txt and ``n_test`` in val.txt."""
    write_tar(directory / TAR_NAME, voc_members(n_train, n_test, seed))
    return [TAR_NAME]

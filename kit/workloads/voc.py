"""PASCAL VOC2012 detection data read straight from VOCtrainval_11-May-2012.tar (stdlib + numpy; inside the image).

The archive is never extracted: its members are indexed once (headers only) and the few the trial needs are
read from it. Everything in it is treated as hostile: the tar may hold links, absolute or ``..`` paths,
duplicate names, huge members or millions of entries; an annotation may carry a DOCTYPE/ENTITY bomb (also
hidden in UTF-16 or a declared encoding), a class that is not VOC's, boxes outside the image or a size its JPEG
does not have; a JPEG may be truncated or declare a huge frame to make the decoder allocate it (its header is
read before decoding). Each is refused with a :class:`WorkloadError` that names the member, never skipped.

JPEGs are decoded by a function the caller passes in (the framework's own decoder: torchvision.io in the
PyTorch image, tf.io in the TensorFlow one, since Pillow is in neither image's lock), all before any timed
phase. Images stay uint8 in host memory (the full train+val split is about 6.4 GB); each framework scales a
batch to float32 [0, 1] inside its timed step, the same numpy code in both.

Boxes: VOC's 1-based inclusive pixel corners (xmin, ymin, xmax, ymax) become continuous corners
(xmin - 1, ymin - 1, xmax, ymax), the convention of torchvision's detection models, so a box's area is its
pixel count and the IoU of the mAP (kit.workloads.voc_map) needs no "+1".
"""

from __future__ import annotations

import re
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from kit.workloads.common import WorkloadError

TAR_NAME = "VOCtrainval_11-May-2012.tar"
ROOT = "VOCdevkit/VOC2012"
CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
           "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")
LABEL_OF = {name: i + 1 for i, name in enumerate(CLASSES)}  # 0 is the background, as in torchvision

# Caps, each well above the real archive's largest (17,125 images; ~40,300 members; annotations of a few KB;
# JPEGs of at most 500 x 500 px and well under 1 MB; train.txt 69 KB; at most a few dozen objects per image).
MAX_MEMBERS = 100_000
MAX_XML_BYTES = 64 * 1024
MAX_JPEG_BYTES = 8 * 1024 * 1024
MAX_LIST_BYTES = 2 * 1024 * 1024
MAX_SIDE_PX = 4096
MAX_OBJECTS = 500
_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_FORBIDDEN_XML = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"^(?:\xef\xbb\xbf)?\s*<\?xml[^>]*?encoding\s*=\s*['\"]([^'\"]*)['\"]", re.IGNORECASE)

Decoder = Callable[[bytes], np.ndarray]  # JPEG bytes -> (H, W, 3) uint8


@dataclass(frozen=True)
class VocImage:
    """One annotated image: uint8 pixels (H, W, 3), continuous boxes (N, 4), labels 1..20, difficult flags."""

    image_id: str
    pixels: np.ndarray
    boxes: np.ndarray  # float32 (N, 4): x1, y1, x2, y2 in pixels
    labels: np.ndarray  # int64 (N,)
    difficult: np.ndarray  # bool (N,)


@dataclass(frozen=True)
class VocSplits:
    """The trial's training and test images, in the order of ImageSets/Main/train.txt and val.txt."""

    train: tuple[VocImage, ...]
    test: tuple[VocImage, ...]


def _check_name(name: str, archive: Path) -> str:
    """The member's path, or WorkloadError for an absolute path or a ``..`` component."""
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith(("/", "\\")) or ".." in p.parts or "\\" in name or "\0" in name:
        raise WorkloadError(f"{archive}: member {name!r} has an absolute or '..' path (refused: the archive is "
                            "not the publisher's)")
    return str(p)


def index_tar(tar: tarfile.TarFile, archive: Path) -> dict[str, tarfile.TarInfo]:
    """Every regular file of the archive by name; refuses links, devices, duplicates, bad paths, too many members."""
    files: dict[str, tarfile.TarInfo] = {}
    count = 0
    while True:
        try:
            info = tar.next()
        except tarfile.TarError as exc:
            raise WorkloadError(f"{archive}: not a readable tar archive ({exc})") from exc
        if info is None:
            return files
        count += 1
        if count > MAX_MEMBERS:
            raise WorkloadError(f"{archive}: more than {MAX_MEMBERS} members (the real archive has about 40,300)")
        name = _check_name(info.name, archive)
        if info.issym() or info.islnk():
            raise WorkloadError(f"{archive}: member {name!r} is a link to {info.linkname!r} (refused: links are "
                                "never followed, and the real archive has none)")
        if info.isdir():
            continue
        if not info.isfile():
            raise WorkloadError(f"{archive}: member {name!r} is not a regular file (type {info.type!r})")
        if name in files:
            raise WorkloadError(f"{archive}: member {name!r} appears twice (refused: which copy is meant?)")
        files[name] = info


def _read(tar: tarfile.TarFile, files: dict[str, tarfile.TarInfo], name: str, cap: int, archive: Path) -> bytes:
    info = files.get(name)
    if info is None:
        raise WorkloadError(f"{archive}: member {name!r} is missing")
    if info.size > cap:
        raise WorkloadError(f"{archive}: member {name!r} has {info.size} bytes, over the cap of {cap}")
    fh = tar.extractfile(info)
    if fh is None:
        raise WorkloadError(f"{archive}: member {name!r} cannot be read")
    data = fh.read(cap + 1)
    if len(data) != info.size:
        raise WorkloadError(f"{archive}: member {name!r} is truncated ({len(data)} of {info.size} bytes)")
    return data


def read_ids(data: bytes, where: str) -> list[str]:
    """An ImageSets list: one image id a line, each safe as a file name, no duplicates."""
    try:
        lines = data.decode("ascii").split()
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{where}: not ASCII ({exc})") from exc
    ids: list[str] = []
    for x in lines:
        if not _ID.match(x):
            raise WorkloadError(f"{where}: image id {x[:80]!r} is not letters, digits and '_'")
        ids.append(x)
    if len(set(ids)) != len(ids):
        raise WorkloadError(f"{where}: an image id is listed twice")
    if not ids:
        raise WorkloadError(f"{where}: lists no image")
    return ids


def _int(el: ET.Element, tag: str, where: str) -> int:
    v = _float(el, tag, where)
    if v != int(v):
        raise WorkloadError(f"{where}: <{tag}> {v} is not a whole number")
    return int(v)


def _float(el: ET.Element, tag: str, where: str) -> float:
    node = el.find(tag)
    if node is None or node.text is None:
        raise WorkloadError(f"{where}: <{tag}> missing")
    try:
        v = float(node.text.strip())
    except ValueError as exc:
        raise WorkloadError(f"{where}: <{tag}> {node.text.strip()[:40]!r} is not a number") from exc
    if not np.isfinite(v):
        raise WorkloadError(f"{where}: <{tag}> is not finite")
    return v


@dataclass(frozen=True)
class Annotation:
    """One parsed annotation file: image size and its objects (VOC's own 1-based inclusive corners)."""

    filename: str
    width: int
    height: int
    boxes: np.ndarray  # float32 (N, 4) continuous corners
    labels: np.ndarray
    difficult: np.ndarray


def parse_annotation(data: bytes, where: str) -> Annotation:
    """A VOC annotation XML, refused before parsing if it declares a DOCTYPE or ENTITY, validated after."""
    if len(data) > MAX_XML_BYTES:
        raise WorkloadError(f"{where}: {len(data)} bytes, over the cap of {MAX_XML_BYTES} for an annotation")
    # The DOCTYPE check must see the text the parser will see: expat also reads UTF-16 (detected from NUL bytes)
    # and, through Python's codecs, any single-byte encoding a declaration names (EBCDIC...), in which the
    # keyword's bytes differ. VOC's annotations are ASCII: UTF-8 only, no NUL, no other declared encoding.
    enc = _XML_ENCODING.match(data)
    if enc and enc.group(1).lower() not in (b"utf-8", b"utf8", b"us-ascii", b"ascii"):
        name = enc.group(1)[:40].decode("ascii", "replace")
        raise WorkloadError(f"{where}: declares encoding {name!r} (refused: UTF-8 or ASCII only)")
    if b"\0" in data:
        raise WorkloadError(f"{where}: holds NUL bytes (refused: not a UTF-8 text; UTF-16 would hide a DOCTYPE)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{where}: not UTF-8 ({exc})") from exc
    if _FORBIDDEN_XML.search(text):
        raise WorkloadError(f"{where}: declares a DOCTYPE or ENTITY (refused before parsing: entity expansion)")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise WorkloadError(f"{where}: not well-formed XML ({exc})") from exc
    if root.tag != "annotation":
        raise WorkloadError(f"{where}: root element <{root.tag}>, expected <annotation>")
    fn = root.find("filename")
    size = root.find("size")
    if fn is None or not fn.text or size is None:
        raise WorkloadError(f"{where}: <filename> or <size> missing")
    w, h = _int(size, "width", where), _int(size, "height", where)
    if not (1 <= w <= MAX_SIDE_PX and 1 <= h <= MAX_SIDE_PX):
        raise WorkloadError(f"{where}: image size {w} x {h} outside 1..{MAX_SIDE_PX} px")
    if size.find("depth") is not None and _int(size, "depth", where) != 3:
        raise WorkloadError(f"{where}: depth {_int(size, 'depth', where)}, expected 3 (RGB)")
    objs = root.findall("object")
    if len(objs) > MAX_OBJECTS:
        raise WorkloadError(f"{where}: {len(objs)} objects, over the cap of {MAX_OBJECTS}")
    boxes, labels, diff = [], [], []
    for i, obj in enumerate(objs):
        ow = f"{where} object {i + 1}"
        name_el = obj.find("name")
        name = (name_el.text or "").strip() if name_el is not None else ""
        if name not in LABEL_OF:
            raise WorkloadError(f"{ow}: class {name[:40]!r} is not one of VOC's 20 classes")
        d = _int(obj, "difficult", ow) if obj.find("difficult") is not None else 0
        if d not in (0, 1):
            raise WorkloadError(f"{ow}: <difficult> {d}, expected 0 or 1")
        bb = obj.find("bndbox")
        if bb is None:
            raise WorkloadError(f"{ow}: <bndbox> missing")
        x1, y1, x2, y2 = (_float(bb, t, ow) for t in ("xmin", "ymin", "xmax", "ymax"))
        if not (1 <= x1 < x2 <= w and 1 <= y1 < y2 <= h):
            raise WorkloadError(f"{ow}: box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) is not inside the {w} x {h} image "
                                "with 1 <= min < max <= size")
        boxes.append((x1 - 1, y1 - 1, x2, y2))
        labels.append(LABEL_OF[name])
        diff.append(bool(d))
    return Annotation(fn.text.strip(), w, h, np.asarray(boxes, np.float32).reshape(-1, 4),
                      np.asarray(labels, np.int64), np.asarray(diff, bool))


def check_jpeg(data: bytes, where: str) -> None:
    """A JPEG starts with SOI and ends with EOI (trailing zero padding allowed): a cut file is refused.

    Decoders differ on truncated files (libjpeg pads them with grey and only warns), so the check is ours.
    """
    if not data.startswith(b"\xff\xd8\xff"):
        raise WorkloadError(f"{where}: not a JPEG (no start-of-image marker)")
    if not data.rstrip(b"\0").endswith(b"\xff\xd9"):
        raise WorkloadError(f"{where}: truncated JPEG (no end-of-image marker)")


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def jpeg_size(data: bytes, where: str) -> tuple[int, int]:
    """(height, width) from the JPEG's frame header, read before decoding (a few bytes can declare 65535 x 65535
    pixels: the decoder would allocate them all)."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise WorkloadError(f"{where}: malformed JPEG (no marker at byte {i})")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if marker in _SOF:
            if length < 8 or i + 9 > len(data):
                raise WorkloadError(f"{where}: malformed JPEG frame header")
            return int.from_bytes(data[i + 5:i + 7], "big"), int.from_bytes(data[i + 7:i + 9], "big")
        if marker == 0xDA or length < 2:  # start of scan before any frame header
            break
        i += 2 + length
    raise WorkloadError(f"{where}: malformed JPEG (no frame header before the image data)")


def _image(tar: tarfile.TarFile, files: dict[str, tarfile.TarInfo], image_id: str, decode: Decoder,
           archive: Path) -> VocImage:
    xml_name = f"{ROOT}/Annotations/{image_id}.xml"
    ann = parse_annotation(_read(tar, files, xml_name, MAX_XML_BYTES, archive), f"{archive}:{xml_name}")
    jpg_name = f"{ROOT}/JPEGImages/{image_id}.jpg"
    where = f"{archive}:{jpg_name}"
    if ann.filename != f"{image_id}.jpg":
        raise WorkloadError(f"{archive}:{xml_name}: <filename> {ann.filename[:80]!r}, expected {image_id}.jpg")
    data = _read(tar, files, jpg_name, MAX_JPEG_BYTES, archive)
    check_jpeg(data, where)
    if jpeg_size(data, where) != (ann.height, ann.width):
        h, w = jpeg_size(data, where)
        raise WorkloadError(f"{where}: the JPEG's header says {w} x {h} px, its annotation {ann.width} x {ann.height} "
                            "(refused before decoding)")
    try:
        px = decode(data)
    except Exception as exc:  # the framework's decoder: any failure is the file's
        raise WorkloadError(f"{where}: the JPEG cannot be decoded ({type(exc).__name__}: {str(exc)[:200]})") from exc
    px = np.asarray(px)
    if px.dtype != np.uint8 or px.ndim != 3 or px.shape[2] != 3:
        raise WorkloadError(f"{where}: decoded to {px.dtype} {px.shape}, expected (H, W, 3) uint8")
    if px.shape[:2] != (ann.height, ann.width):
        raise WorkloadError(f"{where}: the JPEG is {px.shape[1]} x {px.shape[0]} px, its annotation says "
                            f"{ann.width} x {ann.height}")
    return VocImage(image_id, px, ann.boxes, ann.labels, ann.difficult)


def load_voc(data_dir: Path, decode: Decoder, train_size: int | None = None,
             test_size: int | None = None) -> VocSplits:
    """The paper's split (train.txt for training, val.txt for testing), optionally the first N of each list."""
    archive = data_dir / TAR_NAME
    if archive.is_symlink() or not archive.is_file():
        raise WorkloadError(f"{archive}: missing or not a regular file")
    try:
        tar = tarfile.open(archive, "r:")
    except (tarfile.TarError, OSError) as exc:
        raise WorkloadError(f"{archive}: not a readable tar archive ({exc})") from exc
    with tar:
        files = index_tar(tar, archive)
        lists = {}
        for split in ("train", "val"):
            name = f"{ROOT}/ImageSets/Main/{split}.txt"
            lists[split] = read_ids(_read(tar, files, name, MAX_LIST_BYTES, archive), f"{archive}:{name}")
        if set(lists["train"]) & set(lists["val"]):
            raise WorkloadError(f"{archive}: train.txt and val.txt share images")
        picked = {}
        for split, n in (("train", train_size), ("val", test_size)):
            ids = lists[split]
            if n is not None:
                if not 1 <= int(n) <= len(ids):
                    raise WorkloadError(f"{archive}: {n} {split} images asked, {split}.txt lists {len(ids)}")
                ids = ids[: int(n)]
            picked[split] = tuple(_image(tar, files, i, decode, archive) for i in ids)
    return VocSplits(picked["train"], picked["val"])


def batch_inputs(images: list[VocImage]) -> list[np.ndarray]:
    """A batch's images as float32 (H, W, 3) in [0, 1]: the same numpy code in both frameworks' timed steps."""
    return [im.pixels.astype(np.float32) * np.float32(1.0 / 255.0) for im in images]


def train_targets(im: VocImage) -> tuple[np.ndarray, np.ndarray]:
    """The boxes and labels a model trains on: difficult objects left out (py-faster-rcnn's use_diff = False)."""
    keep = ~im.difficult
    return im.boxes[keep], im.labels[keep]

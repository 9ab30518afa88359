"""PASCAL VOC2012: the registry entry, the synthetic stand-in, the tar/XML/JPEG reader and its defences.

Every defence of kit.workloads.voc is proven by the attack it stops, on an archive crafted here in the real
layout (kit.synthetic_voc's writer with one member changed). JPEGs are decoded with Pillow on the host (the
reader takes any decoder; the framework arms pass their own, tested in test_detect_workloads.py).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from kit import synthetic_voc
from kit.dataset_registry import VOC2012
from kit.datasets import DATASETS, resolve
from kit.workloads import voc
from kit.workloads.common import WorkloadError

ROOT = "VOCdevkit/VOC2012"


def pil_decode(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def members(n_train: int = 4, n_test: int = 2) -> list[tuple[str, bytes]]:
    return synthetic_voc.voc_members(n_train, n_test)


def write(tmp_path: Path, ms: list[tuple[str, bytes]]) -> Path:
    synthetic_voc.write_tar(tmp_path / voc.TAR_NAME, ms)
    return tmp_path


def replace(ms: list[tuple[str, bytes]], name: str, data: bytes) -> list[tuple[str, bytes]]:
    assert any(n == name for n, _ in ms)
    return [(n, data if n == name else d) for n, d in ms]


def refused(tmp_path: Path, match: str) -> None:
    with pytest.raises(WorkloadError, match=match):
        voc.load_voc(tmp_path, pil_decode)


def test_registry_entry_two_independent_sha256_sources_and_the_papers_split() -> None:
    assert DATASETS["voc2012"] is VOC2012
    f = VOC2012.file("VOCtrainval_11-May-2012.tar")
    assert f.sha256 == "e14f763270cf193d0b5f74b169f44157a4b0c6efa708f4dd0ff78ee691763bcb" and f.size == 1999639040
    src = Path(__file__).resolve().parents[1] / "kit" / "dataset_registry.py"
    entry = src.read_text()[src.read_text().index("VOC2012 = DatasetInfo("):]
    assert "TFDS url_checksums/voc.txt" in entry and "torchvision/prototype/datasets/_builtin/voc.py" in entry
    assert VOC2012.full_sizes["trainval"] == (5717, 5823)  # DLBench Sec. 4.3
    assert set(VOC2012.sources) == {"trainval", "synthetic"}


def test_synthetic_stand_in_resolves_and_reads_in_the_real_layout(tmp_path: Path) -> None:
    res = resolve("voc2012", "synthetic")
    assert res.files.keys() == {voc.TAR_NAME} and "NOT the real dataset" in res.origin
    data = voc.load_voc(res.directory, pil_decode)
    assert (len(data.train), len(data.test)) == VOC2012.full_sizes["synthetic"]
    with tarfile.open(res.directory / voc.TAR_NAME) as tar:  # uncompressed, as the publisher's
        names = tar.getnames()
    assert f"{ROOT}/ImageSets/Main/train.txt" in names and f"{ROOT}/Annotations/2012_000001.xml" in names
    for im in (*data.train, *data.test):
        h, w, c = im.pixels.shape
        assert c == 3 and 96 <= h <= 128 and 96 <= w <= 128 and im.pixels.dtype == np.uint8
        assert len(im.boxes) == len(im.labels) == len(im.difficult) >= 1
        assert np.all(im.boxes[:, 0] >= 0) and np.all(im.boxes[:, 2] <= w) and np.all(im.boxes[:, 3] <= h)
        assert np.all(im.boxes[:, :2] < im.boxes[:, 2:])
        assert set(im.labels.tolist()) <= {voc.LABEL_OF[c] for c in ("aeroplane", "car", "dog", "person")}
    assert any(im.difficult.any() for im in data.train)  # difficult objects exist and are kept
    # deterministic: the same bytes again
    again = tmp_path / "again"
    again.mkdir()
    synthetic_voc.write_voc2012(again, *VOC2012.full_sizes["synthetic"])
    assert (again / voc.TAR_NAME).read_bytes() == (res.directory / voc.TAR_NAME).read_bytes()


def test_splits_subsets_and_box_convention(tmp_path: Path) -> None:
    ms = members()
    xml = ("<annotation><filename>2012_000001.jpg</filename><size><width>{w}</width><height>{h}</height>"
           "<depth>3</depth></size><object><name>dog</name><difficult>1</difficult><bndbox><xmin>1</xmin>"
           "<ymin>2</ymin><xmax>10</xmax><ymax>20</ymax></bndbox></object></annotation>")
    img = pil_decode(dict(ms)[f"{ROOT}/JPEGImages/2012_000001.jpg"])
    ms = replace(ms, f"{ROOT}/Annotations/2012_000001.xml", xml.format(w=img.shape[1], h=img.shape[0]).encode())
    data = voc.load_voc(write(tmp_path, ms), pil_decode, train_size=3, test_size=1)
    assert [im.image_id for im in data.train] == ["2012_000001", "2012_000002", "2012_000003"]
    assert [im.image_id for im in data.test] == ["2012_000005"]
    first = data.train[0]
    # VOC's 1-based inclusive corners -> continuous: (xmin - 1, ymin - 1, xmax, ymax); 10 x 19 pixels
    np.testing.assert_array_equal(first.boxes, [[0, 1, 10, 20]])
    assert first.labels.tolist() == [voc.LABEL_OF["dog"]] == [12] and first.difficult.tolist() == [True]
    boxes, labels = voc.train_targets(first)  # difficult objects are not trained on
    assert boxes.shape == (0, 4) and labels.shape == (0,)
    with pytest.raises(WorkloadError, match=r"5 train images asked, train\.txt lists 4"):
        voc.load_voc(tmp_path, pil_decode, train_size=5)


def test_billion_laughs_annotation_refused_before_parsing(tmp_path: Path) -> None:
    bomb = (b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
            + b"".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'.encode()
                       for i in range(1, 10))
            + b"]>\n<annotation><filename>&lol9;</filename></annotation>")
    refused(write(tmp_path, replace(members(), f"{ROOT}/Annotations/2012_000002.xml", bomb)), "DOCTYPE or ENTITY")


@pytest.mark.parametrize(("data", "match"), [
    # UTF-16 (no BOM): expat detects it from the NUL bytes and would expand the entity ("&x;" -> "hello")
    ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE a [<!ENTITY x "hello">]><annotation>'
     "<filename>&x;</filename></annotation>".encode("utf-16-le"), "encoding|NUL"),
    ('<!DOCTYPE a [<!ENTITY x "hello">]><annotation><filename>&x;</filename></annotation>'.encode("utf-16"), "NUL"),
    (b'<?xml version="1.0" encoding="cp037"?>' + "<!DOCTYPE a><annotation/>".encode("cp037"), "encoding 'cp037'"),
    (b'<?xml version="1.0" encoding="latin-1"?><annotation>\xe9</annotation>', "encoding 'latin-1'"),
    (b"<annotation>\xff\xfe</annotation>", "not UTF-8"),
])
def test_entity_declarations_hidden_by_an_encoding_refused(tmp_path: Path, data: bytes, match: str) -> None:
    refused(write(tmp_path, replace(members(), f"{ROOT}/Annotations/2012_000002.xml", data)), match)


def test_symlink_member_refused(tmp_path: Path) -> None:
    write(tmp_path, members())
    with tarfile.open(tmp_path / voc.TAR_NAME, "a") as tar:
        link = tarfile.TarInfo(f"{ROOT}/JPEGImages/evil.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    refused(tmp_path, "is a link to '/etc/passwd'")


@pytest.mark.parametrize("name", ["../../escape.xml", "/etc/cron.d/x", f"{ROOT}/../../../x.jpg"])
def test_path_traversal_member_refused(tmp_path: Path, name: str) -> None:
    ms = members()
    write(tmp_path, ms)
    with tarfile.open(tmp_path / voc.TAR_NAME, "a") as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    refused(tmp_path, "absolute or '..' path")


def test_duplicate_member_and_too_many_members_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ms = members()
    refused(write(tmp_path, [*ms, ms[0]]), "appears twice")
    write(tmp_path, ms)
    monkeypatch.setattr(voc, "MAX_MEMBERS", 10)
    refused(tmp_path, "more than 10 members")


def test_oversized_member_refused_unread(tmp_path: Path) -> None:
    big = b"<annotation>" + b" " * voc.MAX_XML_BYTES + b"</annotation>"
    refused(write(tmp_path, replace(members(), f"{ROOT}/Annotations/2012_000001.xml", big)), "over the cap")


def _xml(**kw: str) -> bytes:
    v = {"name": "car", "xmin": "5", "ymin": "5", "xmax": "20", "ymax": "20", "difficult": "0", **kw}
    return (f"<annotation><filename>2012_000001.jpg</filename><size><width>{{w}}</width><height>{{h}}</height>"
            f"<depth>3</depth></size><object><name>{v['name']}</name><difficult>{v['difficult']}</difficult>"
            f"<bndbox><xmin>{v['xmin']}</xmin><ymin>{v['ymin']}</ymin><xmax>{v['xmax']}</xmax>"
            f"<ymax>{v['ymax']}</ymax></bndbox></object></annotation>").encode()


@pytest.mark.parametrize(("fields", "match"), [
    ({"xmax": "4000"}, "is not inside the"),          # outside the image
    ({"xmin": "0"}, "is not inside the"),             # VOC's corners start at 1
    ({"xmin": "30", "xmax": "20"}, "is not inside the"),  # empty box
    ({"name": "unicorn"}, "not one of VOC's 20 classes"),
    ({"difficult": "2"}, "expected 0 or 1"),
    ({"ymin": "nan"}, "not finite"),
    ({"ymin": "ten"}, "is not a number"),
])
def test_bad_annotation_refused(tmp_path: Path, fields: dict[str, str], match: str) -> None:
    ms = members()
    img = pil_decode(dict(ms)[f"{ROOT}/JPEGImages/2012_000001.jpg"])
    xml = _xml(**fields).replace(b"{w}", str(img.shape[1]).encode()).replace(b"{h}", str(img.shape[0]).encode())
    refused(write(tmp_path, replace(ms, f"{ROOT}/Annotations/2012_000001.xml", xml)), match)


def test_size_that_disagrees_with_the_jpeg_refused(tmp_path: Path) -> None:
    xml = _xml().replace(b"{w}", b"200").replace(b"{h}", b"150")
    refused(write(tmp_path, replace(members(), f"{ROOT}/Annotations/2012_000001.xml", xml)),
            "header says 128 x 98 px, its annotation 200 x 150")
    # a decoder that disagrees with the header it was given is caught after decoding too
    with pytest.raises(WorkloadError, match=r"the JPEG is \d+ x 50 px, its annotation says"):
        voc.load_voc(write(tmp_path, members()), lambda data: pil_decode(data)[:50])


def test_truncated_and_fake_jpeg_refused(tmp_path: Path) -> None:
    ms = members()
    name = f"{ROOT}/JPEGImages/2012_000003.jpg"
    refused(write(tmp_path, replace(ms, name, dict(ms)[name][:-300])), "truncated JPEG")
    refused(write(tmp_path, replace(ms, name, b"GIF89a" + b"\0" * 100)), "not a JPEG")
    refused(write(tmp_path, replace(ms, name, b"\xff\xd8\xff" + b"\x13" * 200 + b"\xff\xd9")), "malformed JPEG")
    # whatever the framework's decoder raises becomes a WorkloadError naming the member

    def broken(data: bytes) -> np.ndarray:
        raise RuntimeError("Unsupported marker type 0x13")

    with pytest.raises(WorkloadError, match=r"2012_000001\.jpg: the JPEG cannot be decoded \(RuntimeError"):
        voc.load_voc(write(tmp_path, ms), broken)


def test_decompression_bomb_refused_before_decoding(tmp_path: Path) -> None:
    ms = members()
    name = f"{ROOT}/JPEGImages/2012_000003.jpg"
    jpeg = bytearray(dict(ms)[name])
    h, w = voc.jpeg_size(bytes(jpeg), "x")
    assert (h, w) == pil_decode(bytes(jpeg)).shape[:2]
    at = bytes(jpeg).index(b"\xff\xc0")  # baseline frame header: FF C0, length, precision, height, width
    jpeg[at + 5:at + 9] = (65000).to_bytes(2, "big") * 2
    calls: list[int] = []

    def decode(data: bytes) -> np.ndarray:
        calls.append(1)
        return pil_decode(data)

    write(tmp_path, replace(ms, name, bytes(jpeg)))
    with pytest.raises(WorkloadError, match=r"header says 65000 x 65000 px.*refused before decoding"):
        voc.load_voc(tmp_path, decode)
    assert len(calls) == 2  # the two images before it; never the bomb


def test_bad_image_lists_refused(tmp_path: Path) -> None:
    ms = members()
    lst = f"{ROOT}/ImageSets/Main/train.txt"
    refused(write(tmp_path, replace(ms, lst, b"2012_000001\n../../etc/passwd\n")), "is not letters, digits")
    refused(write(tmp_path, replace(ms, lst, b"2012_000001\n2012_000001\n")), "listed twice")
    refused(write(tmp_path, replace(ms, lst, b"2012_000001\n2012_000005\n")), "share images")
    refused(write(tmp_path, [m for m in ms if m[0] != lst]), "train.txt' is missing")


def test_archive_itself_a_link_or_not_a_tar_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    write(real, members())
    link = tmp_path / "link"
    link.mkdir()
    (link / voc.TAR_NAME).symlink_to(real / voc.TAR_NAME)
    refused(link, "missing or not a regular file")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / voc.TAR_NAME).write_bytes(b"\x00garbage" * 200)
    refused(junk, "not a readable tar archive|is missing")

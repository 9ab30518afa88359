"""What one trial of the Germino or DLBench workload trains, on which data (numpy only).

``load_task`` turns a trial request into a :class:`Task`: the arrays (read by
:mod:`kit.workloads.formats` / ``load_mnist`` from the verified dataset
directory), the network table or text network, and the per-epoch data order
both frameworks use. The framework modules (``train_torch``,
``train_keras``) only build, train and time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kit.workloads import formats, nets
from kit.workloads.common import WorkloadError, load_mnist
from kit.workloads.device import DatasetRequest


@dataclass
class Task:
    """Data and model of one trial."""

    kind: str  # "image" | "knn" | "imdb" | "ptb"
    x_tr: np.ndarray
    y_tr: np.ndarray
    x_te: np.ndarray
    y_te: np.ndarray
    len_tr: np.ndarray | None = None  # IMDB: true review lengths
    len_te: np.ndarray | None = None
    table: tuple[nets.Layer, ...] | None = None
    input_shape: tuple[int, ...] = ()
    text: nets.TextNet | None = None
    classes: int = 10

    @property
    def units_per_example(self) -> int:
        """Throughput unit per example: images, reviews, or PTB tokens (a window of seq_len)."""
        return int(self.x_tr.shape[1]) if self.kind == "ptb" else 1

    @property
    def unit(self) -> str:
        return {"ptb": "tokens", "imdb": "reviews"}.get(self.kind, "images")


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled order of epoch ``epoch``; both frameworks of one block use it."""
    return np.random.default_rng([seed, 1, epoch]).permutation(n)


def _mnist(data_dir: Path, ds: DatasetRequest) -> tuple[np.ndarray, ...]:
    x_tr, y_tr, x_te, y_te = load_mnist(data_dir, ds["source"], ds.get("train_size"), ds.get("test_size"))
    return x_tr[..., None], y_tr, x_te[..., None], y_te


def load_task(req: dict[str, Any], data_dir: Path) -> Task:
    """The trial's task from its request (workload ``germino`` or ``dlbench``)."""
    wl = req["workload"]
    ds: DatasetRequest = req["dataset"] or DatasetRequest()
    name, dname = wl["name"], ds.get("name")
    if name == "germino":
        if dname != "mnist":
            raise WorkloadError(f"germino runs on MNIST, not {dname!r}")
        x_tr, y_tr, x_te, y_te = _mnist(data_dir, ds)
        model = str(wl["model"])
        if model == "knn":
            return Task("knn", x_tr, y_tr, x_te, y_te, input_shape=(28, 28, 1))
        if model not in nets.GERMINO_NETS:
            raise WorkloadError(f"unknown germino model {model!r} (knn, {', '.join(nets.GERMINO_NETS)})")
        return Task("image", x_tr, y_tr, x_te, y_te, table=nets.GERMINO_NETS[model], input_shape=(28, 28, 1))
    if name != "dlbench":
        raise WorkloadError(f"workload {name!r} is not served by this module")
    src, n_tr, n_te = ds.get("source"), ds.get("train_size"), ds.get("test_size")
    if dname == "mnist":
        x_tr, y_tr, x_te, y_te = _mnist(data_dir, ds)
    elif dname in ("cifar10", "cifar100"):
        x_tr, y_tr, x_te, y_te = formats.load_cifar(data_dir, dname, n_tr, n_te)
    elif dname == "svhn":
        x_tr, y_tr, x_te, y_te = formats.load_svhn(data_dir, str(src), n_tr, n_te)
    elif dname == "imdb":
        vocab = int(wl["imdb_vocab"])
        x_tr, l_tr, y_tr, x_te, l_te, y_te = formats.load_imdb(data_dir, n_tr, n_te, vocab, int(wl["imdb_seq_len"]))
        return Task("imdb", x_tr, y_tr, x_te, y_te, len_tr=l_tr, len_te=l_te, text=nets.imdb_net(vocab), classes=2)
    elif dname == "ptb":
        x_tr, y_tr, x_te, y_te, vocab = formats.load_ptb(data_dir, n_tr, n_te, int(wl["ptb_seq_len"]),
                                                         int(wl["ptb_stride"]))
        return Task("ptb", x_tr, y_tr, x_te, y_te, text=nets.ptb_net(vocab), classes=vocab)
    else:
        raise WorkloadError(f"dlbench has no model for dataset {dname!r}")
    table = nets.DLBENCH_CNNS[dname]
    return Task("image", x_tr, y_tr, x_te, y_te, table=table, input_shape=nets.INPUT_SHAPES[dname],
                classes=100 if dname == "cifar100" else 10)


def steps_per_epoch(wl: dict[str, Any], n: int) -> int:
    """Full batches per epoch: the spec's steps_per_epoch, capped by the data (None: every full batch)."""
    bs = int(wl["batch_size"])
    full = n // bs
    if full < 1:
        raise WorkloadError(f"{n} training examples are fewer than one batch of {bs}")
    want = wl.get("steps_per_epoch")
    return full if want is None else min(int(want), full)


def knn_run(task: Task, k: int, markers: Any) -> dict[str, Any]:
    """The scikit-learn k-NN baseline of Germino et al.: fit (timed as training), predict (timed as inference)."""
    try:
        from sklearn.neighbors import KNeighborsClassifier
    except ImportError as exc:
        raise WorkloadError("scikit-learn is not installed in this environment (the k-NN baseline needs it); "
                            "add scikit-learn to the image or run with --backend local") from exc
    import sklearn

    x_tr = task.x_tr.reshape(len(task.x_tr), -1)
    x_te = task.x_te.reshape(len(task.x_te), -1)
    clf = KNeighborsClassifier(n_neighbors=k)
    markers.start("train")
    clf.fit(x_tr, task.y_tr)
    train_s = markers.end("train", images=len(x_tr))
    markers.start("infer")
    pred = clf.predict(x_te)
    infer_s = markers.end("infer", images=len(x_te))
    return {
        "train_time_s": train_s,
        "infer_time_s": infer_s,
        "test_accuracy": float((pred == task.y_te).mean()),
        "train_images": len(x_tr),
        "test_images": len(x_te),
        "train_throughput_ips": len(x_tr) / train_s if train_s > 0 else None,
        "infer_throughput_ips": len(x_te) / infer_s if infer_s > 0 else None,
        "model": "knn",
        "knn_k": k,
        "sklearn_version": sklearn.__version__,
        "knn_algorithm": str(clf._fit_method),
    }


def trial_results(task: Task, per_epoch: int, epochs: int, train_phase_s: float, eval_s: float, infer_s: float,
             epoch_s: list[float], epoch_loss: list[float], epoch_acc: list[float | None], final: float,
             params: int, each: bool) -> dict[str, Any]:
    """The results of one trained trial; both framework builds report through here, so the keys agree."""
    train_s = train_phase_s - eval_s
    units = task.units_per_example
    out: dict[str, Any] = {
        "train_time_s": train_s,
        "infer_time_s": infer_s,
        "train_loss": epoch_loss[-1],
        "test_accuracy": final,
        "train_images": per_epoch * epochs * units,
        "test_images": len(task.x_te) * units,
        "throughput_unit": task.unit,
        "train_throughput_ips": per_epoch * epochs * units / train_s,
        "infer_throughput_ips": len(task.x_te) * units / infer_s,
        "param_count": params,
        "epochs": epochs,
        "train_examples_per_epoch": per_epoch,
        "epoch_train_s": epoch_s,
        "epoch_train_loss": epoch_loss,
        "train_phase_s": train_phase_s,
    }
    if each:
        out["epoch_test_accuracy"] = epoch_acc
        out["eval_between_epochs_s"] = eval_s
    return out

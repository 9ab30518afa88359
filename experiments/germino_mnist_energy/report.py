"""Report sections of Germino et al. (seed 002): Tables I–VI and Figs. 2–8, from finished analysis only."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from kit.analysis_record import Analysis
from kit.report.figures import arm_color, finish_lines, to_svg
from kit.study_api import Figure, RunView, Section, Table

from .analysis import Bound, EnergyRow, GerminoExtras, PerRun, PerRunKey, Summary

FIG_SIZE = (6.4, 3.2)
NET = {"cpu_energy_j": "cpu_energy_net_j", "gpu_energy_j": "gpu_energy_net_j"}

STUDY_API = 3  # sections(run, analysis) -> list[Section] (kit.study_api)


def _pm(d: Summary | None, digits: int = 4) -> str:
    if not d or not d.get("n"):
        return "–"
    sd = d.get("sd")
    if sd is not None and sd == sd and abs(sd) <= 1e-9 * max(abs(d["mean"]), 1.0):
        sd = 0.0  # identical runs: float noise of the mean's summation is not a spread
    sd_txt = "–" if sd is None or sd != sd else f"{sd:.{digits}g}"
    return f"{d['mean']:.{digits}g} ± {sd_txt} (n={d['n']})"


def _bound(b: Bound | None) -> str:
    """Median ± bound over the runs, with the largest when it differs."""
    if not b:
        return "–"
    larger = f" (largest {b['max']:.3g})" if b["max"] > 1.5 * b["median"] else ""
    return f"± {b['median']:.3g}{larger}"


def grouped_box(per_run: list[PerRun], models: list[str], labels: dict[str, str], arms: list[str],
                key: PerRunKey, ylabel: str, title: str) -> str:
    """Box plots per model, one box per framework side by side, every run drawn on top (Figs. 2, 3)."""
    fig, ax = plt.subplots(figsize=FIG_SIZE)
    width = 0.8 / max(len(arms), 1)
    for j, arm in enumerate(arms):
        data, pos = [], []
        for i, m in enumerate(models):
            vals = [v for r in per_run if r["model"] == m and r["arm"] == arm and (v := r[key]) is not None]
            if vals:
                data.append(vals)
                pos.append(i + (j - (len(arms) - 1) / 2) * width)
        if not data:
            continue
        bp = ax.boxplot(data, positions=pos, widths=width * 0.9, patch_artist=True, showfliers=True)
        for patch in bp["boxes"]:
            patch.set_facecolor(arm_color(arm, j))
            patch.set_alpha(0.4)
        for p, d in zip(pos, data, strict=True):
            ax.scatter([p] * len(d), d, s=7, color=arm_color(arm, j), zorder=3)
        ax.plot([], [], "s", color=arm_color(arm, j), alpha=0.6, label=arm)
    ax.set_xticks(range(len(models)), [labels.get(m, m) for m in models], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return to_svg(fig)


def per_run_plot(per_run: list[PerRun], models: list[str], labels: dict[str, str], arms: list[str],
                 key: PerRunKey, ylabel: str, title: str, log: bool = False) -> str:
    """The value of every run, by repetition, one line per model and framework (Figs. 4–8)."""
    fig, ax = plt.subplots(figsize=FIG_SIZE)
    styles = {"knn": ":", "mlp": "-", "cnn": "--"}
    for j, arm in enumerate(arms):
        for m in models:
            pts = sorted((r["repetition"] + 1, v) for r in per_run
                         if r["model"] == m and r["arm"] == arm and (v := r[key]) is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(m, "-"), marker="o", ms=3, lw=1,
                        color=arm_color(arm, j), label=f"{arm} · {labels.get(m, m)}")
    if log:
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return finish_lines(fig, ax, "run", ylabel, title, 10)


def _energy_cells(r: EnergyRow) -> list[str]:
    """Table VI's cells of one row: per counter (CPU, GPU) gross ± sd, its sampling bound, net of idle."""
    return [_pm(r["cpu_energy_j"]), _bound(r["cpu_energy_j_bound"]), _pm(r["cpu_energy_net_j"]),
            _pm(r["gpu_energy_j"]), _bound(r["gpu_energy_j_bound"]), _pm(r["gpu_energy_net_j"])]


def sections(run: RunView, analysis: Analysis) -> list[Section]:
    raw = analysis.extras.get("germino")
    if not isinstance(raw, dict) or not raw:
        return []
    g = GerminoExtras.from_json(raw)  # the study's record (analysis.py), read back from analysis.json
    models, labels, arms, runs = g.models, g.model_labels, g.arms, g.per_run
    devices = ", ".join(g.devices) or "?"
    out: list[Section] = []

    time_rows = [[labels[r["model"]], r["arm"], _pm(r)] for r in g.time_train]
    q_rows = [[labels[r["model"]], r["arm"], r.get("q1"), r.get("median"), r.get("q3"), r.get("n", 0)]
              for r in g.time_train]
    ratio_txt = "; ".join(
        f"{labels[r['model']]}: mean {r['arm_a']}/{r['arm_b']} = {r['mean_ratio']:.3g} (medians {r['median_ratio']:.3g})"
        + (" — A/A control: identical scikit-learn code in both environments" if r["aa_control"] else "")
        for r in g.ratios)
    out.append(Section(id="germino-time",
                       title="Germino et al.: training time per model (Tables I–IV, Figs. 2–6)",
                       paragraphs=[
            f"Training time only: the timed region holds the training loop (all epochs) and nothing else; data "
            f"loading, model construction and a short untimed warm-up come before it. Device(s): {devices}. "
            "The paper reports one host per table column (CPU, GPU, M1); this run is one host.",
            "The k-NN baseline is scikit-learn (no framework). It runs as one case inside each framework arm's "
            "trial environment, so its two rows are the same code twice: their difference measures the "
            "environment (an A/A control), and either row is the paper's framework-independent baseline.",
            f"Ratios of the training times: {ratio_txt or 'not available'}.",
        ],
                       tables=[
            Table(caption="Training time (s), mean ± sd (Tables I and III)",
                  columns=["model", "framework", "time (s)"],
                  rows=time_rows),
            Table(caption="Training time quartiles (s) (Tables II and IV; numpy linear quantiles, R type 7)",
                  columns=["model", "framework", "Q1", "median", "Q3", "n"],
                  rows=q_rows),
        ],
                       figures=[
            Figure(id="germino-box-time",
                   title="Training time per model and framework (box: quartiles, whiskers 1.5 IQR)",
                   svg=grouped_box(runs, models, labels, arms, "train_time_s", "training time (s)",
                                "training time per model")),
            Figure(id="germino-runs-time",
                   title="Training time of every run (log scale)",
                   svg=per_run_plot(runs, models, labels, arms, "train_time_s", "training time (s)",
                                 "training time per run", log=True)),
        ]))

    acc_rows = [[labels[r["model"]], r["arm"], _pm(r, 5)] for r in g.accuracy_pct]
    knn = g.knn_accuracy_identical
    out.append(Section(id="germino-accuracy",
                       title="Germino et al.: test accuracy per model (Table V, Fig. 8)",
                       paragraphs=[
            "Test accuracy of every run on the held-out test set, in percent. "
            + ("" if knn is None else ("The k-NN accuracy is the same in every run, as the paper found (k-NN is "
                                       "deterministic)." if knn else "The k-NN accuracy varies between runs."))],
                       tables=[Table(caption="Test accuracy (%), mean ± sd (Table V)",
                         columns=["model", "framework", "accuracy (%)"],
                         rows=acc_rows)],
                       figures=[Figure(id="germino-runs-accuracy",
                           title="Test accuracy of every run (Fig. 8)",
                           svg=per_run_plot(runs, models, labels, arms, "accuracy", "test accuracy (fraction)",
                                         "accuracy per run"))]))

    e_rows = [[labels[r["model"]], r["arm"], *_energy_cells(r)] for r in g.energy_train]
    paras = ["Energy of the training phase of each run, in joules: the CPU package counters (RAPL, all packages) and "
             "the GPU's own energy counter (NVML, Volta and newer; integrated power on older GPUs), each "
             "interpolated at the phase's start and end and differenced (see docs/telemetry.md).",
             "Gross is that difference: the idle draw of the package or GPU and every other process's work are in "
             "it, as in the paper's RAPL figures. Net of idle subtracts the idle power of the run's baseline "
             "(recorded before the trials) × the training time, so a framework that merely trains longer is not "
             "charged the idle draw; other processes' load stays in it. '± bound' is the median (over the runs) "
             "of a worst-case bound, not a standard error: the energy of the sampling interval around each end of "
             "the phase (power there × sampling period), which the interpolation can put on the wrong side."]
    if any(g.energy_measured.get(k) for k in ("cpu_energy_j", "gpu_energy_j")) and not any(
            g.energy_measured.get(NET[k]) for k in ("cpu_energy_j", "gpu_energy_j")):
        paras.append("No net-of-idle energy: the run recorded no idle baseline of these counters "
                     "(telemetry.baseline_s = 0, or the counters were not sampled at baseline).")
    figs = []
    counters: tuple[tuple[PerRunKey, PerRunKey, str, str], ...] = (
        ("cpu_energy_j", "cpu_energy_net_j", "rapl", "CPU (RAPL)"), ("gpu_energy_j", "gpu_energy_net_j", "nvml", "GPU (NVML)"))
    for key, net, src, label in counters:
        if g.energy_measured.get(key):
            figs.append(Figure(id=f"germino-runs-{key}",
                               title=f"{label} energy of every run, gross (Fig. 7)",
                               svg=per_run_plot(runs, models, labels, arms, key, "energy (J)",
                                             f"{label} energy per run (gross)")))
            if g.energy_measured.get(net):
                figs.append(Figure(id=f"germino-runs-{net}",
                                   title=f"{label} energy of every run, net of idle",
                                   svg=per_run_plot(runs, models, labels, arms, net, "energy (J)",
                                                 f"{label} energy per run (net of idle)")))
        else:
            s = g.sensors.get(src)
            detail, fix = (s["detail"], s["fix"]) if s else (None, None)
            paras.append(f"{label} energy could not be measured on this host: {detail or 'no readings'}"
                         + (f" (fix: {fix})" if fix else "") + ". Its column shows –.")
    out.append(Section(id="germino-energy",
                       title="Germino et al.: energy per model (Table VI, Fig. 7)",
                       paragraphs=paras,
                       tables=[Table(caption="Training energy (J), mean ± sd (Table VI): gross, its sampling bound, and net of "
                               "idle",
                         columns=["model", "framework", "CPU energy, gross (J)", "CPU ± bound (J)",
                                "CPU energy, net of idle (J)", "GPU energy, gross (J)", "GPU ± bound (J)",
                                "GPU energy, net of idle (J)"],
                         rows=e_rows)],
                       figures=figs))
    return out

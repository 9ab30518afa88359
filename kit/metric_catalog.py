"""The catalogue of metrics (dependent variables): name, unit, direction and where each value comes from.

Pure data, below both the spec (which checks a hypothesis names a known metric) and the analysis (which
derives the values, kit.analysis.metrics): the spec used to import the analysis layer for the names alone,
which closed an import circle through the plan, the validity rules and the telemetry code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricDef:
    """One dependent variable: its unit, direction and where its value comes from."""

    name: str
    label: str
    unit: str
    kind: str  # result | telemetry | energy | phase_power | marker (from the trial's own phase markers, exact)
    lower_is_better: bool | None = None
    result_keys: tuple[tuple[str, str], ...] = ()  # (phase, key in results)
    source: str = ""
    metric: str = ""
    device: str | None = None  # None: mean over every device of that source
    agg: str = "mean"  # mean | max | sum (of the devices' phase means: power of several GPUs adds up)
    domain_prefix: str = ""  # energy: domains starting with this
    net_of_idle: bool = False  # energy: less the run's idle-baseline power x the phase duration (kit.analysis.energy)

    def result_key(self, phase: str) -> str | None:
        return dict(self.result_keys).get(phase)


METRICS: dict[str, MetricDef] = {m.name: m for m in (
    MetricDef("time_s", "execution time", "s", "result", True,
              (("train", "train_time_s"), ("infer", "infer_time_s"))),
    MetricDef("throughput_ips", "throughput", "images/s", "result", False,
              (("train", "train_throughput_ips"), ("infer", "infer_throughput_ips"))),
    MetricDef("accuracy", "test accuracy", "fraction", "result", False, (("infer", "test_accuracy"),)),
    MetricDef("train_loss", "training loss (last epoch mean)", "1", "result", True, (("train", "train_loss"),)),
    # Two CPU utilisations, never to be confused: the host's (every process; 100 % = all logical CPUs busy;
    # sampled, so a phase shorter than the sampling period mostly shows other activity) and the trial's own
    # (its process and the children it waited for, from the CPU times in its phase markers: exact at any
    # phase length; 100 % = one CPU busy for the whole phase, four busy threads 400 %).
    MetricDef("cpu_util_pct", "CPU utilisation, host-wide (all processes; % of all CPUs)", "%", "telemetry", None,
              source="cpu", metric="util_pct", device="total"),
    MetricDef("trial_cpu_util_pct", "CPU utilisation of the trial's process (% of one CPU)", "%", "marker", None),
    MetricDef("cpu_temp_c", "CPU temperature", "°C", "telemetry", None, source="hwmon", metric="cpu_temp_c", device="cpu"),
    MetricDef("gpu_util_pct", "GPU utilisation", "%", "telemetry", None, source="nvml", metric="gpu_util_pct"),
    MetricDef("gpu_temp_c", "GPU temperature", "°C", "telemetry", None, source="nvml", metric="temp_c"),
    MetricDef("gpu_power_w", "GPU power (NVML 1-s moving average)", "W", "telemetry", True, source="nvml",
              metric="power_w", agg="sum"),
    MetricDef("gpu_power_phase_w", "GPU power (energy counter / phase duration)", "W", "phase_power", True,
              domain_prefix="gpu"),
    MetricDef("gpu_power_instant_w", "GPU power (instantaneous, NVML_FI_DEV_POWER_INSTANT)", "W", "telemetry", True,
              source="nvml", metric="power_instant_w", agg="sum"),
    MetricDef("gpu_mem_used_bytes", "GPU memory used (peak)", "B", "telemetry", True, source="nvml",
              metric="mem_used_bytes", agg="max"),
    MetricDef("host_mem_used_bytes", "host memory used (peak)", "B", "telemetry", True, source="memory",
              metric="used_bytes", device="host", agg="max"),
    MetricDef("trial_rss_bytes", "trial resident memory (peak)", "B", "telemetry", True, source="memory",
              metric="rss_bytes", device="trial", agg="max"),
    MetricDef("trial_rss_mean_bytes", "trial resident memory (mean)", "B", "telemetry", True, source="memory",
              metric="rss_bytes", device="trial", agg="mean"),
    # Energy: gross (the counters' difference over the phase: idle power and other processes included) and
    # net of idle (less the idle baseline's power x the phase duration; other processes' load stays in it).
    MetricDef("gpu_energy_j", "GPU energy (gross)", "J", "energy", True, domain_prefix="gpu"),
    MetricDef("cpu_energy_j", "CPU package energy (RAPL, gross)", "J", "energy", True, domain_prefix="rapl:package"),
    MetricDef("dram_energy_j", "DRAM energy (RAPL, gross)", "J", "energy", True, domain_prefix="rapl:dram"),
    MetricDef("gpu_energy_net_j", "GPU energy, net of idle", "J", "energy", True, domain_prefix="gpu",
              net_of_idle=True),
    MetricDef("cpu_energy_net_j", "CPU package energy (RAPL), net of idle", "J", "energy", True,
              domain_prefix="rapl:package", net_of_idle=True),
    MetricDef("dram_energy_net_j", "DRAM energy (RAPL), net of idle", "J", "energy", True, domain_prefix="rapl:dram",
              net_of_idle=True),
)}

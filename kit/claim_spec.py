"""What a paper found, as data: the ``[[claims]]`` tables of an experiment.

A reproduction answers one question per paper: does what it found hold here? The hypotheses of a spec
say what the kit tests; the claims say what the *paper* concluded, so that the analysis
(kit.analysis.claims) can put the two side by side and give each claim a verdict by a stated
procedure. A claim names its quantity (metric, phase, the two arms, which configurations), its kind,
the paper's value where the paper publishes one, the words of the paper it rests on (``paper_text``, a
verbatim quote, checked against the paper's text by tests/test_claim_encodings.py) and the conditions
its finding depends on, so that a claim is judged only where the run has them and otherwise says what
would test it.

The quantity of every two-arm claim is the ratio A/B of ``arms[0]`` over ``arms[1]`` (the same orientation as the
kit's hypotheses, whose effect reads "A/B = 1.04"), estimated as the Hodges-Lehmann ratio that the verdict tests
(kit.analysis.claim_tests); a paper's value is its ratio of the printed medians or means. Kinds:

* ``direction``: ``direction = "greater"`` (A/B > 1) or ``"less"`` (A/B < 1); with ``threshold`` t the
  claim is A/B > t (or < t), judged as A/(t B) against 1 (a speed-up on two GPUs that is "near-linear":
  throughput(DDP) / throughput(one GPU) > 1.8);
* ``difference``: the arms differ, in a direction the paper does not state (an abstract's "differ");
* ``magnitude``: A/B equals ``paper_value`` within ``tolerance`` (relative), widened by ``uncertainty``
  where the value was read from a figure (``approximate = true``);
* ``no_difference``: A/B lies within ``margin`` of 1 (an equivalence claim: the paper says "comparable",
  "similar", "the same");
* ``not_significant``: the paper's test did not reject at its ``paper_n`` repetitions per arm ("p = 0.485,
  H0 not rejected"): not an equivalence (the paper chose no margin), so it is judged by whether this run's
  test at the paper's design would reject, with its power (kit.analysis.claim_tests);
* ``trend``: each listed arm's metric rises (``trend = "increasing"``) or falls with the configuration key
  ``factor``, optionally only up to the level ``up_to``.

Arms. An arm is a framework of the experiment (``"tensorflow"``), or a framework in some of the study's
configurations: ``"pytorch@case=ddp"`` (PyTorch's DistributedDataParallel case), ``"tensorflow@device=cpu"``
(TensorFlow's configurations that ran on the CPU), ``"pytorch@case=ddp,batch_size=64"``. Two arms with
qualifiers compare configurations of the study (DDP vs DataParallel, CPU vs GPU within one framework); their
configurations are paired on the keys the qualifiers leave free, and judged unpaired (their trials are not in
one block).

Scope, when several configurations match: ``each`` (each must show it), ``overall`` (their geometric mean,
the network the unit where they span several networks), ``each_network`` (each network of the study must show
it, its configurations judged together: Dai et al.'s "their performance difference" holds per network, and
opposite gaps in two networks must not cancel in a mean). Every value a claim's ``where`` lists must be run
("across the five models" needs all five).

Conditions (a run that differs in one is "not testable here: differs in ...", never replicated or
contradicted):

* ``device`` and ``gpus``: the device class and the GPUs per trial the paper measured on;
* ``threads``: the CPU threads (cores) the paper's trials used, where the finding depends on them (a CPU-speed
  ratio changes with parallelism; 64 cores are not one thread); 0: not tied to a thread count;
* ``cpu_model``: the CPU the finding depends on (a CPU-speed claim: the frameworks' CPU kernels differ by ISA
  and vendor); every word of it must appear in the run's CPU model (case-insensitive, (R)/(TM) ignored);
* ``tied_versions``: framework -> PEP 440 specifier, where the paper ties its finding to the version it ran
  (Germino et al.: "the reason ... lies in the version of TensorFlow which we were using"); ``versions``
  records the paper's versions without tying the finding to them (a difference is listed, not a block);
* ``data``: ``"values"`` (the default: the quantity depends on the data's values: accuracy, loss, and any
  time whose work the data decide) or ``"shapes"`` (a time or resource use that depends only on the tensors'
  shapes and sizes: a synthetic stand-in with the paper's shapes and sizes may judge it);
* always: the paper's model and protocol (its phase definition: steps, epochs, batch, the timed unit), taken
  as the paper profile's configuration; a profile that runs a configuration otherwise is not the paper's.

A claim the kit records but cannot judge by design (a quantity it does not measure, an abstract that does not
say) carries ``untestable = "why"``. A gap whose cause the kit's identical models remove (a dropout left on at
test time in one framework's code, a tutorial's weaker base model) carries ``cause_removed = "what"``: it is
recorded, this run's figure shown, and never contradicted (nor replicated: the run has not the paper's cause).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from kit.metric_catalog import METRICS
from kit.spec_invalid import Invalid

CLAIM_KINDS = ("direction", "difference", "magnitude", "no_difference", "not_significant", "trend")
TWO_ARM_KINDS = ("direction", "difference", "magnitude", "no_difference", "not_significant")
CLAIM_DEVICES = ("any", "cpu", "gpu")
CLAIM_SCOPES = ("each", "overall", "each_network")
CLAIM_DATA = ("values", "shapes")
DIRECTIONS = ("greater", "less")
TRENDS = ("increasing", "decreasing")
ARM_DEVICES = ("cpu", "gpu")  # the values of an arm's ``device`` qualifier
MAX_CLAIMS = 200
MAX_TEXT = 2000  # characters of one claim's free text
MAX_PAPER_N = 100_000
_ARM = re.compile(r"^([A-Za-z0-9_.-]+)(?:@(.+))?$")
_QUALIFIER = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=([A-Za-z0-9_.+-]+)$")


@dataclass(frozen=True)
class ArmRef:
    """One arm of a claim: a framework, in the configurations its qualifiers select (none: all of them)."""

    framework: str
    qualifiers: tuple[tuple[str, str], ...] = ()  # (configuration key or "device", value as written)

    @property
    def text(self) -> str:
        return self.framework + ("@" + ",".join(f"{k}={v}" for k, v in self.qualifiers) if self.qualifiers else "")


def parse_arm(text: str, where: str) -> ArmRef:
    """``"pytorch"`` or ``"pytorch@case=ddp,batch_size=64"``; Invalid naming ``where`` otherwise."""
    m = _ARM.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise Invalid(where, "a framework, or framework@key=value[,key=value] (e.g. pytorch@case=ddp)", text)
    quals: list[tuple[str, str]] = []
    for part in (m.group(2) or "").split(",") if m.group(2) else []:
        q = _QUALIFIER.match(part.strip())
        if q is None:
            raise Invalid(where, "qualifiers key=value (a configuration key, or device=cpu|gpu)", text)
        if q.group(1) == "device" and q.group(2) not in ARM_DEVICES:
            raise Invalid(where, f"device={'|'.join(ARM_DEVICES)}", text)
        if q.group(1) in {k for k, _ in quals}:
            raise Invalid(where, "each qualifier key once", text)
        quals.append((q.group(1), q.group(2)))
    return ArmRef(m.group(1), tuple(quals))


@dataclass(frozen=True)
class Claim:
    """One finding of the paper, with the quantity that tests it and the conditions it depends on."""

    id: str
    source: str  # where in the paper: "Fig. 4", "Table 3", "Sec. 5.2"
    statement: str  # the finding in the kit's own words (a paraphrase, never quoted text)
    kind: str  # one of CLAIM_KINDS
    metric: str = ""
    phase: str = "train"
    arms: tuple[str, ...] = ()  # two arms (A, B) for a ratio A/B; one or more for a trend (see parse_arm)
    where: dict[str, Any] = field(default_factory=dict)  # configuration filter: key -> value or list of values
    scope: str = "each"  # each matching configuration, their geometric mean ("overall"), or each network
    direction: str = ""  # direction: greater (A/B > threshold) or less
    threshold: float = 1.0  # direction, difference: the level of A/B the claim is about (1: A equals B)
    paper_value: float | None = None  # magnitude: the paper's A/B
    tolerance: float = 0.0  # magnitude: relative half-width of the band around paper_value
    approximate: bool = False  # paper_value read from a figure, not printed in a table
    uncertainty: float = 0.0  # the reading's relative uncertainty (widens the band)
    margin: float = 0.0  # no_difference: equivalence margin (relative); difference: the margin that contradicts it
    paper_n: int = 0  # not_significant: the paper's repetitions per arm (its design, whose test did not reject)
    factor: str = ""  # trend: the configuration key the metric is ordered by
    trend: str = ""  # trend: increasing or decreasing
    up_to: float | None = None  # trend: only levels of the factor at or below this
    paper_text: str = ""  # the paper's own words: verbatim passages of its text, joined by " … "
    reading: str = ""  # the kit's reading of them: the numbers it takes, a ratio it computes, what is not printed
    device: str = "any"  # the device kind the paper measured this on
    gpus: int = 0  # GPUs the claim needs in one trial (2: a two-GPU claim)
    threads: int = 0  # CPU threads of the paper's trials the finding depends on (0: not tied)
    cpu_model: str = ""  # the CPU the finding depends on ("": any)
    hardware: str = ""  # the paper's hardware, as it states it
    versions: dict[str, str] = field(default_factory=dict)  # framework -> the version the paper used (recorded)
    tied_versions: dict[str, str] = field(default_factory=dict)  # framework -> PEP 440 specifier the run must meet
    data: str = "values"  # what of the data the quantity depends on: "values" or "shapes"
    cause_removed: str = ""  # the cause of the paper's gap that the kit's identical models remove ("" : none)
    untestable: str = ""  # why the kit cannot judge this claim by design ("" when it can)

    def arm_refs(self) -> tuple[ArmRef, ...]:
        return tuple(parse_arm(a, f"arms[{i}]") for i, a in enumerate(self.arms))

    def check(self, p: str) -> None:
        if not self.id or not self.id.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise Invalid(f"{p}.id", "an id of letters, digits, '_', '-' or '.'", self.id)
        for name in ("source", "statement"):
            if not getattr(self, name).strip():
                raise Invalid(f"{p}.{name}", "a non-empty string", getattr(self, name))
        for name in ("source", "statement", "paper_text", "reading", "hardware", "cpu_model", "cause_removed",
                     "untestable"):
            if len(getattr(self, name)) > MAX_TEXT:
                raise Invalid(f"{p}.{name}", f"at most {MAX_TEXT} characters", f"{len(getattr(self, name))} characters")
        if self.kind not in CLAIM_KINDS:
            raise Invalid(f"{p}.kind", f"one of {', '.join(CLAIM_KINDS)}", self.kind)
        if self.device not in CLAIM_DEVICES:
            raise Invalid(f"{p}.device", f"one of {', '.join(CLAIM_DEVICES)}", self.device)
        if self.scope not in CLAIM_SCOPES:
            raise Invalid(f"{p}.scope", f"one of {', '.join(CLAIM_SCOPES)}", self.scope)
        if self.data not in CLAIM_DATA:
            raise Invalid(f"{p}.data", "'values' (the quantity depends on the data's values) or 'shapes' (only on "
                          "the tensors' shapes and sizes: a synthetic stand-in of the paper's sizes may judge it)",
                          self.data)
        if not 0 <= self.gpus <= 64:
            raise Invalid(f"{p}.gpus", "an integer from 0 to 64", self.gpus)
        if not 0 <= self.threads <= 4096:
            raise Invalid(f"{p}.threads", "the paper's CPU threads, an integer from 0 (not tied) to 4096", self.threads)
        if not 0 <= self.paper_n <= MAX_PAPER_N:
            raise Invalid(f"{p}.paper_n", f"the paper's repetitions per arm, 0 to {MAX_PAPER_N}", self.paper_n)
        for name in ("tolerance", "uncertainty", "margin"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 <= v < 10):
                raise Invalid(f"{p}.{name}", "a relative amount in [0, 10) such as 0.1 for 10 %", v)
        if not (math.isfinite(self.threshold) and 0 < self.threshold < 1000):
            raise Invalid(f"{p}.threshold", "a positive level of A/B below 1000 (1: A equals B)", self.threshold)
        for fw, spec in self.tied_versions.items():
            try:
                SpecifierSet(spec)
            except InvalidSpecifier:
                raise Invalid(f"{p}.tied_versions.{fw}", "a PEP 440 version specifier such as '==2.0.*' or '>=2.0'",
                              spec) from None
        if self.untestable.strip():
            return  # recorded, never judged: the quantity need not be expressible
        if self.metric not in METRICS:
            raise Invalid(f"{p}.metric", f"a known metric ({', '.join(sorted(METRICS))})", self.metric)
        if self.phase not in ("train", "infer"):
            raise Invalid(f"{p}.phase", "'train' or 'infer'", self.phase)
        if len(set(self.arms)) != len(self.arms):
            raise Invalid(f"{p}.arms", "distinct arm names", list(self.arms))
        for i, a in enumerate(self.arms):
            parse_arm(a, f"{p}.arms[{i}]")
        if self.data == "shapes" and self.metric in ("accuracy", "train_loss"):
            raise Invalid(f"{p}.data", "'values' for a metric the data's values decide (accuracy, loss)", self.data)
        self._check_kind(p)

    def _check_kind(self, p: str) -> None:
        if self.kind == "trend" or (self.kind == "not_significant" and self.factor):
            if not self.arms:
                raise Invalid(f"{p}.arms", "at least one arm whose metric follows the trend", [])
            if not self.factor:
                raise Invalid(f"{p}.factor", "the configuration key the trend runs along (e.g. 'batch_size')")
            if self.kind == "trend" and self.trend not in TRENDS:
                raise Invalid(f"{p}.trend", f"one of {', '.join(TRENDS)}", self.trend)
            if self.up_to is not None and not math.isfinite(self.up_to):
                raise Invalid(f"{p}.up_to", "a finite level of the factor", self.up_to)
        elif len(self.arms) != 2:
            raise Invalid(f"{p}.arms", "two arms [A, B]: the claim is about the ratio A/B", list(self.arms))
        if self.kind == "direction" and self.direction not in DIRECTIONS:
            raise Invalid(f"{p}.direction", "'greater' (A/B > 1) or 'less' (A/B < 1)", self.direction)
        if self.kind == "not_significant" and self.scope != "each":
            raise Invalid(f"{p}.scope", "'each' (a not_significant claim is the paper's test in each configuration)",
                          self.scope)
        if self.kind == "trend" and self.scope == "each_network":
            raise Invalid(f"{p}.scope", "'each' or 'overall' for a trend (its series, or the networks as units)",
                          self.scope)
        if self.threshold != 1.0 and self.kind not in ("direction", "difference"):
            raise Invalid(f"{p}.threshold", "1 (a threshold other than 1 is for direction and difference claims)",
                          self.threshold)
        if self.kind == "magnitude":
            if self.paper_value is None or not (math.isfinite(self.paper_value) and self.paper_value > 0):
                raise Invalid(f"{p}.paper_value", "the paper's ratio A/B, a positive number", self.paper_value)
            if self.tolerance <= 0 and self.uncertainty <= 0:
                raise Invalid(f"{p}.tolerance", "a relative tolerance > 0 (how close counts as the same value)",
                              self.tolerance)
            if self.approximate and self.uncertainty <= 0:
                raise Invalid(f"{p}.uncertainty", "the relative uncertainty of reading the value from the figure "
                              "(> 0 when approximate = true)", self.uncertainty)
        if self.kind == "no_difference" and self.margin <= 0:
            raise Invalid(f"{p}.margin", "an equivalence margin > 0 (relative, e.g. 0.05)", self.margin)
        if self.kind == "not_significant" and self.paper_n < 2:
            raise Invalid(f"{p}.paper_n", "the paper's repetitions per arm (>= 2): its test did not reject at that n",
                          self.paper_n)

    def band(self) -> tuple[float, float] | None:
        """Magnitude claims: the interval of A/B that counts as the paper's value (tolerance and reading)."""
        if self.paper_value is None:
            return None
        half = self.tolerance + self.uncertainty
        return self.paper_value * max(0.0, 1 - half), self.paper_value * (1 + half)

    def matches(self, config: Mapping[str, Any]) -> bool:
        """Does a configuration of the run fall under the claim's ``where`` filter?"""
        for key, want in self.where.items():
            options = want if isinstance(want, list) else [want]
            if config.get(key) not in options:
                return False
        return True

    def listed(self) -> dict[str, list[Any]]:
        """Every value the ``where`` filter names, per key: each must be run for the claim to be judged."""
        return {k: list(v) if isinstance(v, list) else [v] for k, v in self.where.items()}


def check_claims(claims: Sequence[Claim], frameworks: Sequence[str],
                 configs: Sequence[Mapping[str, Any]] | None) -> None:
    """Checks that need the rest of the spec: unique ids, known arms, filters and factors the run can vary
    (``configs`` None: a run's copy, whose profile may run fewer configurations; those checks are skipped)."""
    if len(claims) > MAX_CLAIMS:
        raise Invalid("claims", f"at most {MAX_CLAIMS} claims", len(claims))
    seen: set[str] = set()
    keys: dict[str, list[Any]] = {}
    for cfg in configs or ():
        for k, v in cfg.items():
            keys.setdefault(k, [])
            if v not in keys[k]:
                keys[k].append(v)
    for i, c in enumerate(claims):
        p = f"claims[{i}]"
        if c.id in seen:
            raise Invalid(f"{p}.id", "a unique claim id", c.id)
        seen.add(c.id)
        for fw in (*c.versions, *c.tied_versions):
            if fw not in frameworks:
                name = "versions" if fw in c.versions else "tied_versions"
                raise Invalid(f"{p}.{name}.{fw}", f"one of the experiment's frameworks ({', '.join(frameworks)})", fw)
        if c.untestable.strip():
            continue
        refs = [parse_arm(a, f"{p}.arms[{j}]") for j, a in enumerate(c.arms)]
        for j, ref in enumerate(refs):
            if ref.framework not in frameworks:
                raise Invalid(f"{p}.arms[{j}]", f"one of the experiment's frameworks ({', '.join(frameworks)}), "
                              "optionally @key=value", c.arms[j])
            if configs is None:
                continue
            for key, _ in ref.qualifiers:
                if key != "device" and key not in keys:
                    known = ", ".join(sorted(keys)) or "none: the experiment has one configuration"
                    raise Invalid(f"{p}.arms[{j}]", f"a qualifier on a configuration key ({known}) or device", key)
        if len(refs) == 2 and refs[0].framework == refs[1].framework and refs[0].qualifiers == refs[1].qualifiers:
            raise Invalid(f"{p}.arms", "two different arms (another framework, or other configurations: @key=value)",
                          list(c.arms))
        if configs is None:
            continue
        for key, want in c.where.items():
            if key not in keys:
                known = ", ".join(sorted(keys)) or "none: the experiment has one configuration"
                raise Invalid(f"{p}.where.{key}", f"a configuration key ({known})", key)
            # values are not checked against what this file runs: a copy that runs fewer cases or grid values
            # stays valid, and a claim whose filter matches nothing is "not testable" with the filter named
            for v in want if isinstance(want, list) else [want]:
                if not isinstance(v, str | int | float) or isinstance(v, bool):
                    raise Invalid(f"{p}.where.{key}", "a value or list of values of that key", v)
        if c.kind == "trend" or (c.kind == "not_significant" and c.factor):
            levels = keys.get(c.factor)
            if levels is None:
                raise Invalid(f"{p}.factor", f"a configuration key ({', '.join(sorted(keys)) or 'none'})", c.factor)
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in levels):
                raise Invalid(f"{p}.factor", "a key with numeric levels (a trend needs an order)", c.factor)

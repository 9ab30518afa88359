"""What a paper found, as data: the ``[[claims]]`` tables of an experiment.

A reproduction answers one question per paper: does what it found hold here? The hypotheses of a spec
say what the kit tests; the claims say what the *paper* concluded, so that the analysis
(kit.analysis.claims) can put the two side by side and give each claim a verdict by a stated
procedure. A claim names its quantity (metric, phase, the two arms, which configurations), its kind,
the paper's value where the paper publishes one, and the conditions it was made under (device kind,
GPUs, hardware, framework versions), so that a GPU claim is never judged, let alone contradicted, on a
CPU run.

The quantity of every two-arm claim is the ratio ``median(arms[0]) / median(arms[1])`` (the same
orientation as the kit's hypotheses, whose effect reads "A/B = 1.04"). Kinds:

* ``direction``: ``direction = "greater"`` (A/B > 1) or ``"less"`` (A/B < 1);
* ``difference``: the arms differ, in a direction the paper does not state (an abstract's "differ");
* ``magnitude``: A/B equals ``paper_value`` within ``tolerance`` (relative), widened by ``uncertainty``
  where the value was read from a figure (``approximate = true``);
* ``no_difference``: A/B lies within ``margin`` of 1 (an equivalence claim);
* ``trend``: each listed arm's metric rises (``trend = "increasing"``) or falls with the configuration key
  ``factor``, optionally only up to the level ``up_to``.

A claim the kit records but cannot judge by design (a quantity it does not measure, an abstract that
does not say) carries ``untestable = "why"`` and is listed as not testable with that reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.metric_catalog import METRICS
from kit.spec_invalid import Invalid

CLAIM_KINDS = ("direction", "difference", "magnitude", "no_difference", "trend")
CLAIM_DEVICES = ("any", "cpu", "gpu")
CLAIM_SCOPES = ("each", "overall")
DIRECTIONS = ("greater", "less")
TRENDS = ("increasing", "decreasing")
MAX_CLAIMS = 200
MAX_TEXT = 2000  # characters of one claim's free text


@dataclass(frozen=True)
class Claim:
    """One finding of the paper, with the quantity that tests it and the conditions it was made under."""

    id: str
    source: str  # where in the paper: "Fig. 4", "Table 3", "Sec. 5.2"
    statement: str  # the finding in the kit's own words (a paraphrase, never quoted text)
    kind: str  # one of CLAIM_KINDS
    metric: str = ""
    phase: str = "train"
    arms: tuple[str, ...] = ()  # two arms (A, B) for a ratio A/B; one or more for a trend
    where: dict[str, Any] = field(default_factory=dict)  # configuration filter: key -> value or list of values
    scope: str = "each"  # each matching configuration must agree ("each") or their geometric mean ("overall")
    direction: str = ""  # direction: greater (A/B > 1) or less
    paper_value: float | None = None  # magnitude: the paper's A/B
    tolerance: float = 0.0  # magnitude: relative half-width of the band around paper_value
    approximate: bool = False  # paper_value read from a figure, not printed in a table
    uncertainty: float = 0.0  # the reading's relative uncertainty (widens the band)
    margin: float = 0.0  # no_difference: equivalence margin (relative); difference: the margin that contradicts it
    factor: str = ""  # trend: the configuration key the metric is ordered by
    trend: str = ""  # trend: increasing or decreasing
    up_to: float | None = None  # trend: only levels of the factor at or below this
    paper_text: str = ""  # what the paper published (its numbers, as printed or read)
    device: str = "any"  # the device kind the paper measured this on
    gpus: int = 0  # GPUs the claim needs in one trial (2: a two-GPU claim)
    hardware: str = ""  # the paper's hardware, as it states it
    versions: dict[str, str] = field(default_factory=dict)  # framework -> the version the paper used
    untestable: str = ""  # why the kit cannot judge this claim by design ("" when it can)

    def check(self, p: str) -> None:
        if not self.id or not self.id.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise Invalid(f"{p}.id", "an id of letters, digits, '_', '-' or '.'", self.id)
        for name in ("source", "statement"):
            if not getattr(self, name).strip():
                raise Invalid(f"{p}.{name}", "a non-empty string", getattr(self, name))
        for name in ("source", "statement", "paper_text", "hardware", "untestable"):
            if len(getattr(self, name)) > MAX_TEXT:
                raise Invalid(f"{p}.{name}", f"at most {MAX_TEXT} characters", f"{len(getattr(self, name))} characters")
        if self.kind not in CLAIM_KINDS:
            raise Invalid(f"{p}.kind", f"one of {', '.join(CLAIM_KINDS)}", self.kind)
        if self.device not in CLAIM_DEVICES:
            raise Invalid(f"{p}.device", f"one of {', '.join(CLAIM_DEVICES)}", self.device)
        if self.scope not in CLAIM_SCOPES:
            raise Invalid(f"{p}.scope", f"one of {', '.join(CLAIM_SCOPES)}", self.scope)
        if not 0 <= self.gpus <= 64:
            raise Invalid(f"{p}.gpus", "an integer from 0 to 64", self.gpus)
        for name in ("tolerance", "uncertainty", "margin"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 <= v < 10):
                raise Invalid(f"{p}.{name}", "a relative amount in [0, 10) such as 0.1 for 10 %", v)
        if self.untestable.strip():
            return  # recorded, never judged: the quantity need not be expressible
        if self.metric not in METRICS:
            raise Invalid(f"{p}.metric", f"a known metric ({', '.join(sorted(METRICS))})", self.metric)
        if self.phase not in ("train", "infer"):
            raise Invalid(f"{p}.phase", "'train' or 'infer'", self.phase)
        if len(set(self.arms)) != len(self.arms):
            raise Invalid(f"{p}.arms", "distinct arm names", list(self.arms))
        self._check_kind(p)

    def _check_kind(self, p: str) -> None:
        if self.kind == "trend":
            if not self.arms:
                raise Invalid(f"{p}.arms", "at least one arm whose metric follows the trend", [])
            if not self.factor:
                raise Invalid(f"{p}.factor", "the configuration key the trend runs along (e.g. 'batch_size')")
            if self.trend not in TRENDS:
                raise Invalid(f"{p}.trend", f"one of {', '.join(TRENDS)}", self.trend)
            if self.up_to is not None and not math.isfinite(self.up_to):
                raise Invalid(f"{p}.up_to", "a finite level of the factor", self.up_to)
        elif len(self.arms) != 2:
            raise Invalid(f"{p}.arms", "two arms [A, B]: the claim is about the ratio A/B", list(self.arms))
        if self.kind == "direction" and self.direction not in DIRECTIONS:
            raise Invalid(f"{p}.direction", "'greater' (A/B > 1) or 'less' (A/B < 1)", self.direction)
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
        for fw, _ in c.versions.items():
            if fw not in frameworks:
                raise Invalid(f"{p}.versions.{fw}", f"one of the experiment's frameworks ({', '.join(frameworks)})", fw)
        if c.untestable.strip():
            continue
        for j, arm in enumerate(c.arms):
            if arm not in frameworks:
                raise Invalid(f"{p}.arms[{j}]", f"one of the experiment's frameworks ({', '.join(frameworks)})", arm)
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
        if c.kind == "trend":
            levels = keys.get(c.factor)
            if levels is None:
                raise Invalid(f"{p}.factor", f"a configuration key ({', '.join(sorted(keys)) or 'none'})", c.factor)
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in levels):
                raise Invalid(f"{p}.factor", "a key with numeric levels (a trend needs an order)", c.factor)

"""The run's claims as one family (Holm across the tested claims: a verdict whose adjusted p is not below alpha
becomes "inconclusive", saying so), and each claim's procedure in words."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from kit.analysis.claim_tests import (
    DEFAULT_DIFFERENCE_MARGIN,
    EVIDENCE,
    min_n,
)
from kit.claim_spec import Claim
from kit.stats import holm

# --------------------------------------------------------------------------- the family of claims


@dataclass(frozen=True)
class Adjustment:
    """One claim after Holm's procedure over the run's tested claims."""

    verdict: str
    p_adjusted: float | None
    family_size: int
    note: str  # "" when the verdict stands as judged


def holm_claims(verdicts: Sequence[str], ps: Sequence[float | None], alpha: float,
                kinds: Sequence[str] | None = None) -> list[Adjustment]:
    """Holm over the claims with a p (those a test judged); a replicated or contradicted verdict stands only where
    its adjusted p is below alpha, else it becomes inconclusive with the note saying why. A not_significant claim's
    "replicated" is a non-rejection and is not turned by it (its "contradicted" is)."""
    tested = [p if v != "not testable" else None for v, p in zip(verdicts, ps, strict=True)]
    adj = holm(tested)
    m = sum(1 for p in tested if p is not None)
    out = []
    for i, (v, p_adj) in enumerate(zip(verdicts, adj, strict=True)):
        kind = kinds[i] if kinds is not None else ""
        rests_on_p = v == "contradicted" or (v == "replicated" and kind != "not_significant")
        if p_adj is not None and rests_on_p and not p_adj < alpha:
            out.append(Adjustment("inconclusive", p_adj, m, f"{v} at p = {tested[i]:.3g}, but not after Holm over the "
                                  f"{m} tested claims (adjusted p = {p_adj:.3g}, not below {alpha:g})"))
        else:
            out.append(Adjustment(v, p_adj, m if p_adj is not None else 0, ""))
    return out


Row = TypeVar("Row")


def adjust_claims(rows: Sequence[Row], alpha: float) -> list[Row]:
    """The rows (dataclasses with ``verdict``, ``reason``, ``kind``, ``p``, ``p_adjusted`` and ``family_size``:
    kit.analysis.claims.ClaimVerdict) with Holm applied over the tested claims of the run (:func:`holm_claims`)."""
    got = holm_claims([r.verdict for r in rows], [r.p for r in rows], alpha,  # type: ignore[attr-defined]
                      [r.kind for r in rows])  # type: ignore[attr-defined]
    out = []
    for r, a in zip(rows, got, strict=True):
        reason = r.reason + (f"; {a.note}" if a.note else "")  # type: ignore[attr-defined]
        out.append(dataclasses.replace(r, verdict=a.verdict, p_adjusted=a.p_adjusted,  # type: ignore[type-var]
                                       family_size=a.family_size, reason=reason))
    return out


def p_label(family_size: int) -> str:
    """How the ledger labels a claim's adjusted p (the hypotheses' table says "Holm over the hypotheses' family")."""
    return f"p (Holm over {family_size} claim{'s' if family_size != 1 else ''})" if family_size else "p"


# --------------------------------------------------------------------------- in words


def procedure_text(claim: Claim, alpha: float) -> str:
    need = min_n(claim.kind, claim.scope, "levels" if claim.kind == "trend" else
                 "networks" if claim.scope == "overall" else "paired").enforced
    floor = f"; no verdict below {need} repetitions per arm (simulated: {EVIDENCE.split(' (')[0]})"
    if claim.scope == "overall":
        scope = (f"per network the mean log median ratio of its configurations, then a t test and interval across "
                 f"the networks, only where 2/2^J < {alpha:g}/m for J networks")
    else:
        scope = "in each matching configuration (one contradicting at alpha/k suffices)"
    ratio = "the Hodges-Lehmann ratio A/B (exp of the pseudo-median of the per-block log ratios)"
    family = "; Holm across the run's tested claims"
    text = {
        "direction": f"two-sided rank test at {alpha:g} and the {1 - alpha:.0%} interval of {ratio} ({scope}); on "
                     "the paper's side of 1: replicated, on the other side: contradicted",
        "difference": f"two-sided rank test at {alpha:g} with {ratio} excluding 1 ({scope}): replicated; equivalent "
                      f"within {(claim.margin or DEFAULT_DIFFERENCE_MARGIN):.0%} (TOST, the {1 - 2 * alpha:.0%} "
                      "interval inside the margin): contradicted",
        "magnitude": f"the {1 - alpha:.0%} interval of {ratio} ({scope}) inside the paper's band: replicated, "
                     "outside it: contradicted",
        "no_difference": f"TOST at {alpha:g} with margin {claim.margin:.0%} on {ratio} ({scope}): replicated; the "
                         f"{1 - alpha:.0%} interval outside the margin: contradicted",
        "trend": f"Jonckheere-Terpstra test per arm at {alpha:g} along {claim.factor} "
                 + ("per network, then the signed-rank test of the networks' concordances across networks"
                    if claim.scope == "overall" else "in each series") + "; every one significant the paper's way: "
                 "replicated; one significant the other way: contradicted",
        "not_significant": f"the run's two-sided rank test at {alpha:g} at the paper's n; not rejected: replicated "
                           "(with the power it had), rejected: contradicted",
    }.get(claim.kind, "")
    return text + (floor if claim.kind != "not_significant" else "") + family

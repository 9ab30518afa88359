"""kit.fmt: one number formatter for every report and the terminal."""

from __future__ import annotations

import math

from kit.fmt import DASH, fmt_num, fmt_p
from kit.report import html, latex


def test_one_formatter_behind_every_report_filter() -> None:
    assert html.environment().filters["num"] is fmt_num and html.environment().filters["p"] is fmt_p
    assert latex.fmt_num is html.fmt_num is fmt_num and latex.fmt_p is html.fmt_p is fmt_p


def test_the_rule() -> None:
    assert fmt_num(None) == fmt_num(math.nan) == fmt_p(None) == DASH
    assert fmt_num(True) == "True" and fmt_num(61706) == "61,706"
    assert fmt_num(0.123456) == "0.1235" and fmt_num(0.123456, 3) == "0.123"
    assert fmt_num(1.5e7) == "1.500e+07" and fmt_num(2e-4) == "2.000e-04" and fmt_num(0.0) == "0"
    assert fmt_num(1.23456, fmt=".3f") == "1.235" and fmt_num(2.5e9, fmt=".3g", scale=1e-9) == "2.5"
    assert fmt_num(math.nan, fmt=".3f") == DASH and fmt_num(1500, scale=0.001) == "1.5"
    assert fmt_p(0.0) == "< 1e-300" and fmt_p(0.012345) == "0.0123"

# Sourced by .ci/run: TeX (for `kit report --format pdf` and the `tex` tests) and headless
# Chromium (for the `browser` test). Idempotent: installs only what is missing.
need=()
command -v latexmk >/dev/null 2>&1 || need+=(latexmk)
command -v pdflatex >/dev/null 2>&1 || need+=(texlive-latex-base)
kpsewhich booktabs.sty >/dev/null 2>&1 || need+=(texlive-latex-recommended)
kpsewhich adjustbox.sty >/dev/null 2>&1 || need+=(texlive-latex-extra)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# The TeX list matches TEX_PACKAGES in kit/report/latex.py (what the kit's error messages tell users).
if [ ${#need[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
latexmk -v | sed -n 1p   # sed reads to the end: no SIGPIPE under pipefail
chromium --version
# screenshots of the HTML report are kept as CI artifacts
export KIT_ARTIFACTS="${KIT_ARTIFACTS:-$PWD/artifacts}"
mkdir -p "$KIT_ARTIFACTS"

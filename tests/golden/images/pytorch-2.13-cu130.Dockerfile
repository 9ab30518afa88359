# pytorch-2.13-cu130: pytorch 2.13.0 (CUDA 13.0, cuDNN 9.20.0), CPython 3.11.
# Rendered by `kit images render` from images/matrix.toml and images/locks/pytorch-2.13-cu130.txt.
# Do not edit: change the matrix or images/Dockerfile.j2 and render again.
#
# Stage 1 installs the locked wheels into a virtual environment, every file checked
# against its sha256 (--require-hashes), from the wheelhouse when the build context
# carries one (kit images build --wheelhouse: offline) and from the index otherwise.
# Stage 2 keeps only that environment and runs as an unprivileged user.
FROM docker.io/library/python:3.11.15-slim-bookworm@sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3 AS install
COPY requirements.lock /tmp/kit/requirements.lock
COPY wheelhouse/ /tmp/kit/wheelhouse/
RUN if ls /tmp/kit/wheelhouse/*.whl >/dev/null 2>&1; then \
        set -- --no-index --find-links /tmp/kit/wheelhouse; \
    else \
        set -- --index-url https://pypi.org/simple; \
    fi \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/python -m pip install --no-cache-dir --disable-pip-version-check \
        --require-hashes --no-deps --only-binary=:all: "$@" -r /tmp/kit/requirements.lock \
 && /opt/venv/bin/python -m pip check

FROM docker.io/library/python:3.11.15-slim-bookworm@sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3
COPY --from=install /opt/venv /opt/venv
RUN useradd --no-log-init --create-home --uid 1000 --user-group --shell /bin/sh kit
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL org.opencontainers.image.title="kit pytorch-2.13-cu130" \
      org.opencontainers.image.description="pytorch 2.13.0 (CUDA 13.0, cuDNN 9.20.0) for the kit trial harness" \
      org.opencontainers.image.version="2.13.0" \
      org.opencontainers.image.vendor="dlbench-kit" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.15-slim-bookworm" \
      org.opencontainers.image.base.digest="sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3" \
      io.kit.image="pytorch-2.13-cu130" \
      io.kit.framework="pytorch" \
      io.kit.framework.version="2.13.0" \
      io.kit.device="cuda" \
      io.kit.cuda="13.0" \
      io.kit.cudnn="9.20.0" \
      io.kit.python="3.11" \
      io.kit.lock="locks/pytorch-2.13-cu130.txt" \
      io.kit.lock.sha256="41f874e0b86b3712d84ae38bdeb0bc06fa670d8696a612401a03da564116c2d5" \
      io.kit.base.pinned="true"

USER 1000:1000
WORKDIR /home/kit
CMD ["python3"]

# pytorch-1.0-py36-cu90: pytorch 1.0.0 (CUDA 9.0, cuDNN 7.4.1), CPython 3.6.
# Rendered by `kit images render` from images/matrix.toml and images/locks/pytorch-1.0-py36-cu90.txt.
# Do not edit: change the matrix or images/Dockerfile.j2 and render again.
#
# Stage 1 installs the locked wheels into a virtual environment, every file checked
# against its sha256 (--require-hashes), from the wheelhouse when the build context
# carries one (kit images build --wheelhouse: offline) and from the index otherwise.
# Stage 2 keeps only that environment and runs as an unprivileged user.
FROM docker.io/library/python:3.6.15-slim-bullseye@sha256:73a62cab42cf800cb2e4ff603a3b167d9b5487228cdf6ff63d2f629b6b086209 AS install
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

FROM docker.io/library/python:3.6.15-slim-bullseye@sha256:73a62cab42cf800cb2e4ff603a3b167d9b5487228cdf6ff63d2f629b6b086209
COPY --from=install /opt/venv /opt/venv
RUN useradd --no-log-init --create-home --uid 1000 --user-group --shell /bin/sh kit
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL org.opencontainers.image.title="kit pytorch-1.0-py36-cu90" \
      org.opencontainers.image.description="pytorch 1.0.0 (CUDA 9.0, cuDNN 7.4.1) for the kit trial harness" \
      org.opencontainers.image.version="1.0.0" \
      org.opencontainers.image.vendor="dlbench-kit" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/library/python:3.6.15-slim-bullseye" \
      org.opencontainers.image.base.digest="sha256:73a62cab42cf800cb2e4ff603a3b167d9b5487228cdf6ff63d2f629b6b086209" \
      io.kit.image="pytorch-1.0-py36-cu90" \
      io.kit.framework="pytorch" \
      io.kit.framework.version="1.0.0" \
      io.kit.device="cuda" \
      io.kit.cuda="9.0" \
      io.kit.cudnn="7.4.1" \
      io.kit.python="3.6" \
      io.kit.lock="locks/pytorch-1.0-py36-cu90.txt" \
      io.kit.lock.sha256="6c6e737da611295e53add9ce68739fbbb2f02601cfa41f1ed7dd6cdffb556d8a" \
      io.kit.base.pinned="true"

USER 1000:1000
WORKDIR /home/kit
CMD ["python3"]

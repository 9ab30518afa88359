# tensorflow-2.0-py37-cpu: tensorflow 2.0.0 (CPU only), CPython 3.7.
# Rendered by `kit images render` from images/matrix.toml and images/locks/tensorflow-2.0-py37-cpu.txt.
# Do not edit: change the matrix or images/Dockerfile.j2 and render again.
#
# Stage 1 installs the locked wheels into a virtual environment, every file checked
# against its sha256 (--require-hashes), from the wheelhouse when the build context
# carries one (kit images build --wheelhouse: offline) and from the index otherwise.
# Stage 2 keeps only that environment and runs as an unprivileged user.
FROM docker.io/library/python:3.7.17-slim-bullseye@sha256:159e71c745a9fef6ba1aa1b85d3e666138441c50ad984a56ee38b6cd664f5ef2 AS install
COPY requirements.lock /tmp/kit/requirements.lock
COPY wheelhouse/ /tmp/kit/wheelhouse/
RUN if ls /tmp/kit/wheelhouse/*.whl >/dev/null 2>&1; then \
        set -- --no-index --find-links /tmp/kit/wheelhouse; \
    else \
        set -- --index-url https://pypi.org/simple; \
    fi \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/python -m pip install --no-cache-dir --disable-pip-version-check \
        --require-hashes --no-deps --only-binary=:all: --no-binary=gast "$@" -r /tmp/kit/requirements.lock \
 && /opt/venv/bin/python -m pip check

FROM docker.io/library/python:3.7.17-slim-bullseye@sha256:159e71c745a9fef6ba1aa1b85d3e666138441c50ad984a56ee38b6cd664f5ef2
COPY --from=install /opt/venv /opt/venv
RUN useradd --no-log-init --create-home --uid 1000 --user-group --shell /bin/sh kit
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL org.opencontainers.image.title="kit tensorflow-2.0-py37-cpu" \
      org.opencontainers.image.description="tensorflow 2.0.0 (CPU only) for the kit trial harness" \
      org.opencontainers.image.version="2.0.0" \
      org.opencontainers.image.vendor="dlbench-kit" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/library/python:3.7.17-slim-bullseye" \
      org.opencontainers.image.base.digest="sha256:159e71c745a9fef6ba1aa1b85d3e666138441c50ad984a56ee38b6cd664f5ef2" \
      io.kit.image="tensorflow-2.0-py37-cpu" \
      io.kit.framework="tensorflow" \
      io.kit.framework.version="2.0.0" \
      io.kit.device="cpu" \
      io.kit.cuda="" \
      io.kit.cudnn="" \
      io.kit.python="3.7" \
      io.kit.lock="locks/tensorflow-2.0-py37-cpu.txt" \
      io.kit.lock.sha256="a7059497537219abab6af58ff85aba95c7f2dae98b0e51fefa2e7a95865e0aaf" \
      io.kit.base.pinned="true"

USER 1000:1000
WORKDIR /home/kit
CMD ["python3"]

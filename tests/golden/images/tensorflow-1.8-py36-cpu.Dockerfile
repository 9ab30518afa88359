# tensorflow-1.8-py36-cpu: tensorflow 1.8.0 (CPU only), CPython 3.6.
# Rendered by `kit images render` from images/matrix.toml and images/locks/tensorflow-1.8-py36-cpu.txt.
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
        --require-hashes --no-deps --only-binary=:all: --no-binary=termcolor,gast,html5lib "$@" -r /tmp/kit/requirements.lock \
 && /opt/venv/bin/python -m pip check

FROM docker.io/library/python:3.6.15-slim-bullseye@sha256:73a62cab42cf800cb2e4ff603a3b167d9b5487228cdf6ff63d2f629b6b086209
COPY --from=install /opt/venv /opt/venv
RUN useradd --no-log-init --create-home --uid 1000 --user-group --shell /bin/sh kit
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL org.opencontainers.image.title="kit tensorflow-1.8-py36-cpu" \
      org.opencontainers.image.description="tensorflow 1.8.0 (CPU only) for the kit trial harness" \
      org.opencontainers.image.version="1.8.0" \
      org.opencontainers.image.vendor="dlbench-kit" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/library/python:3.6.15-slim-bullseye" \
      org.opencontainers.image.base.digest="sha256:73a62cab42cf800cb2e4ff603a3b167d9b5487228cdf6ff63d2f629b6b086209" \
      io.kit.image="tensorflow-1.8-py36-cpu" \
      io.kit.framework="tensorflow" \
      io.kit.framework.version="1.8.0" \
      io.kit.device="cpu" \
      io.kit.cuda="" \
      io.kit.cudnn="" \
      io.kit.python="3.6" \
      io.kit.lock="locks/tensorflow-1.8-py36-cpu.txt" \
      io.kit.lock.sha256="39d6667b6d1f11e60418863e190bee0b83625318d198e22efc4c58f0a4ab9894" \
      io.kit.base.pinned="true"

USER 1000:1000
WORKDIR /home/kit
CMD ["python3"]

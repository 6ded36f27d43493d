# kube-ccm image: a multi-stage build to a small, non-root runtime.
#   docker build -t kube-ccm:latest .
#   docker build --build-arg EXTRAS=libvirt -t kube-ccm:libvirt .   # with the libvirt provider
# Provider authors: build FROM this image and `pip install` your provider package,
# or add it to the builder stage's install line.

FROM python:3.11-slim-bookworm AS build
# Optional extras, comma-separated: "libvirt" builds libvirt's bindings (against
# Debian's libvirt-dev) for the libvirt provider.
ARG EXTRAS=""
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Not pinned: bookworm's packages (security updates included) are what libvirt's
# bindings are built and run against; the base image pins the release.
# hadolint ignore=DL3008
RUN if [[ ",${EXTRAS}," == *,libvirt,* ]]; then \
        apt-get update \
     && apt-get install -y --no-install-recommends gcc libc6-dev libvirt-dev pkg-config \
     && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kube_ccm ./kube_ccm
RUN python -m venv /opt/kube-ccm \
 && /opt/kube-ccm/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/kube-ccm/bin/pip install --no-cache-dir ".${EXTRAS:+[${EXTRAS}]}" \
 && find /opt/kube-ccm -name '__pycache__' -prune -exec rm -rf {} + \
 && rm -rf /opt/kube-ccm/lib/python3.11/site-packages/kube_ccm/testing/gobuild \
    /opt/kube-ccm/lib/python3.11/site-packages/kube_ccm/testing/gobuild-helm

FROM python:3.11-slim-bookworm
ARG EXTRAS=""
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The libvirt provider's bindings need libvirt's client library at run time.
# hadolint ignore=DL3008
RUN if [[ ",${EXTRAS}," == *,libvirt,* ]]; then \
        apt-get update \
     && apt-get install -y --no-install-recommends libvirt0 \
     && rm -rf /var/lib/apt/lists/*; \
    fi
LABEL org.opencontainers.image.title="kube-ccm" \
      org.opencontainers.image.description="The Kubernetes cloud-controller-manager, in Python"
COPY --from=build /opt/kube-ccm /opt/kube-ccm
ENV PATH=/opt/kube-ccm/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# nonroot, as in distroless images; matches runAsUser in deploy/*.yaml
USER 65532:65532
EXPOSE 10258 10260
ENTRYPOINT ["cloud-controller-manager"]
CMD ["--help"]

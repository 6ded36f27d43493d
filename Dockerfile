# kube-ccm image: a multi-stage build to a small, non-root runtime.
#   docker build -t kube-ccm:latest .
#   docker build --build-arg EXTRAS=libvirt -t kube-ccm:libvirt .   # with the libvirt provider
#   docker build --build-arg BASE_IMAGE=registry.example/python:3.11-slim-bookworm .
# BASE_IMAGE is any Debian 12 (bookworm) image with Python 3.11 as `python` (venv
# included) and apt; the tests build with a stand-in assembled from Debian's packages
# (kube_ccm/testbed/image.py). buildah and podman build it too: every RUN is POSIX sh,
# because they ignore SHELL when they build an OCI image (their default format).
# Provider authors: build FROM this image and `pip install` your provider package,
# or add it to the builder stage's install line.

ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
# Optional extras, comma-separated: "libvirt" builds libvirt's bindings (against
# Debian's libvirt-dev) for the libvirt provider.
ARG EXTRAS=""
# Not pinned: bookworm's packages (security updates included) are what libvirt's
# bindings are built and run against; the base image pins the release.
# hadolint ignore=DL3008
RUN case ",${EXTRAS}," in *,libvirt,*) \
        apt-get update \
     && apt-get install -y --no-install-recommends gcc libc6-dev libvirt-dev pkg-config \
     && rm -rf /var/lib/apt/lists/* ;; \
    esac
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kube_ccm ./kube_ccm
RUN python -m venv /opt/kube-ccm \
 && /opt/kube-ccm/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/kube-ccm/bin/pip install --no-cache-dir ".${EXTRAS:+[${EXTRAS}]}" \
 && find /opt/kube-ccm -name '__pycache__' -prune -exec rm -rf {} + \
 && rm -rf /opt/kube-ccm/lib/python3.11/site-packages/kube_ccm/testing/gobuild \
    /opt/kube-ccm/lib/python3.11/site-packages/kube_ccm/testbed/gobuild-helm

FROM ${BASE_IMAGE}
ARG EXTRAS=""
# The libvirt provider's bindings need libvirt's client library at run time.
# hadolint ignore=DL3008
RUN case ",${EXTRAS}," in *,libvirt,*) \
        apt-get update \
     && apt-get install -y --no-install-recommends libvirt0 \
     && rm -rf /var/lib/apt/lists/* ;; \
    esac
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

"""What matters in the Dockerfile, checked fast; tests/integration/test_image.py builds it
for real (buildah) and runs the image."""

from __future__ import annotations

from pathlib import Path

import yaml

from kube_ccm.testbed.image import dockerfile_base_image

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    lines, current = [], ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        current += raw.rstrip("\\").strip() + " "
        if not raw.rstrip().endswith("\\"):
            keyword, _, rest = current.strip().partition(" ")
            lines.append((keyword.upper(), rest))
            current = ""
    return lines


def test_both_stages_build_on_one_overridable_base_image() -> None:
    steps = instructions()
    first_from = next(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    # Declared before the first FROM, so both stages see it; the default is the
    # official image, and --build-arg BASE_IMAGE=... replaces it without an edit.
    assert ("ARG", "BASE_IMAGE=python:3.11-slim-bookworm") in steps[:first_from]
    stages = [rest.split()[0] for keyword, rest in steps if keyword == "FROM"]
    assert stages == ["${BASE_IMAGE}", "${BASE_IMAGE}"]
    assert dockerfile_base_image(ROOT / "Dockerfile") == "python:3.11-slim-bookworm"


def test_every_run_step_is_posix_sh() -> None:
    # buildah and podman ignore SHELL when they build an OCI image (their default), so
    # a RUN runs under /bin/sh there: `[[` would fail as "not found" inside an `if`,
    # silently skipping the libvirt extra's packages.
    for keyword, rest in instructions():
        assert keyword != "SHELL", "RUN steps must not depend on SHELL"
        if keyword == "RUN":
            assert "[[" not in rest, rest
            assert "pipefail" not in rest, rest


def test_multi_stage_non_root_runtime_with_the_upstream_entrypoint() -> None:
    steps = instructions()
    stages = [rest for keyword, rest in steps if keyword == "FROM"]
    assert len(stages) == 2, "build stage + runtime stage"
    runtime = steps[[i for i, (k, _) in enumerate(steps) if k == "FROM"][1] :]
    users = [rest for keyword, rest in runtime if keyword == "USER"]
    assert users, "the runtime stage sets a user"
    assert not users[-1].startswith(("root", "0")), "and it is not root"
    assert ("ENTRYPOINT", '["cloud-controller-manager"]') in runtime
    # Nothing is built in the runtime stage: its one RUN installs libvirt's client
    # library, and only for an image built with the libvirt extra (EXTRAS=libvirt).
    runs = [rest for k, rest in runtime if k == "RUN"]
    assert len(runs) <= 1, runs
    for run in runs:
        assert run.startswith('case ",${EXTRAS}," in *,libvirt,*)'), run
        installed = run.split("--no-install-recommends", 1)[1].split("&&", 1)[0].split()
        assert installed == ["libvirt0"], run
        assert "gcc" not in run
        assert "-dev" not in run


def test_the_libvirt_extra_is_built_with_its_headers_in_the_build_stage() -> None:
    steps = instructions()
    build = steps[: [i for i, (k, _) in enumerate(steps) if k == "FROM"][1]]
    runs = " ".join(rest for k, rest in build if k == "RUN")
    assert "libvirt-dev" in runs
    assert "pkg-config" in runs
    assert '".${EXTRAS:+[${EXTRAS}]}"' in runs  # pip install ".[libvirt]" with EXTRAS=libvirt


def test_the_manifests_run_as_the_images_user() -> None:
    user = next(rest for keyword, rest in instructions() if keyword == "USER").split(":")[0]
    for name in ("deployment.yaml", "daemonset.yaml"):
        workload = next(yaml.safe_load_all((ROOT / "deploy" / name).read_text()))
        security = workload["spec"]["template"]["spec"]["securityContext"]
        assert str(security["runAsUser"]) == user
        assert security["runAsNonRoot"] is True

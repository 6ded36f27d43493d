"""The kube-ccm command line parses what users type and says what is wrong."""

from __future__ import annotations

import pytest

from kube_ccm.app.cli import build_parser


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("20", 20.0), ("20s", 20.0), ("5m", 300.0), ("1h", 3600.0), ("500ms", 0.5)],
)
def test_durations_accept_seconds_and_go_style_units(text: str, seconds: float) -> None:
    args = build_parser().parse_args(["controlplane", "--duration", text])
    assert args.duration == seconds


def test_a_bad_duration_is_a_usage_error_that_shows_valid_forms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["controlplane", "--duration", "soon"])
    assert exit_info.value.code == 2
    assert "e.g. 30s, 5m, 1h" in capsys.readouterr().err

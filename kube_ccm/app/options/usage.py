"""What ``kube-ccm run`` prints about its flags: ``--help``, the FLAG lines, the inert ones."""

from __future__ import annotations

import json
import textwrap
from typing import Final

from kube_ccm import __version__
from kube_ccm.app.options.flags import FLAGS, NOT_ACTING
from kube_ccm.app.options.pflag import Flag, ParsedFlags


def usage(program: str = "kube-ccm run") -> str:
    """``--help``: every flag by section, with its type, description and default."""
    lines = [
        f"Usage: {program} --cloud-provider=NAME [flags]",
        "",
        f"The Kubernetes cloud-controller-manager, in Python (kube-ccm {__version__}).",
        "The flags are upstream's, with its names, defaults and syntax, so a manifest",
        "written for a Go cloud-controller-manager works unchanged. Flags marked",
        f'"{NOT_ACTING}" are parsed and checked but change nothing yet.',
    ]
    section = None
    for flag in FLAGS:
        if flag.section != section:
            section = flag.section
            lines += ["", f"{section}:", ""]
        lines += _flag_usage(flag)
    return "\n".join(lines) + "\n"


def _flag_usage(flag: Flag) -> list[str]:
    """``  -v, --v Level  (default 0)`` then the description, wrapped."""
    short = f"-{flag.shorthand}, " if flag.shorthand else "    "
    kind = f" {flag.type.name}" if flag.type.name else ""
    note = f" [{NOT_ACTING}]" if not flag.acting else ""
    lines = [f"  {short}--{flag.name}{kind}  (default {flag.default_text()}){note}"]
    first, *more = flag.help.split("\n")
    lines += textwrap.wrap(
        first,
        _HELP_WIDTH,
        initial_indent=_INDENT,
        subsequent_indent=_INDENT,
        break_on_hyphens=False,
    )
    lines += [_INDENT + "  " + line for line in more]
    return lines


_INDENT: Final = " " * 10
_HELP_WIDTH: Final = 90


def effective_flags(parsed: ParsedFlags) -> list[str]:
    """``FLAG: --name="value"`` for every flag, sorted by name, as upstream logs them at -v=1."""
    return [
        f"FLAG: --{flag.name}={json.dumps(flag.show(parsed.values[flag.name]), ensure_ascii=False)}"
        for flag in sorted(FLAGS, key=lambda f: f.name)
    ]


def inert_flags(parsed: ParsedFlags) -> list[str]:
    """The flags set to a non-default value that nothing acts on yet (worth a warning)."""
    return [
        flag.name
        for flag in FLAGS
        if not flag.acting
        and flag.name in parsed.explicit
        and parsed.values[flag.name] != flag.default
    ]

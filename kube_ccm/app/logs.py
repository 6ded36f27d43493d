"""Logging as operators of Kubernetes components expect: ``-v`` levels, text or JSON.

``--logging-format=text`` (default) writes klog-like lines to stderr;
``--logging-format=json`` writes one JSON object per line with ``ts``, ``v``,
``level``, ``logger`` and ``msg``, as component-base's JSON format does.
Verbosity: ``-v=0..3`` logs info and above, ``-v>=4`` adds debug (every library's,
botocore's signed requests among them). Whatever the verbosity, every record passes
:class:`~kube_ccm.runtime.redaction.RedactingFilter` on the way out: credentials,
tokens, signatures and passwords are replaced by ``***`` (see that module).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

from kube_ccm.runtime.redaction import RedactingFilter


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["err"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["err"] = record.exc_text
        return json.dumps(entry, separators=(",", ":"))


class _TextFormatter(logging.Formatter):
    """``I1122 23:59:48.123456 logger] message``: klog's header, our logger names."""

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname[:1]
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        line = f"{level}{stamp}.{micros:06d} {record.name}] {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.exc_text:
            line += "\n" + record.exc_text
        return line


def configure_logging(verbosity: int = 0, fmt: str = "text", stream: TextIO | None = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
    for noisy in ("aiohttp.client", "aiohttp.internal"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

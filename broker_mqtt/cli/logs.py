"""How the command line sets up Python logging: ``--log-format text|json`` and ``--log-level``.

``json`` writes one JSON object per line to stderr: ``time`` (RFC 3339, UTC, milliseconds),
``level``, ``logger``, ``message``, and ``exception`` (the formatted traceback) when there is one.
An uncaught exception is logged the same way (logger ``broker_mqtt``, level CRITICAL), so a log
collector never sees a bare traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

import click

__all__ = ["JSONFormatter", "configure_logging", "logging_options", "LOG_FORMATS"]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_F = TypeVar("_F", bound=Callable[..., Any])


class JSONFormatter(logging.Formatter):
    """A record as one line of JSON (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(log_format: str = "text", level: str | int = "WARNING") -> None:
    """Send the root logger's records at ``level`` and above to stderr in ``log_format``
    (replacing any handler installed before), and, for json, uncaught exceptions too."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {LOG_FORMATS}, not {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    if log_format == "json":
        sys.excepthook = _log_uncaught


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("broker_mqtt").critical("uncaught %s: %s", kind.__name__, exc, exc_info=(kind, exc, tb))


def logging_options(command: _F) -> _F:
    """Adds ``--log-format`` (env BROKER_MQTT_LOG_FORMAT) and ``--log-level`` (env
    BROKER_MQTT_LOG_LEVEL), which configure logging before the command runs."""

    def apply(ctx: click.Context, param: click.Parameter, value: str) -> str:
        ctx.meta[f"broker_mqtt.{param.name}"] = value
        fmt = ctx.meta.get("broker_mqtt.log_format")
        level = ctx.meta.get("broker_mqtt.log_level")
        if fmt is not None and level is not None:  # both parsed: configure once
            configure_logging(fmt, level)
        return value

    command = click.option("--log-level", "log_level", envvar="BROKER_MQTT_LOG_LEVEL", default="WARNING",
                           show_default=True, expose_value=False, callback=apply, is_eager=True,
                           type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
                           help="Log records at this level and above. Env BROKER_MQTT_LOG_LEVEL.")(command)
    command = click.option("--log-format", "log_format", envvar="BROKER_MQTT_LOG_FORMAT", default="text",
                           show_default=True, expose_value=False, callback=apply, is_eager=True,
                           type=click.Choice(LOG_FORMATS),
                           help="text, or json: one JSON object per line (time, level, logger, message, "
                           "exception). Env BROKER_MQTT_LOG_FORMAT.")(command)
    return command


def log_format() -> str:
    """The ``--log-format`` of the running command ("text" outside one)."""
    ctx = click.get_current_context(silent=True)
    return "text" if ctx is None else str(ctx.meta.get("broker_mqtt.log_format", "text"))

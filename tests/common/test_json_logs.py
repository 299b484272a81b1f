"""One JSON log line per record, the same shape for the agent and the coordinator: time,
level, logger, the process's fixed fields (the agent's node), msg, then `extra={...}`."""

from __future__ import annotations

import io
import json
import logging
import sys

from gpuctl.common import json_logs


def record(**extra: object) -> logging.LogRecord:
    made = logging.LogRecord("coordinator.x", logging.INFO, "f.py", 1, "hello %s", ("you",), None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_line_carries_the_extra_fields_and_utc_time() -> None:
    line = json.loads(json_logs.JsonLinesFormatter().format(record(gpudriver="gpu-policy")))
    assert line == {
        "time": line["time"],
        "level": "info",
        "logger": "coordinator.x",
        "msg": "hello you",
        "gpudriver": "gpu-policy",
    }
    assert line["time"].endswith("+00:00")
    assert list(line)[:4] == ["time", "level", "logger", "msg"]


def test_fixed_fields_come_before_the_message_on_every_line() -> None:
    formatter = json_logs.JsonLinesFormatter({"node": "gpu-1"})
    line = json.loads(formatter.format(record(attempt=2)))
    assert list(line) == ["time", "level", "logger", "node", "msg", "attempt"]
    assert (line["node"], line["attempt"]) == ("gpu-1", 2)


def test_a_value_json_cannot_hold_is_its_text_and_an_exception_its_traceback() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        failed = logging.LogRecord("a", logging.ERROR, "f.py", 1, "m", (), sys.exc_info())
    failed.where = ("x", 1)
    line = json.loads(json_logs.JsonLinesFormatter().format(failed))
    assert line["where"] == "('x', 1)"
    assert line["exception"].startswith("Traceback")
    assert "ValueError: bad" in line["exception"]


def test_configure_sends_the_root_logger_to_the_stream_and_quiets_libraries() -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    try:
        json_logs.configure("debug", fixed={"node": "n"}, quiet=("chatty",), stream=stream)
        logging.getLogger("chatty").info("not shown")
        logging.getLogger("chatty").warning("shown")
        logging.getLogger("mine").debug("mine too")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("chatty").setLevel(logging.NOTSET)
    lines = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert [(x["logger"], x["msg"], x["node"]) for x in lines] == [
        ("chatty", "shown", "n"),
        ("mine", "mine too", "n"),
    ]

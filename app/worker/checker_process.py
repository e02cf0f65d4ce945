"""The checker's process: judges structured answers sent by its worker (`checker.py`), one at a
time, under a memory cap, and answers each with its verdict (`structured.judge`).

Started as `python -m app.worker.checker_process MEMORY_BYTES`, with no secret in its
environment. Each message, both ways, is a 4-byte big-endian length and that much UTF-8 JSON:
first `{"kind": "ready"}` from the process once it has imported what it judges with (a check's
deadline starts after it: a process starting on a busy machine is not a costly schema), then
requests `{"answer": text, "schema": output schema}`, each answered `{"kind": "matched" |
"mismatch" | "unjudged", "error": text}`. Past its memory the check is answered `unjudged` and
the process exits (its worker starts another); past its deadline its worker kills it.
"""

from __future__ import annotations

import json
import resource
import struct
import sys
from typing import IO, Any

HEADER = struct.Struct(">I")
READY = {"kind": "ready"}
MEMORY_ERROR = "the check needed more than its {mb} MB of memory"


def read_message(stream: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    body = stream.read(size)
    if len(body) < size:
        return None
    return json.loads(body)


def write_message(stream: IO[bytes], message: Any) -> None:
    body = json.dumps(message).encode()
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def main() -> None:
    memory = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    from app.worker.structured import UNJUDGED_ERROR, Matched, Mismatch, judge

    source, sink = sys.stdin.buffer, sys.stdout.buffer
    write_message(sink, READY)
    while (request := read_message(source)) is not None:
        try:
            verdict = judge(request["answer"], request["schema"])
        except MemoryError:
            why = MEMORY_ERROR.format(mb=memory >> 20)
            write_message(sink, {"kind": "unjudged", "error": UNJUDGED_ERROR.format(why=why)})
            return  # (what is left of this process is not worth keeping)
        if isinstance(verdict, Matched):
            write_message(sink, {"kind": "matched"})
        else:
            kind = "mismatch" if isinstance(verdict, Mismatch) else "unjudged"
            write_message(sink, {"kind": kind, "error": verdict.error})


if __name__ == "__main__":
    main()

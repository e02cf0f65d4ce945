"""The HTTP floor of the API benchmark: a bare FastAPI route under uvicorn with the settings of
`chatworker serve` (`app/serve.py`: one process, the default loop and HTTP parser, log level info
with its access log), and nothing else: no database, no auth, no middleware.

    python -m bench.floor_server PORT
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI

app = FastAPI(docs_url=None, redoc_url=None)


@app.get("/floor")
async def floor() -> dict[str, str]:
    return {"status": "ok"}


if __name__ == "__main__":
    uvicorn.run(
        app, host="127.0.0.1", port=int(sys.argv[1]), log_level="info", timeout_graceful_shutdown=5
    )

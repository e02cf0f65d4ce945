"""`python -m app.cli`: the `chatworker` command line."""

from app.cli import run

run()

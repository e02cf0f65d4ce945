"""The project's exceptions, in one tree.

    ChatWorkerError                 base of everything raised on purpose here
    ├── ConfigError                 a setting is invalid; the message names the variable
    └── DatabaseUnavailable         the database cannot be reached or migrated

Caller mistakes (bad ids, busy conversations, bad input) join this tree with the web-app API.
"""

from __future__ import annotations


class ChatWorkerError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(ChatWorkerError):
    """A setting is invalid; the message names the environment variable to fix."""


class DatabaseUnavailable(ChatWorkerError):
    """The database cannot be reached or migrated."""

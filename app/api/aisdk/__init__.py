"""The AI SDK's chat transport (`useChat`) over our turns: `routes.py` the routes, `requests.py`
the body read, `chunks.py` the UI message stream (pure)."""

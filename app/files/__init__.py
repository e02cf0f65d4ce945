"""Files, as both sides handle them: the types read from their bytes (`media`), which models take
which kinds (`capabilities`), and their SQL both stores share (`store`). Imports neither
`app.client` nor `app.worker` (`tests/boundaries.py`)."""

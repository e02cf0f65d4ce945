"""Files, as both sides handle them: the types read from their bytes (`media`) and their SQL both
stores share (`store`); which models take which kinds is `app/model_profile.py`. Imports neither
`app.client` nor `app.worker` (`tests/boundaries.py`)."""

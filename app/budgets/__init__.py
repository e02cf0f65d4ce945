"""Budgets, as both sides read them: what an owner or one conversation has spent and whether a
budget is used up (`store`). Imports neither `app.client` nor `app.worker` (`tests/boundaries.py`);
setting and listing budgets is the web side's (`app/client/store/budgets.py`)."""

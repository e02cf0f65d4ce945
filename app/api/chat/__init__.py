"""OpenAI's Chat Completions over the durable turns: `routes.py` has the map."""

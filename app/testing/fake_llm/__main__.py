"""`python -m app.testing.fake_llm [--host H] [--port P]`: serve the fake LLM; prints LISTENING."""

from app.testing.fake_llm.server import main

main()

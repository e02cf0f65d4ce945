"""Test doubles that ship with chatworker, for its own tests and benchmarks and for the apps built
on it: in-process fakes of the model and the tools (`fakes`), a scriptable OpenAI-compatible server
(`fake_llm`), real `chatworker worker` processes (`worker_process`), and the PostgreSQL and Redis
the tests run against (`services`). Nothing here is imported by the worker or the client."""

"""All SQL of the web side, by concept (as `app/worker/store/` is the worker's): the journal every
write goes through (`journal`: the row lock, events appended), reads, turns, the message tree
(`branches`), answers, cancels,
owners' running turns, budgets, API keys and webhooks."""

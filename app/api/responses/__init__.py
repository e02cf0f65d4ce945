"""OpenAI's Responses API over our turns (`/v1/responses`): `ids` (what a response id names),
`requests` and `tools_given` (a create request read), `translate` (a turn cut into responses and
items), `objects` (the response object), `stream` and `output_events` (a response's numbered
events), `errors` (OpenAI's error shape), `routes` with `create` (what a create does), `lookup`
(a response found, waited for) and `sse` (its stream)."""

"""OpenAI's Responses API over our turns (`/v1/responses`): `ids` (what a response id names),
`requests` (a create request read), `translate` (a turn cut into responses and items), `objects`
(the response object), `errors` (OpenAI's error shape), `routes`."""

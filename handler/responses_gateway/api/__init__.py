"""HTTP surface: the starlette app, auth, routes and OpenAI-shaped error rendering."""

"""Background responses: the worker that runs them and the API-side start/follow/cancel."""

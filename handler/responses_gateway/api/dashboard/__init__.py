"""The admin dashboard: three static files shipped in the package, served as they are.

The page holds no data and no secret: it asks for an admin key, keeps it in the tab's
sessionStorage, and reads everything from the admin routes (api/admin_routes.py) with it.
Vanilla JS and inline SVG, no build step, nothing fetched from elsewhere (the CSP says so).
Imported only when the dashboard is asked for (api/app.py), so API cold starts never pay.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from responses_gateway.errors import not_found

STATIC = Path(__file__).resolve().parent / "static"
FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


@cache
def _read(name: str) -> bytes:
    return (STATIC / name).read_bytes()


def serve(request: Request) -> Response:
    """``/dashboard`` (the page) or ``/dashboard/<file>`` (one of ``FILES``)."""
    name = request.path_params.get("name", "index.html")
    if name not in FILES:
        raise not_found(f"Invalid URL (GET {request.url.path})")
    return Response(_read(name), media_type=FILES[name], headers=HEADERS)

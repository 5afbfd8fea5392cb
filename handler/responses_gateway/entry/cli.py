"""``responses-gateway``: serve locally, or create the DynamoDB table.

    responses-gateway serve [--host 127.0.0.1] [--port 8000]
    responses-gateway store init [--table NAME]
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="responses-gateway", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway under uvicorn")
    serve.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    serve.add_argument("--log-level", default=os.environ.get("GATEWAY_LOG_LEVEL", "info").lower())
    store = commands.add_parser("store", help="manage the response store")
    store_commands = store.add_subparsers(dest="store_command", required=True)
    init = store_commands.add_parser("init", help="create the DynamoDB table (with TTL)")
    init.add_argument("--table", default=None,
                      help="table name (default: the one in GATEWAY_STORE=dynamodb:TABLE)")
    args = parser.parse_args(argv)

    if args.command == "serve":
        import uvicorn

        from responses_gateway.api.app import create_app
        from responses_gateway.config import Settings

        settings = Settings.from_env()
        # A WebSocket message up to twice the body limit reaches the app, which answers one
        # above the limit with an ``error`` event; uvicorn closes (1009) beyond that.
        ws_max_size = 2 * settings.max_body_bytes if settings.max_body_bytes else 2**31
        uvicorn.run(create_app(settings), host=args.host, port=args.port,
                    log_level=args.log_level, timeout_graceful_shutdown=5,
                    ws_max_size=ws_max_size)
        return 0
    table = args.table
    if table is None:
        kind, _, target = os.environ.get("GATEWAY_STORE", "").partition(":")
        table = target if kind == "dynamodb" else None
    if not table:
        print("give --table NAME or set GATEWAY_STORE=dynamodb:NAME", file=sys.stderr)
        return 2
    from responses_gateway.store.dynamodb import create_table

    create_table(table)
    print(f"created DynamoDB table {table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

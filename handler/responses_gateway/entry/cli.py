"""responses-gateway: serve the OpenAI Responses API locally, or create the DynamoDB table.

    responses-gateway serve [--host 127.0.0.1] [--port 8000] [--log-level info]
    responses-gateway store init [--table NAME]
    responses-gateway --version

Every setting is an environment variable (GATEWAY_UPSTREAM_URL, GATEWAY_STORE, ...; see the
README's Configuration table); HOST and PORT give serve's defaults. A setting it cannot use
stops it with one line naming the variable, and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

PROG = "responses-gateway"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        return _store_init(args.table)
    except ValueError as exc:  # the settings' one-line errors (config.SettingsError, secrets)
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway under uvicorn")
    # Defaults from HOST / PORT / GATEWAY_LOG_LEVEL are read after parsing: a bad one must not
    # break --help, and is reported like every other setting.
    serve.add_argument("--host", default=None, help="address to listen on (HOST, 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=None, help="port (PORT, 8000)")
    serve.add_argument("--log-level", default=None, type=str.lower,
                       help="log level (GATEWAY_LOG_LEVEL, info)")
    store = commands.add_parser("store", help="manage the response store")
    store_commands = store.add_subparsers(dest="store_command", required=True)
    init = store_commands.add_parser("init", help="create the DynamoDB table (with TTL)")
    init.add_argument("--table", default=None,
                      help="table name (default: the one in GATEWAY_STORE=dynamodb:TABLE)")
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PROG)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _port(text: str, name: str = "--port") -> int:
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{name} must be a port number (1-65535), not {text!r}")
    return int(text)


def _serve(args: argparse.Namespace) -> int:
    from responses_gateway.config import LOG_LEVELS, SettingsError, settings_from_env

    port = args.port
    if port is None:
        try:
            port = _port(os.environ.get("PORT") or "8000", "PORT")
        except argparse.ArgumentTypeError as exc:
            raise SettingsError(str(exc)) from None
    settings = settings_from_env()
    level = args.log_level or settings.log_level
    if level not in LOG_LEVELS:
        raise SettingsError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    if args.log_level:  # the flag wins over GATEWAY_LOG_LEVEL for the gateway's lines too
        settings = settings.replace(log_level=level)

    import uvicorn

    from responses_gateway.api.app import create_app

    # A WebSocket message up to twice the body limit reaches the app, which answers one
    # above the limit with an ``error`` event; uvicorn closes (1009) beyond that.
    ws_max_size = 2 * settings.max_body_bytes if settings.max_body_bytes else 2**31
    uvicorn.run(create_app(settings, check_upstream=True),
                host=args.host or os.environ.get("HOST") or "127.0.0.1", port=port,
                log_level=level, timeout_graceful_shutdown=5, ws_max_size=ws_max_size)
    return 0


def _store_init(table: str | None) -> int:
    if table is None:
        from responses_gateway.platform import dynamodb_table

        table = dynamodb_table(os.environ.get("GATEWAY_STORE", ""))
    if not table:
        print("give --table NAME or set GATEWAY_STORE=dynamodb:NAME", file=sys.stderr)
        return 2
    from responses_gateway.store.dynamodb import create_table

    create_table(table)
    print(f"created DynamoDB table {table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Secret settings by reference: Secrets Manager or SSM, read through Powertools Parameters.

A secret setting (one declared ``secret=True`` in settings.py: ``GATEWAY_UPSTREAM_API_KEY``,
``GATEWAY_API_KEYS``, ``GATEWAY_SEAL_KEY``, ...; the README's ``_SECRET_ARN`` row lists them
all) or a variable a ``GATEWAY_ROUTES`` deployment's ``api_key`` names is taken from, in
order:

1. the variable itself (local use, tests);
2. ``<NAME>_SECRET_ARN``: a Secrets Manager secret. ``ARN#field`` picks one field of a JSON
   secret, so one secret can hold them all (what template.yaml does);
3. ``<NAME>_PARAMETER``: an SSM parameter name (SecureString decrypted), same ``#field`` rule.

Powertools caches each fetched value (``POWERTOOLS_PARAMETERS_MAX_AGE``, 300 s by default), so
the settings in one secret cost one call. This module (and boto3) is imported only when a
reference is configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson


class SecretError(ValueError):
    """A referenced secret could not be read or does not hold the named field."""


def resolve(name: str, env: Mapping[str, str]) -> str | None:
    """The value of secret setting ``name`` from its reference, or None if it has none."""
    arn = env.get(name + "_SECRET_ARN")
    if arn:
        reference, _, key = arn.partition("#")
        return _field(_fetch_secret(reference), key, name + "_SECRET_ARN")
    parameter = env.get(name + "_PARAMETER")
    if parameter:
        reference, _, key = parameter.partition("#")
        return _field(_fetch_parameter(reference), key, name + "_PARAMETER")
    return None


def _fetch_secret(arn: str) -> str:
    from aws_lambda_powertools.utilities import parameters

    try:
        value: Any = parameters.get_secret(arn)
    except Exception as exc:  # botocore's errors, Powertools' GetParameterError
        raise SecretError(f"could not read secret {arn}: {exc}") from exc
    return value.decode() if isinstance(value, bytes) else str(value)


def _fetch_parameter(name: str) -> str:
    from aws_lambda_powertools.utilities import parameters

    try:
        value: Any = parameters.get_parameter(name, decrypt=True)
    except Exception as exc:
        raise SecretError(f"could not read SSM parameter {name}: {exc}") from exc
    return str(value)


def _field(value: str, key: str, variable: str) -> str | None:
    """The whole value, or one field of it when the reference names one (``#field``)."""
    if not key:
        return value.strip() or None
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise SecretError(f"{variable} names field {key!r}, but the secret is not JSON") from None
    if not isinstance(document, dict):
        raise SecretError(f"{variable} names field {key!r}, but the secret is not a JSON object")
    field = document.get(key)
    if field is None or field == "":
        return None  # an optional setting left out of the shared secret
    if isinstance(field, list):  # "api_keys": ["k1", "k2"]
        return ",".join(str(item) for item in field)
    if isinstance(field, dict):  # "api_keys": {"team-a": "k1"}: the setting's JSON form
        return orjson.dumps(field).decode()
    return str(field)

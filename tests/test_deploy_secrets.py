"""Secret settings by reference (Secrets Manager, SSM) as template.yaml configures them,
against a moto server on 127.0.0.1; plain variables still win locally."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest

from responses_gateway.config import settings_from_env
from responses_gateway.secrets import SecretError
from tests.helpers.moto_server import aws_env, moto_server, reset


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def aws(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    from aws_lambda_powertools.utilities.parameters import base

    env = aws_env(endpoint)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    base.clear_caches()  # providers keep a client (and its endpoint) and cached values
    yield env
    base.clear_caches()
    reset(endpoint)


def put_secret(name: str, value: str) -> str:
    client = boto3.session.Session().client("secretsmanager")
    return client.create_secret(Name=name, SecretString=value)["ARN"]


def test_one_json_secret_holds_all_three_settings(aws: dict[str, str]) -> None:
    arn = put_secret("gateway", json.dumps(
        {"upstream_api_key": "sk-upstream", "api_keys": ["k1", "k2"], "seal_key": "seal-me"}
    ))
    settings = settings_from_env({
        **aws,
        "GATEWAY_UPSTREAM_API_KEY_SECRET_ARN": f"{arn}#upstream_api_key",
        "GATEWAY_API_KEYS_SECRET_ARN": f"{arn}#api_keys",
        "GATEWAY_SEAL_KEY_SECRET_ARN": f"{arn}#seal_key",
    })
    assert settings.upstream_api_key == "sk-upstream"
    assert settings.api_keys == ("k1", "k2")
    assert settings.seal_key == "seal-me"


def test_missing_optional_field_and_empty_references(aws: dict[str, str]) -> None:
    arn = put_secret("gateway-min", json.dumps({"api_keys": "a, b"}))
    settings = settings_from_env({
        **aws,
        "GATEWAY_UPSTREAM_API_KEY_SECRET_ARN": f"{arn}#upstream_api_key",
        "GATEWAY_API_KEYS_SECRET_ARN": f"{arn}#api_keys",
        "GATEWAY_SEAL_KEY_SECRET_ARN": "",  # what the template sets without a secret
    })
    assert settings.upstream_api_key is None and settings.seal_key is None
    assert settings.api_keys == ("a", "b")


def test_plain_variable_wins_over_a_reference(aws: dict[str, str]) -> None:
    settings = settings_from_env({
        **aws,
        "GATEWAY_UPSTREAM_API_KEY": "local-key",
        "GATEWAY_UPSTREAM_API_KEY_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:1:secret:none",
    })
    assert settings.upstream_api_key == "local-key"  # and the secret was never read


@pytest.mark.slow
def test_whole_secret_and_ssm_parameter(aws: dict[str, str]) -> None:
    arn = put_secret("upstream-plain", "sk-plain\n")
    ssm = boto3.session.Session().client("ssm")
    ssm.put_parameter(Name="/gateway/api-keys", Value="p1,p2", Type="SecureString")
    ssm.put_parameter(Name="/gateway/all", Value=json.dumps({"seal_key": "s"}), Type="String")
    settings = settings_from_env({
        **aws,
        "GATEWAY_UPSTREAM_API_KEY_SECRET_ARN": arn,
        "GATEWAY_API_KEYS_PARAMETER": "/gateway/api-keys",
        "GATEWAY_SEAL_KEY_PARAMETER": "/gateway/all#seal_key",
    })
    assert settings.upstream_api_key == "sk-plain"
    assert settings.api_keys == ("p1", "p2")
    assert settings.seal_key == "s"


def test_errors_name_the_variable_and_the_secret(aws: dict[str, str]) -> None:
    arn = put_secret("not-json", "just text")
    with pytest.raises(SecretError, match="GATEWAY_API_KEYS_SECRET_ARN names field 'api_keys'"):
        settings_from_env({**aws, "GATEWAY_API_KEYS_SECRET_ARN": f"{arn}#api_keys"})
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:absent-AbCdEf"
    with pytest.raises(SecretError, match=r"could not read secret .*absent"):
        settings_from_env({**aws, "GATEWAY_SEAL_KEY_SECRET_ARN": missing})


def test_named_keys_in_the_secret(aws: dict[str, str]) -> None:
    """Issue 44: the secret's ``api_keys`` may name each key (an object), as the variable's
    JSON form does; so may the whole secret."""
    from responses_gateway.tenants import names_by_tenant, tenant_of_key

    arn = put_secret("gateway-named", json.dumps(
        {"api_keys": {"team-a": "sk-team-a-0123456789", "team-b": "sk-team-b-0123456789"}}))
    settings = settings_from_env({**aws, "GATEWAY_API_KEYS_SECRET_ARN": f"{arn}#api_keys"})
    assert settings.api_keys == ("sk-team-a-0123456789", "sk-team-b-0123456789")
    assert names_by_tenant(settings.api_keys) == {
        tenant_of_key("sk-team-a-0123456789"): "team-a",
        tenant_of_key("sk-team-b-0123456789"): "team-b"}
    whole = put_secret("gateway-named-whole", json.dumps({"ops": "sk-ops-0123456789ab"}))
    settings = settings_from_env({**aws, "GATEWAY_API_KEYS_SECRET_ARN": whole})
    assert settings.api_keys == ("sk-ops-0123456789ab",)
    assert settings.api_keys.names == {"sk-ops-0123456789ab": "ops"}  # type: ignore[attr-defined]

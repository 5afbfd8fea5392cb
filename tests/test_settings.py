"""The settings' declarations (settings.py) and what is derived from them: the reading loop
(config.py), the README's tables (scripts/settings_table.py), the secrets by reference, the
warning about a ``GATEWAY_*`` variable that is no setting. template.yaml's side is
tests/test_deploy_template.py::test_every_setting_is_configured."""

from __future__ import annotations

import importlib.util
import typing
from pathlib import Path
from typing import Any

import pytest

from responses_gateway import config, secrets
from responses_gateway.config import SettingsError, settings_from_env
from responses_gateway.settings import DEFAULTS, SECTIONS, Settings, declared

ROOT = Path(__file__).resolve().parent.parent


def _table_script() -> Any:
    spec = importlib.util.spec_from_file_location("settings_table",
                                                  ROOT / "scripts" / "settings_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_field_is_declared_once_with_a_known_format_and_section() -> None:
    settings = declared()
    fields = set(DEFAULTS) - {"unknown_variables"}
    assert set(settings) == fields
    envs = [s.env for s in settings.values()]
    assert len(set(envs)) == len(envs)
    sections = {s.key for s in SECTIONS}
    for name, setting in settings.items():
        assert setting.env.startswith("GATEWAY_"), name
        assert setting.parse in config.FORMATS, f"{name}: no parser for {setting.parse!r}"
        assert setting.section in sections, name
        assert setting.doc.strip() and "\n" not in setting.doc and "|" not in setting.doc
        assert setting.parse != "choice" or setting.choices, name


def test_routes_and_limits_have_their_real_types() -> None:
    """(Knowledge bases stay ``Any``: their type lives in vectors/, above settings.)"""
    from responses_gateway.backends.route_config import Routes
    from responses_gateway.key_limits import Limits
    from responses_gateway.prices import Prices

    hints = typing.get_type_hints(Settings, localns={"Routes": Routes, "Limits": Limits,
                                                     "Prices": Prices})
    assert hints["routes"] == Routes | None
    assert hints["limits"] == Limits | None
    assert hints["prices"] == Prices | None


def test_the_readme_tables_are_the_declarations() -> None:
    script = _table_script()
    assert script.main(["--check"]) == 0, "run python3 scripts/settings_table.py"
    readme = (ROOT / "README.md").read_text()
    for setting in declared().values():
        assert f"| `{setting.env}` |" in readme
    (row,) = [line for line in readme.splitlines() if "_SECRET_ARN` / `GATEWAY_<NAME>" in line]
    named = {s.env.removeprefix("GATEWAY_") for s in declared().values() if s.secret}
    assert len(named) == 7
    assert all(f"`{name}`" in row for name in named)


def test_a_stale_readme_table_is_reported() -> None:
    script = _table_script()
    text = (ROOT / "README.md").read_text()
    row = "| `GATEWAY_CONNECT_TIMEOUT` | `10` |"
    stale = text.replace(row, row.replace("10", "11"))
    assert stale != text and script.rewritten(stale) == text


def test_every_secret_setting_may_come_from_a_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings declared secret=True are the ones read by reference, each of them."""
    asked: list[str] = []

    def resolve(name: str, env: Any) -> str:
        asked.append(name)
        return f"from-{name}"

    monkeypatch.setattr(secrets, "resolve", resolve)
    secret = {n: s for n, s in declared().items() if s.secret}
    env = {s.env + "_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:1:secret:s"
           for s in secret.values()}
    env["GATEWAY_STORE_SECRET_ARN"] = "arn:aws:secretsmanager:us-east-1:1:secret:s"
    settings = settings_from_env(env)
    assert sorted(asked) == sorted(s.env for s in secret.values())
    for name, setting in secret.items():
        value = getattr(settings, name)
        assert value in (f"from-{setting.env}", (f"from-{setting.env}",)), name
        assert f"from-{setting.env}" not in repr(settings)  # secrets stay out of logs
    assert settings.store == "sqlite:gateway.db"  # not a secret: its reference is unknown
    assert [name for name, _ in settings.unknown_variables] == ["GATEWAY_STORE_SECRET_ARN"]


def test_a_misspelt_variable_names_the_closest_setting() -> None:
    settings = settings_from_env({
        "GATEWAY_UPSTREAM_ULR": "http://127.0.0.1:9/v1",
        "GATEWAY_MAX_RETRYS": "3",
        "GATEWAY_ZZZZZZZZ": "x",
        # none of these is unknown: a setting, a secret's reference, a variable a route's
        # api_key names (and its reference), a test-only variable
        "GATEWAY_UPSTREAM_URL": "http://127.0.0.1:8/v1",
        "GATEWAY_SEAL_KEY_PARAMETER": "",
        "GATEWAY_ROUTES": '{"m": [{"model": "x", "api_key": "GATEWAY_TEAM_KEY"}]}',
        "GATEWAY_TEAM_KEY": "k",
        "GATEWAY_TEAM_KEY_PARAMETER": "",
        "GATEWAY_TEST_IMAGE_ALLOW_HOSTS": "",
    })
    assert settings.unknown_variables == (
        ("GATEWAY_MAX_RETRYS", "GATEWAY_MAX_RETRIES"),
        ("GATEWAY_UPSTREAM_ULR", "GATEWAY_UPSTREAM_URL"),
        ("GATEWAY_ZZZZZZZZ", None),
    )
    assert settings.upstream_url == "http://127.0.0.1:8/v1" and settings.max_retries == 2
    assert settings_from_env({}).unknown_variables == ()


def test_floors_and_dependent_formats_come_from_the_declarations() -> None:
    settings = settings_from_env({"GATEWAY_EMBEDDING_BATCH": "0", "GATEWAY_MAX_FILTER_DEPTH": "0",
                                  "GATEWAY_ROUTES": '{"m": ["x"]}', "GATEWAY_BACKEND": "Bedrock"})
    assert settings.embedding_batch == 1  # floor=1
    assert settings.max_filter_depth == 0  # no floor
    assert settings.routes is not None and settings.routes.routes["m"][0].kind == "bedrock"
    with pytest.raises(SettingsError, match="GATEWAY_EMBEDDING_URL must be an http"):
        settings_from_env({"GATEWAY_EMBEDDING_URL": "localhost:9/v1"})


def test_the_websocket_management_url_is_a_setting() -> None:
    assert settings_from_env({}).ws_management_url is None
    url = "http://127.0.0.1:9/prod"
    assert settings_from_env({"GATEWAY_WS_MANAGEMENT_URL": url + "/"}).ws_management_url == url
    with pytest.raises(SettingsError, match="GATEWAY_WS_MANAGEMENT_URL: must be an http"):
        settings_from_env({"GATEWAY_WS_MANAGEMENT_URL": "example.com/prod"})

"""Named keys (issue 44): ``GATEWAY_API_KEYS`` as JSON ``{"team-a": "sk-…"}`` beside the comma
list; its errors at start name a position, never a key; a real ``responses-gateway serve``
refuses a bad one in one line and, with good ones, logs each response's tenant id and name,
never the key. (The admin routes, usage API and dashboard with names: tests/test_dashboard.py;
the secret's JSON: tests/test_deploy_secrets.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from openai import OpenAI

from responses_gateway.api.auth import Authenticator
from responses_gateway.config import SettingsError, settings_from_env
from responses_gateway.tenants import names_by_tenant, tenant_of_key
from tests.helpers.scripted_upstream import ScriptedUpstream
from tests.test_running_it import clean_env, serve

KEY_A, KEY_B = "sk-team-a-secret-0123456789", "sk-team-b-secret-0123456789"


def test_the_json_form_names_each_key() -> None:
    settings = settings_from_env({"GATEWAY_API_KEYS": json.dumps(
        {"team-a": KEY_A, "ops on call": KEY_B})})
    assert settings.api_keys == (KEY_A, KEY_B)
    names = {tenant_of_key(KEY_A): "team-a", tenant_of_key(KEY_B): "ops on call"}
    assert names_by_tenant(settings.api_keys) == names
    auth = Authenticator(settings.api_keys)
    assert auth.names == names and auth.tenant(f"Bearer {KEY_B}") == tenant_of_key(KEY_B)
    assert KEY_A not in repr(settings)
    plain = settings_from_env({"GATEWAY_API_KEYS": f"{KEY_A}, {KEY_B}"})
    assert plain.api_keys == (KEY_A, KEY_B) and names_by_tenant(plain.api_keys) == {}
    # the admin keys' check still sees the named keys
    with pytest.raises(SettingsError, match="share a key"):
        settings_from_env({"GATEWAY_API_KEYS": json.dumps({"a": KEY_A}),
                           "GATEWAY_ADMIN_KEYS": KEY_A})


@pytest.mark.parametrize(("value", "words"), [
    ('{"team-a": "%A", "team-a": "%B"}', "the name of the 2nd entry is given twice"),
    ('{"%A": "team-a"}', "the key of the 1st entry is shorter than 16 characters; the JSON form is "
                         '{"name": "key"}'),  # name and key the wrong way round
    ('{"team/a": "%A"}', "the name of the 1st entry is not a name (1 to 64"),
    ('{"a": "%A", "b": "%A"}', "the 2nd entry has the same key as the 1st"),
    ('{"a": "%A", "b": 7}', "the key of the 2nd entry must be a non-empty string"),
    ('{"a": " %A"}', "without surrounding spaces"),
    ('{"' + "n" * 65 + '": "%A"}', "is not a name"),
    ('{"": "%A"}', "is not a name"),
    ("{}", "must be an object naming at least one key"),
    ('{"a": "%A",}', "not valid JSON"),
    ('["%A"]', "a JSON array is not accepted"),
])
def test_bad_json_forms_are_refused_naming_no_key(value: str, words: str) -> None:
    text = value.replace("%A", KEY_A).replace("%B", KEY_B)
    with pytest.raises(SettingsError) as refused:
        settings_from_env({"GATEWAY_API_KEYS": text})
    message = str(refused.value)
    assert message.startswith("GATEWAY_API_KEYS: ") and words in message, message
    assert KEY_A not in message and KEY_B not in message
    assert "\n" not in message


@pytest.mark.slow
def test_serve_refuses_a_bad_form_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "responses_gateway", "serve"],
                          env=clean_env(GATEWAY_API_KEYS=json.dumps({"a": KEY_A, "b": KEY_A})),
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("responses-gateway: GATEWAY_API_KEYS: the 2nd entry has the same key")
    assert KEY_A not in done.stderr


@pytest.mark.slow
def test_serve_logs_the_name_and_tenant_never_the_key(tmp_path: Path) -> None:
    with ScriptedUpstream() as upstream, serve(
            tmp_path, GATEWAY_UPSTREAM_URL=upstream.base_url,
            GATEWAY_API_KEYS=json.dumps({"team-a": KEY_A, "team-b": KEY_B})) as served:
        client = OpenAI(base_url=served.base + "/v1", api_key=KEY_B, max_retries=0)
        response = client.responses.create(model="m", input="hello")
        line = served.finished(response.id)["response"]
        assert line["api_key_id"] == tenant_of_key(KEY_B)
        assert line["api_key_name"] == "team-b"
        text = served.text()
        assert KEY_A not in text and KEY_B not in text

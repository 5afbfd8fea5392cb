"""A server tool declares itself (issue 41): one package and one registration line.

- No module outside a server tool's own package (and tools/registry.py, which lists the
  packages) names the tool: its tool types, item types, ``tool_choice`` names, ``include``
  values and ``tool_usage`` keys are read from its registration (counted on the source with
  ``ast``).
- A tool that exists only in the tests (tests/helpers/fake_server_tool.py), registered through
  ``registry.register`` in a fresh gateway process, is served end to end: its item type and id
  prefix, its ``include`` value, its ``tool_choice`` (and the echo), its ``tool_usage`` zero and
  its items sent back as input, and, switched off, the refusal naming what turns it on.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from responses_gateway.tools import client_tools, registry
from responses_gateway.tools.declaration import Registration

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "handler" / "responses_gateway"

#: Where a tool's names may appear besides its package: the registry, which lists the packages.
ANYWHERE = {"tools/registry.py"}


def _names(registration: Registration) -> set[str]:
    """Every string that names the tool: what the rest of the gateway must not spell out.
    A type it shares with a tool the client runs (hosted shell's ``shell``, ``shell_call``:
    ``Registration.serves``, ``ItemType.shared``) names the client's tool there, and the
    client tools' table (tools/client_tools.py) holds it."""
    client = {*client_tools.CLIENT_TOOL_TYPES, *client_tools.CALL_TYPES,
              *client_tools.OUTPUT_TYPES}
    shared = {t for t in registration.tool_types if registration.serves and t in client} | {
        item.type for item in registration.items if item.shared and item.type in client}
    return {registration.kind, *registration.tool_types, *registration.item_types,
            *registration.choices, *registration.choices.values(), *registration.includes,
            *registration.tool_usage} - shared


def _home(registration: Registration) -> set[str]:
    """The files a tool's names may appear in: its package, where its class lives."""
    module = registration.target.partition(":")[0]
    package = module.removeprefix("responses_gateway.").split(".")[:2]
    return {str(p.relative_to(PACKAGE)) for p in (PACKAGE / Path(*package)).rglob("*.py")}


def _literals(path: Path) -> list[tuple[str, int]]:
    """The module's string literals, less the keys of settings sections (``Section("mcp",
    ...)`` in settings.py): a registration names its settings section by that key, and the
    settings are still declared in one module (test_registrations_name_real_settings_sections
    holds the two together)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    keys = {id(node.args[0]) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "Section" and node.args}
    return [(node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in keys]


def test_registrations_name_real_settings_sections() -> None:
    """A registration's ``settings`` is the key of a section of settings.py: its fields, the
    README table of them and its template parameters are found from there."""
    from responses_gateway.settings import SECTIONS

    keys = {section.key for section in SECTIONS}
    for registration in registry.REGISTRATIONS:
        assert registration.settings is None or registration.settings in keys, registration


def test_no_module_outside_a_tools_package_names_the_tool() -> None:
    found: list[str] = []
    sources = {str(p.relative_to(PACKAGE)): _literals(p) for p in PACKAGE.rglob("*.py")}
    assert len(registry.REGISTRATIONS) >= 5
    for registration in registry.REGISTRATIONS:
        names, home = _names(registration), _home(registration) | ANYWHERE
        assert home - ANYWHERE, registration.kind
        for path, literals in sources.items():
            if path not in home:
                found += [f"{path}:{line}: {value!r} ({registration.kind})"
                          for value, line in literals if value in names]
    assert found == []


def test_each_packaged_tool_declares_itself_in_its_package() -> None:
    for registration in registry.REGISTRATIONS:
        package = registration.target.partition(":")[0].rsplit(".", 1)[0]
        assert sys.modules[package].REGISTRATION is registration  # type: ignore[attr-defined]
        assert package in registry.PACKAGES


def test_the_registry_is_read_without_the_tools_code() -> None:
    """Declaring a tool imports none of it: its class and input fields load on first use."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, json\n"
         "from responses_gateway.tools import registry\n"
         "print(json.dumps(sorted(sys.modules)))"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "handler")},
        capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(done.stdout)
    for registration in registry.REGISTRATIONS:
        assert registration.target.partition(":")[0] not in loaded
        for item in registration.items:
            if item.input_fields:
                assert item.input_fields.partition(":")[0] not in loaded
        for models in (registration.request_tool, registration.request_choice):
            if models:
                assert models.partition(":")[0] not in loaded
    assert "pydantic" not in loaded


PROBE = r"""
import json, os
from responses_gateway.tools import registry
from tests.helpers import fake_server_tool

registry.register(fake_server_tool.REGISTRATION)  # the one line a new tool's package needs

import httpx
from responses_gateway.config import Settings
from tests.helpers.gateway_server import GatewayServer
from tests.helpers.scripted_upstream import ScriptedUpstream

seen = {}
body = {
    "model": "m", "tools": [{"type": "lookup_preview"}],
    "tool_choice": {"type": "lookup_preview"}, "include": ["lookup_call.results"],
    "input": [
        {"type": "lookup_call", "word": "sun"},  # an earlier call sent back, no id
        {"role": "user", "content": "[[script:tool names=lookup args='{\"word\": \"moon\"}']] go"},
    ],
}
with ScriptedUpstream() as up:
    settings = Settings(upstream_url=up.base_url, store="sqlite:" + os.environ["PROBE_DB"],
                        hosted_tools="reject")
    os.environ["LOOKUP_ON"] = "1"  # what turns it on, read as the gateway starts
    with GatewayServer(settings) as gw:
        http = httpx.Client(base_url=gw.base_url, timeout=60)
        answer = http.post("/responses", json=body)
        seen["status"] = answer.status_code
        seen["response"] = answer.json()
        rid = seen["response"].get("id")
        seen["input_items"] = http.get(f"/responses/{rid}/input_items",
                                       params={"order": "asc"}).json()
        seen["upstream"] = up.requests
        seen["bad_item"] = http.post(
            "/responses", json={**body, "input": [{"type": "lookup_call", "word": 3}]}).json()
    os.environ["LOOKUP_ON"] = "0"
    with GatewayServer(settings) as gw:
        http = httpx.Client(base_url=gw.base_url, timeout=60)
        seen["off"] = http.post("/responses", json={**body, "input": "hi"}).json()
print(json.dumps(seen))
"""


def _probe(tmp_path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'handler'}{os.pathsep}{ROOT}",
             "PROBE_DB": str(tmp_path / "g.db"), "LOOKUP_ON": "0"},
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_tool_registered_in_the_tests_is_served_end_to_end(tmp_path: Path) -> None:
    seen = _probe(tmp_path)
    assert seen["status"] == 200, seen["response"]
    response = seen["response"]
    call = response["output"][0]
    assert call["type"] == "lookup_call" and call["id"].startswith("lk_")
    assert call["status"] == "completed" and call["word"] == "moon"
    assert call["results"] == [{"word": "moon", "length": 4}]  # include: lookup_call.results
    assert response["output"][-1]["type"] == "message"
    assert response["tools"] == [{"type": "lookup_preview"}]
    assert response["tool_choice"] == {"type": "lookup"}  # echoed as the registration says
    assert response["tool_usage"]["lookup"] == {"num_requests": 1}  # its zero, plus the call
    first = seen["upstream"][0]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup"]
    # the call sent back as input: validated by its fields, given an lk_ id, read by its tool
    sent_back = seen["input_items"]["data"][0]
    assert sent_back["type"] == "lookup_call" and sent_back["id"].startswith("lk_")
    assert sent_back["status"] == "completed" and sent_back["word"] == "sun"
    assert "'sun' has 3 letters." in json.dumps(first["messages"])
    assert seen["bad_item"]["error"]["param"] == "input[0].word"
    # off, it is a hosted tool: refused, naming what turns it on
    error = seen["off"]["error"]
    assert error["param"] == "tools[0].type" and error["code"] == "invalid_value"
    assert "it runs 'lookup_preview' itself when LOOKUP_ON=1 is set" in error["message"]
    assert "lookup when LOOKUP_ON=1 is set" in error["message"]


def test_without_its_registration_the_fake_tool_is_unknown() -> None:
    """The same names mean nothing to a gateway that has not registered the tool."""
    assert "lookup_preview" not in registry.SERVER_TOOL_TYPES
    assert "lookup_call" not in registry.ITEMS
    assert "lookup_call.results" not in registry.INCLUDES
    assert "lookup" not in registry.zero_tool_usage()


def test_the_refusal_names_the_tools_the_gateway_runs() -> None:
    """The 400 of a hosted tool under ``reject`` says which hosted tools the gateway runs
    itself and what turns each on (it used to say they "run inside OpenAI")."""
    from responses_gateway.tools.hosted import refused

    message = refused("code_interpreter", 2).message
    assert "inside OpenAI" not in message
    for registration in registry.REGISTRATIONS:
        if registration.hosted:
            assert f"{registration.tool_types[0]} when {registration.enabled_by}" in message
    off = refused("web_search_preview", 0)
    assert off.param == "tools[0].type"
    assert "it runs 'web_search_preview' itself when GATEWAY_WEB_SEARCH_PROVIDER is set" in (
        off.message)


def test_code_interpreter_lands_as_one_package_and_one_line() -> None:
    """Issue 41's proof: code_interpreter is its package and one line of ``PACKAGES``; the
    hosted-tools catalogue, ``include`` names and ``tool_choice`` types the request models
    read come from its registration, no longer from literals of their own."""
    from responses_gateway.tools.code_interpreter import REGISTRATION
    from responses_gateway.tools.hosted import HOSTED_TYPES, refused
    from responses_gateway.translate.request_names import INCLUDABLE
    from responses_gateway.translate.request_tools import HOSTED_CHOICES

    assert registry.registration_of("code_interpreter") is REGISTRATION
    assert [p for p in registry.PACKAGES if p.endswith(".code_interpreter")] == [
        "responses_gateway.tools.code_interpreter"]
    assert "code_interpreter" in HOSTED_TYPES and "code_interpreter" in HOSTED_CHOICES
    assert "code_interpreter_call.outputs" in INCLUDABLE
    assert registry.ITEMS["code_interpreter_call"].id_prefix == "ci_"
    assert "code_interpreter" not in registry.zero_tool_usage()  # OpenAI reports none
    for module in ("tools/hosted.py", "translate/request_names.py",
                   "translate/request_tools.py"):
        assert not [v for v, _ in _literals(PACKAGE / module) if v in _names(REGISTRATION)]
    # served only when GATEWAY_CODE_INTERPRETER is set; else hosted, refused naming it
    assert not registry.served("code_interpreter", type("S", (), {"code_interpreter": None}))
    assert registry.served("code_interpreter", type("S", (), {"code_interpreter": "sandbox"}))
    message = refused("code_interpreter", 0).message
    assert "it runs 'code_interpreter' itself when GATEWAY_CODE_INTERPRETER is set" in message

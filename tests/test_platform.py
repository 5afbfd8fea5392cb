"""The platform seam (platform/): ``GATEWAY_STORE`` is read in one place, which chooses the
engines (local: SQLite, disk, sqlite-vec; AWS: DynamoDB, S3, S3 Vectors, API Gateway
connections) and imports none of them until one is built."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from responses_gateway.errors import GatewayError
from responses_gateway.platform import dynamodb_table, platform_for, vector_stores_available
from responses_gateway.platform.aws import AWSPlatform
from responses_gateway.platform.local import LocalPlatform
from responses_gateway.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "handler" / "responses_gateway"
#: the one place that may read ``settings.store``
PLATFORM = PACKAGE / "platform"


def _settings_object(node: ast.expr) -> bool:
    """Whether ``node`` names a settings object: ``settings``, ``x.settings``,
    ``self._settings``, ``settings_from_env()``."""
    if isinstance(node, ast.Name):
        return node.id.endswith("settings")
    if isinstance(node, ast.Attribute):
        return node.attr.endswith("settings")
    if isinstance(node, ast.Call):
        return _settings_object(node.func) or (
            isinstance(node.func, ast.Name) and node.func.id == "settings_from_env")
    return False


def store_reads(package: Path, name: str = "store") -> list[str]:
    """``path:line`` of every read of ``<settings>.store`` (or ``getattr(<settings>,
    "store")``; another setting: ``name``) in ``package`` outside its platform/ package."""
    found: list[tuple[str, int]] = []
    for path in sorted(package.rglob("*.py")):
        if (package / "platform") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            read = (isinstance(node, ast.Attribute) and node.attr == name
                    and _settings_object(node.value))
            read = read or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "getattr" and len(node.args) >= 2
                and _settings_object(node.args[0])
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == name)
            if read:
                found.append((str(path.relative_to(package)), node.lineno))
    return [f"{path}:{line}" for path, line in sorted(found)]


def test_only_the_platform_reads_settings_store() -> None:
    """Which engines serve storage is decided once (platform/), not by each module parsing
    GATEWAY_STORE again."""
    assert PLATFORM.is_dir()
    assert store_reads(PACKAGE) == []


def test_only_the_platform_reads_settings_worker_function() -> None:
    """Where background work runs (the worker Lambda or this process) is decided once
    (``Platform.worker``, platform/worker.py)."""
    assert store_reads(PACKAGE, "worker_function") == []


def test_the_worker_is_the_platform_s(tmp_path: Path) -> None:
    for store in (f"sqlite:{tmp_path / 'g.db'}", "dynamodb:t"):
        assert platform_for(Settings(store=store)).worker().in_process
        worker = platform_for(Settings(store=store, worker_function="w")).worker()
        assert not worker.in_process and worker.function == "w"
        assert worker.shown == "worker function"


def test_the_check_finds_a_read(tmp_path: Path) -> None:
    """The scan above sees each way a module could read the setting."""
    (tmp_path / "platform").mkdir()
    (tmp_path / "platform" / "choose.py").write_text("kind = settings.store\n")
    (tmp_path / "a.py").write_text(
        "def f(settings, app, gateway):\n"
        "    a = settings.store.startswith('sqlite:')\n"
        "    b = app.state.settings.store.partition(':')\n"
        "    c = gateway.settings.store\n"
        "    d = getattr(self._settings, 'store')\n"
        "    e = settings_from_env().store\n"
        "    f = gateway.store  # the response store, not the setting\n")
    assert store_reads(tmp_path) == ["a.py:2", "a.py:3", "a.py:4", "a.py:5", "a.py:6"]


def test_the_setting_chooses_the_platform(tmp_path: Path) -> None:
    local = platform_for(Settings(store=f"sqlite:{tmp_path / 'g.db'}"))
    assert isinstance(local, LocalPlatform) and local.name == "local"
    assert local.sweeps_expired_files and local.has_vector_stores
    assert not local.files_stored()  # no file yet: the sweep builds nothing
    aws = platform_for(Settings(store="dynamodb:responses"))
    assert isinstance(aws, AWSPlatform) and aws.table == "responses"
    assert not aws.sweeps_expired_files  # each tenant's expired files go as they are served
    assert not aws.has_vector_stores  # no GATEWAY_VECTOR_BUCKET
    assert vector_stores_available(Settings(store="dynamodb:t", vector_bucket="v"))
    assert platform_for(Settings(store="sqlite:")).path == "gateway.db"
    with pytest.raises(ValueError, match="needs a table name"):
        platform_for(Settings(store="dynamodb:"))
    with pytest.raises(ValueError, match="sqlite:PATH or dynamodb:TABLE"):
        platform_for(Settings(store="postgres:db"))


def test_what_a_platform_does_not_have_is_said() -> None:
    """AWS without GATEWAY_FILES_BUCKET or GATEWAY_VECTOR_BUCKET: the routes' 501; the
    local platform has no API Gateway connections."""
    aws = platform_for(Settings(store="dynamodb:responses"))
    with pytest.raises(GatewayError) as files:
        aws.files()
    assert (files.value.status, files.value.code) == (501, "files_not_configured")
    with pytest.raises(GatewayError) as vectors:
        aws.vector_stores(None)  # type: ignore[arg-type]
    assert (vectors.value.status, vectors.value.code) == (501, "vector_stores_unavailable")
    with pytest.raises(RuntimeError, match="GATEWAY_STORE=dynamodb:TABLE"):
        platform_for(Settings(store="sqlite::memory:")).connections(None)


def test_the_cli_finds_the_table() -> None:
    assert dynamodb_table("dynamodb:responses") == "responses"
    assert dynamodb_table("sqlite:gateway.db") is None
    assert dynamodb_table("dynamodb:") is None
    assert dynamodb_table("") is None


PROBE = """
import json, sys
from responses_gateway.platform import platform_for
from responses_gateway.settings import Settings
for store in ("sqlite:g.db", "dynamodb:t"):
    platform = platform_for(Settings(store=store))
    platform.has_vector_stores, platform.sweeps_expired_files, platform.shown
print(json.dumps(sorted(sys.modules)))
"""


def test_choosing_a_platform_imports_no_engine(tmp_path: Path) -> None:
    """Cold start: an engine's module (and boto3) loads when that engine is built."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "PYTHONPATH": str(ROOT / "handler")},
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout)
    engines = ("boto3", "botocore", "sqlite3", "responses_gateway.store.",
               "responses_gateway.files.", "responses_gateway.vectors.")
    assert [m for m in loaded if m.startswith(engines) or m in ("boto3", "sqlite3")] == []


def test_each_declared_platform_is_one_subclass_and_one_line() -> None:
    """``PLATFORMS`` is what config.py checks GATEWAY_STORE against and what platform_for
    builds: each line names a Platform subclass, its form starts with its kind, and the
    start refuses anything else naming every form."""
    import importlib

    from responses_gateway.config import SettingsError, settings_from_env
    from responses_gateway.platform import PLATFORMS
    from responses_gateway.platform.base import Platform

    for kind, declared in PLATFORMS.items():
        module, _, name = declared.target.partition(":")
        assert issubclass(getattr(importlib.import_module(module), name), Platform)
        assert declared.form.startswith(f"{kind}:")
    with pytest.raises(SettingsError) as exc:
        settings_from_env({"GATEWAY_STORE": "postgres:db"})
    assert all(p.form in str(exc.value) for p in PLATFORMS.values())
    with pytest.raises(SettingsError, match="GATEWAY_IMAGE_BUCKET"):
        settings_from_env({"GATEWAY_STORE": "dynamodb:t", "GATEWAY_IMAGE_BACKEND": "openai",
                           "GATEWAY_IMAGE_URL": "http://images:8000/v1"})
    assert settings_from_env({"GATEWAY_STORE": "sqlite:", "GATEWAY_IMAGE_BACKEND": "openai",
                              "GATEWAY_IMAGE_URL": "http://images:8000/v1"}).image_bucket is None

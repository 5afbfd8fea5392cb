"""template.yaml: linted by cfn-lint and `sam validate --lint`, consistent with the code, built.

`sam build` runs without containers when a Python 3.12 interpreter (the template's runtime) is
on this machine; it downloads the layer's arm64 wheels from PyPI, so a network failure skips
it (with the reason) instead of failing. Without it, the offline checks below still hold the
layer to pyproject.toml's runtime dependencies.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from responses_gateway.settings import declared
from responses_gateway.store import dynamodb_schema

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
REQUIREMENTS = ROOT / "layers" / "dependencies" / "requirements.txt"
RUNTIME = "python3.12"
BYTECODE_TAG = "cpython-" + RUNTIME.removeprefix("python").replace(".", "")  # cpython-312

def aws_env() -> dict[str, str]:
    """Dummy region and credentials: validation needs them, and must not reach AWS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_CONFIG_FILE="/nonexistent/aws-config",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws-credentials",
        AWS_EC2_METADATA_DISABLED="true",
        SAM_CLI_TELEMETRY="0",
    )
    return env


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    from cfnlint.decode import decode

    tpl, problems = decode(str(TEMPLATE))
    assert not problems, problems
    return tpl


@pytest.fixture(scope="module")
def transformed(template: dict[str, Any]) -> dict[str, Any]:
    """The template after the SAM transform, as CloudFormation will see it."""
    import copy

    from samtranslator.translator.transform import transform

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    tpl = copy.deepcopy(template)
    tpl["Globals"]["Function"]["CodeUri"] = "s3://bucket/code.zip"
    tpl["Resources"]["DependenciesLayer"]["Properties"]["ContentUri"] = "s3://bucket/layer.zip"
    old = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    try:
        return transform(tpl, {}, NoManagedPolicies())
    finally:
        if old is None:
            os.environ.pop("AWS_DEFAULT_REGION", None)
        else:
            os.environ["AWS_DEFAULT_REGION"] = old


def resources(tpl: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in tpl["Resources"].items() if v["Type"] == kind}


# -- linters --------------------------------------------------------------------------------


@pytest.mark.deploy
@pytest.mark.slow
def test_cfn_lint_passes() -> None:
    cfn_lint = shutil.which("cfn-lint")
    assert cfn_lint, "cfn-lint is a test dependency (pip install -e '.[test]')"
    result = subprocess.run([cfn_lint, str(TEMPLATE)], capture_output=True, text=True,
                            cwd=ROOT, env=aws_env(), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.deploy
@pytest.mark.slow
def test_sam_validate_lint_passes() -> None:
    sam = shutil.which("sam")
    assert sam, "aws-sam-cli is a test dependency (pip install -e '.[test]')"
    result = subprocess.run(
        [sam, "validate", "--lint", "--template-file", str(TEMPLATE)],
        capture_output=True, text=True, cwd=ROOT, env=aws_env(), timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "is a valid SAM Template" in output


# -- consistency with the code ----------------------------------------------------------------


@pytest.mark.slow
def test_table_matches_the_store_schema(template: dict[str, Any]) -> None:
    (table,) = resources(template, "AWS::DynamoDB::Table").values()
    props = table["Properties"]
    expected = dynamodb_schema.table_definition("ignored")
    assert props["AttributeDefinitions"] == expected["AttributeDefinitions"]
    assert props["KeySchema"] == expected["KeySchema"]
    assert props["BillingMode"] == expected["BillingMode"] == "PAY_PER_REQUEST"
    assert props["TimeToLiveSpecification"] == dynamodb_schema.ttl_specification()
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    # The same global secondary indexes (the admin list of conversations), no local ones.
    assert props["GlobalSecondaryIndexes"] == expected["GlobalSecondaryIndexes"]
    assert [i["IndexName"] for i in props["GlobalSecondaryIndexes"]] == ["conversations"]
    assert "LocalSecondaryIndexes" not in props


def test_abandoned_container_copies_leave_the_files_bucket(template: dict[str, Any]) -> None:
    """AgentCore containers' S3 copies (containers/agentcore.py): a container whose record
    the table's TTL dropped is never reclaimed, so the bucket's lifecycle drops its copy."""
    from responses_gateway.containers.agentcore import COPY_DAYS, REFRESH_SECONDS

    rules = template["Resources"]["FilesBucket"]["Properties"]["LifecycleConfiguration"][
        "Rules"]
    (rule,) = [r for r in rules if r.get("Prefix") == "containers/"]
    assert rule["Status"] == "Enabled" and rule["ExpirationInDays"] == COPY_DAYS
    assert REFRESH_SECONDS < COPY_DAYS * 86400 - 8 * 3600  # a session lives 8 hours at most


def test_api_function_runs_under_the_lambda_web_adapter(template: dict[str, Any]) -> None:
    api = template["Resources"]["ApiFunction"]["Properties"]
    env = api["Environment"]["Variables"]
    assert env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/health"
    assert env["AWS_LWA_PORT"].isdigit()
    assert env["GATEWAY_WORKER_FUNCTION"] == {"Ref": "WorkerFunction"}
    assert api["FunctionUrlConfig"] == {
        "AuthType": {"Ref": "FunctionUrlAuthType"},
        "InvokeMode": "RESPONSE_STREAM",
    }
    assert template["Parameters"]["FunctionUrlAuthType"]["AllowedValues"] == ["NONE", "AWS_IAM"]
    layer = {"Fn::Sub": "arn:aws:lambda:${AWS::Region}:753240598075:layer:"
                        "LambdaAdapterLayerArm64:${LwaLayerVersion}"}
    assert layer in api["Layers"]
    globals_ = template["Globals"]["Function"]
    assert globals_["Runtime"] == RUNTIME and globals_["Architectures"] == ["arm64"]
    assert globals_["CodeUri"] == "handler/"
    # The handler is the script the adapter runs; it serves the app on the adapter's port.
    assert api["Handler"] == "run.sh"
    script = ROOT / "handler" / "run.sh"
    assert script.stat().st_mode & stat.S_IXUSR, "run.sh must be executable"
    text = script.read_text()
    assert "AWS_LWA_PORT" in text and "responses_gateway.api.app:create_app" in text
    assert "/opt/python" in text


def test_worker_dead_letters_come_back_to_the_worker(template: dict[str, Any]) -> None:
    worker = template["Resources"]["WorkerFunction"]["Properties"]
    assert worker["Handler"] == "responses_gateway.entry.lambda_worker.handler"
    queue = {"Fn::GetAtt": ["WorkerDeadLetterQueue", "Arn"]}
    assert worker["EventInvokeConfig"]["DestinationConfig"]["OnFailure"] == {
        "Type": "SQS", "Destination": queue,
    }
    assert worker["Events"]["DeadLetters"] == {
        "Type": "SQS", "Properties": {"Queue": queue, "BatchSize": 10},
    }
    visibility = template["Resources"]["WorkerDeadLetterQueue"]["Properties"]["VisibilityTimeout"]
    assert visibility > template["Parameters"]["WorkerTimeout"]["MaxValue"]
    assert "SAFETY_MARGIN_SECONDS" in (
        ROOT / "handler/responses_gateway/entry/lambda_worker.py").read_text()


def test_every_setting_is_configured(template: dict[str, Any]) -> None:
    """Every declared setting (settings.py) is set by its template.yaml parameter, or declares
    why the template has none; the template sets no GATEWAY_* variable that is not declared."""
    env = dict(template["Globals"]["Function"]["Environment"]["Variables"])
    env.update(template["Resources"]["ApiFunction"]["Properties"]["Environment"]["Variables"])
    parameters = template["Parameters"]
    for name, setting in declared().items():
        assert (setting.parameter is None) != (setting.not_parameter is None), (
            f"{name}: declare its template.yaml parameter or why it has none")
        if setting.parameter is not None:
            assert setting.parameter in parameters, f"no parameter {setting.parameter}"
            assert env.get(setting.env) == {"Ref": setting.parameter}, setting.env
            assert setting.env in parameters[setting.parameter]["Description"]
        else:
            assert env.get(setting.env) not in [{"Ref": p} for p in parameters], (
                f"{setting.env} is set from a parameter: declare parameter=")
    secrets = {s.env for s in declared().values() if s.secret}
    variables = {s.env for s in declared().values()} | {
        s + suffix for s in secrets for suffix in ("_SECRET_ARN", "_PARAMETER")}
    unknown = {v for v in env if v.startswith("GATEWAY_")} - variables
    assert not unknown, f"template.yaml sets {sorted(unknown)}, which no setting reads"
    for name in ("UPSTREAM_API_KEY", "API_KEYS", "SEAL_KEY"):
        assert f"GATEWAY_{name}_SECRET_ARN" in env
    assert env["GATEWAY_STORE"] == {"Fn::Sub": "dynamodb:${ResponsesTable}"}
    # A cold start's first create does not scan every installed package for pydantic plugins.
    assert env["PYDANTIC_DISABLE_PLUGINS"] == "__all__"


#: Parameters whose default is deliberately not the setting's own, and why.
DEPLOYED_DEFAULTS = {"UpstreamUrl": "a stack serves OpenAI's API unless told otherwise"}


def test_every_parameter_defaults_to_its_settings_default(template: dict[str, Any]) -> None:
    """A parameter's default, read as the gateway reads its variable, is the setting's own
    default: changing one in settings.py without the template fails here."""
    from responses_gateway.config import settings_from_env

    defaults = settings_from_env({})
    for name, setting in declared().items():
        if setting.parameter is None or setting.parameter in DEPLOYED_DEFAULTS:
            continue
        value = str(template["Parameters"][setting.parameter].get("Default", ""))
        read = getattr(settings_from_env({setting.env: value}), name)
        assert read == getattr(defaults, name), (setting.parameter, value)


def test_permissions_are_least_privilege(template: dict[str, Any]) -> None:
    statements: list[dict[str, Any]] = []

    def collect(document: dict[str, Any]) -> None:
        for statement in document["Statement"]:
            if "Fn::If" in statement:
                statement = statement["Fn::If"][1]
            statements.append(statement)

    collect(template["Resources"]["GatewayAccessPolicy"]["Properties"]["PolicyDocument"])
    for role in ("ApiRole", "WorkerRole"):
        for policy in template["Resources"][role]["Properties"]["Policies"]:
            collect(policy["PolicyDocument"])
        assert "ManagedPolicyArns" in template["Resources"][role]["Properties"]
    by_sid = {s["Sid"]: s for s in statements}
    assert by_sid["ResponsesTable"]["Resource"] == {"Fn::GetAtt": ["ResponsesTable", "Arn"]}
    assert by_sid["ResponsesTableIndexes"]["Action"] == "dynamodb:Query"
    assert by_sid["ResponsesTableIndexes"]["Resource"] == {
        "Fn::Sub": "${ResponsesTable.Arn}/index/*"}
    assert "dynamodb:Scan" not in by_sid["ResponsesTable"]["Action"]
    assert all(a.startswith("dynamodb:") for a in by_sid["ResponsesTable"]["Action"])
    assert by_sid["StartWorker"] == {
        "Sid": "StartWorker", "Effect": "Allow", "Action": "lambda:InvokeFunction",
        "Resource": {"Fn::GetAtt": ["WorkerFunction", "Arn"]},
    }
    assert by_sid["GatewaySecret"]["Action"] == "secretsmanager:GetSecretValue"
    assert by_sid["BedrockModels"]["Resource"] == {"Ref": "BedrockModelArns"}
    for statement in statements:
        if statement["Resource"] == "*":  # only X-Ray, which has no resource-level permissions
            assert statement["Sid"] == "XRay", statement
        assert statement["Effect"] == "Allow"
        assert "*" not in str(statement["Action"]), statement


def test_public_function_url_gets_both_permissions(transformed: dict[str, Any]) -> None:
    """SAM adds the public-URL permissions only for a literal NONE; the template adds them."""
    permissions = resources(transformed, "AWS::Lambda::Permission")
    public = [p for p in permissions.values() if p.get("Condition") == "PublicUrl"]
    actions = sorted(p["Properties"]["Action"] for p in public)
    assert actions == ["lambda:InvokeFunction", "lambda:InvokeFunctionUrl"]
    for permission in public:
        assert permission["Properties"]["FunctionName"] == {"Ref": "ApiFunction"}
        assert permission["Properties"]["Principal"] == "*"
    url = resources(transformed, "AWS::Lambda::Url")["ApiFunctionUrl"]["Properties"]
    assert url["InvokeMode"] == "RESPONSE_STREAM"
    # No role is generated by SAM (each would carry broad managed policies).
    assert not [r for r in resources(transformed, "AWS::IAM::Role") if r not in
                ("ApiRole", "WorkerRole", "WebSocketRole")]


def test_dashboard_and_alarms_cover_what_the_issue_asks(template: dict[str, Any]) -> None:
    import json

    alarms = resources(template, "AWS::CloudWatch::Alarm")
    assert set(alarms) >= {"ApiErrorsAlarm", "ThrottlesAlarm", "TimeToFirstTokenAlarm",
                           "WorkerFailuresAlarm", "ResponseErrorsAlarm"}
    ttft = alarms["TimeToFirstTokenAlarm"]["Properties"]
    assert ttft["Namespace"] == "ResponsesGateway" and ttft["MetricName"] == "TimeToFirstToken"
    assert ttft["ExtendedStatistic"] == "p99"
    body = template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    filled = re.sub(r"\$\{[^}]+\}", "x", body)
    widgets = json.loads(filled)["widgets"]
    assert any("Time to first token" in w["properties"]["title"] for w in widgets)


# -- the dependency layer ---------------------------------------------------------------------


def _requirements() -> dict[str, str]:
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"{line!r}: layer requirements are pinned with =="
            pins[_normal(name)] = version.strip()
    return pins


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def test_layer_pins_every_runtime_dependency_within_pyproject() -> None:
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = _requirements()
    for spec in pyproject["project"]["dependencies"]:
        req = Requirement(spec)
        name = _normal(req.name)
        assert name in pins, f"{req.name} is a runtime dependency missing from the layer"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} is not {req}"
    assert "aws-xray-sdk" in pins  # Powertools Tracer
    for dev_only in ("openai", "pytest", "moto", "aws-sam-cli", "cfn-lint"):
        assert dev_only not in pins


def test_every_package_the_runtime_imports_is_a_runtime_dependency() -> None:
    """Lazy imports included (``mcp``, Bedrock's boto3): the layer holds only pyproject's
    dependencies, so a package the tests install for another reason would be missing in AWS."""
    import ast
    import importlib.metadata

    from packaging.requirements import Requirement

    declared = {
        _normal(Requirement(spec).name)
        for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "dependencies"]
    }
    distributions = importlib.metadata.packages_distributions()
    imported: dict[str, str] = {}
    for path in sorted((ROOT / "handler").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "responses_gateway":
                    imported.setdefault(top, str(path.relative_to(ROOT)))
    # Parts of a dependency's own distribution (botocore comes with boto3, and so on).
    transitive = {"botocore": "boto3", "anyio": "starlette", "pydantic_core": "pydantic",
                  "typing_extensions": "pydantic", "httpcore": "httpx",
                  "httpx2": "mcp"}  # the mcp SDK's own HTTP client
    declared.add("aws-xray-sdk")  # layer-only: the Powertools Tracer, used only when tracing
    # The sandbox engine's extra: the local platform only (Lambda has no user namespaces for a
    # jail, so the AWS platform runs code on AgentCore and never imports it).
    declared |= {_normal(Requirement(spec).name) for spec in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["code"]}
    missing = []
    for top, where in sorted(imported.items()):
        names = {_normal(d) for d in distributions.get(top, [top])}
        if not names & declared and transitive.get(top) not in declared:
            missing.append(f"{top} (imported by {where})")
    assert not missing, f"imported by the runtime but not in its dependencies: {missing}"


def _runtime_python() -> str | None:
    """A working ``python3.12`` (PATH, or a pyenv install not selected in this shell)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [shutil.which(RUNTIME), *sorted(glob.glob(f"{root}/versions/3.12*/bin/{RUNTIME}"))]
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-m", "pip", "--version"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


#: Where ``sam build --cached`` keeps what it built between runs (the layer's arm64 wheels
#: above all, a minute or more to download and install): outside the work tree, so every
#: clone and every run on this machine shares it. RG_SAM_CACHE overrides it.
SAM_CACHE = Path(os.environ.get("RG_SAM_CACHE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "responses-gateway" / "sam")


@contextmanager
def _sam_cache() -> Iterator[Path]:
    """The persistent cache, held by this run alone (two clones building at once would
    write the same entries)."""
    SAM_CACHE.mkdir(parents=True, exist_ok=True)
    with open(SAM_CACHE.parent / "sam.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield SAM_CACHE
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


NETWORK_ERRORS = ("NewConnectionError", "Temporary failure in name resolution",
                  "ReadTimeoutError", "Could not fetch URL", "ConnectTimeoutError",
                  "No matching distribution found")


@pytest.mark.deploy
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sam_build_without_containers(tmp_path: Path) -> None:
    sam = shutil.which("sam")
    assert sam, "aws-sam-cli is a test dependency"
    python = _runtime_python()
    if python is None:
        pytest.skip(f"no {RUNTIME} interpreter here: `sam build` without a container needs the "
                    "function's runtime; the layer is checked by the test above instead")
    if shutil.which("make") is None:
        pytest.skip("no make here: `sam build` without a container builds the functions with "
                    "handler/Makefile")
    env = aws_env()
    env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    env.pop("PYENV_VERSION", None)
    # --cached: a function or layer whose source and manifest are unchanged since a run
    # before is not built again. SAM keeps what it needs for that beside the build: the
    # hashes in build.toml next to --build-dir, the layer's installed wheels under
    # .aws-sam/deps in its working directory; all of it lives in the persistent cache.
    with _sam_cache() as cache:
        result = subprocess.run(
            [sam, "build", "--template-file", str(TEMPLATE), "--base-dir", str(ROOT),
             "--build-dir", str(cache / "build"), "--cached", "--cache-dir",
             str(cache / "cache")],
            capture_output=True, text=True, cwd=cache, env=env, timeout=850,
        )
        output = result.stdout + result.stderr
        if result.returncode != 0 and any(e in output for e in NETWORK_ERRORS):
            pytest.skip("sam build could not download the layer's wheels from PyPI:\n"
                        + output[-2000:])
        assert result.returncode == 0, output
        build = tmp_path / "build"  # checked (and changed, below) here, not in the cache
        shutil.copytree(cache / "build", build, symlinks=True)
    layer = build / "DependenciesLayer" / "python"
    for package in ("pydantic_core", "orjson", "starlette", "uvicorn", "mangum",
                    "aws_lambda_powertools", "aws_xray_sdk", "boto3", "httpx", "cryptography"):
        assert (layer / package).is_dir(), f"{package} missing from the layer"
    native = glob.glob(str(layer / "pydantic_core" / "*.so"))
    assert native and all("aarch64" in n for n in native), native  # built for arm64
    for function in ("ApiFunction", "WorkerFunction", "WebSocketFunction"):
        code = build / function
        assert sorted(p.name for p in code.iterdir() if not p.name.startswith(".")) == [
            "responses_gateway", "run.sh"], "handler/ holds only our code"
        _assert_compiled_for_the_runtime(code / "responses_gateway")
    _assert_loaded_without_source(python, build / "ApiFunction")
    assert os.access(build / "ApiFunction" / "run.sh", os.X_OK)
    built = (build / "template.yaml").read_text()
    assert "RESPONSE_STREAM" in built


def _assert_compiled_for_the_runtime(package: Path) -> None:
    """Every module ships its runtime's bytecode, loaded without a look at the source's mtime
    (handler/Makefile): Lambda cannot write bytecode, so a module without it compiles at every
    cold start."""
    sources = sorted(package.rglob("*.py"))
    assert len(sources) > 50
    for source in sources:
        compiled = source.parent / "__pycache__" / f"{source.stem}.{BYTECODE_TAG}.pyc"
        assert compiled.is_file(), f"{source} ships without its bytecode"
        flags = int.from_bytes(compiled.read_bytes()[4:8], "little")
        assert flags == 0b01, f"{compiled}: not an unchecked-hash .pyc (flags {flags})"
    strays = [p for p in package.rglob("*.pyc") if f".{BYTECODE_TAG}." not in p.name]
    assert not strays, f"bytecode of another Python shipped: {strays[:3]}"


def _assert_loaded_without_source(python: str, code: Path) -> None:
    """The runtime imports the built package from its bytecode alone: a source that can no
    longer be run (and is newer than its .pyc) is never read."""
    for name in ("__init__.py", "status.py"):
        (code / "responses_gateway" / name).write_text("raise ImportError('read the source')\n")
    result = subprocess.run(
        [python, "-c", "import responses_gateway.status as s; print(s.__name__)"],
        capture_output=True, text=True, cwd="/", timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(code)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "responses_gateway.status"


def test_the_functions_are_compiled_by_their_runtime(template: dict[str, Any]) -> None:
    """handler/Makefile compiles with the interpreter of the functions' runtime: bytecode of
    another Python would be ignored by Lambda, and every module compiled at each cold start."""
    assert template["Globals"]["Function"]["Runtime"] == RUNTIME
    makefile = (ROOT / "handler" / "Makefile").read_text()
    assert f"PYTHON ?= {RUNTIME}\n" in makefile
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Serverless::Function":
            assert resource.get("Metadata", {}).get("BuildMethod") == "makefile", name
            assert f"build-{name}" in makefile, name


@pytest.mark.slow
def test_the_buffered_entry_point_is_importable_from_the_built_layout() -> None:
    """handler/ alone (plus site-packages standing in for the layer) imports both handlers."""
    code = (
        "import sys, os; sys.path.insert(0, os.environ['CODE']);"
        "import responses_gateway.entry.lambda_worker as w;"
        "import responses_gateway.entry.lambda_buffered as b;"
        "assert callable(w.handler) and callable(b.handler)"
    )
    env = {**aws_env(), "CODE": str(ROOT / "handler"), "GATEWAY_STORE": "sqlite::memory:"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, cwd="/", timeout=120)
    assert result.returncode == 0, result.stderr


def test_websocket_api_routes_to_its_function_with_least_privilege(
    template: dict[str, Any]
) -> None:
    resources = template["Resources"]
    api = resources["WebSocketApi"]["Properties"]
    assert api["ProtocolType"] == "WEBSOCKET"
    routes = {r["Properties"]["RouteKey"] for r in resources.values()
              if r["Type"] == "AWS::ApiGatewayV2::Route"}
    assert routes == {"$connect", "$default", "$disconnect"}
    function = resources["WebSocketFunction"]["Properties"]
    assert function["Handler"] == "responses_gateway.entry.lambda_websocket.handler"
    assert resources["WebSocketStage"]["Properties"]["StageName"] == "responses"
    [policy] = resources["WebSocketRole"]["Properties"]["Policies"]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    assert statements["PostToConnections"]["Action"] == "execute-api:ManageConnections"
    resource = statements["PostToConnections"]["Resource"]["Fn::Sub"]
    assert resource.endswith("${WebSocketApi}/responses/POST/@connections/*")
    assert resources["WebSocketRole"]["Properties"]["ManagedPolicyArns"] == [
        {"Ref": "GatewayAccessPolicy"}]  # the table, the secret, Bedrock: what the API has

"""A search provider or an image backend is one module and one line in its registry
(``PROVIDERS``, tools/web_search/providers/; ``REGISTERED``, tools/image_generation/backends/):
the settings parsers read those registries, and the setting's README row and template.yaml
parameter are checked against them here, so adding one cannot leave either behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from responses_gateway.config import SettingsError, settings_from_env
from responses_gateway.settings import declared
from responses_gateway.tools.image_generation.backends import KINDS as IMAGE_BACKENDS
from responses_gateway.tools.web_search.providers import PROVIDERS

ROOT = Path(__file__).resolve().parent.parent
REGISTRIES = {"web_search_provider": tuple(PROVIDERS), "image_backend": IMAGE_BACKENDS}


@pytest.mark.parametrize("field", sorted(REGISTRIES))
def test_the_template_allows_exactly_the_registered_names(field: str) -> None:
    from cfnlint.decode import decode

    template, problems = decode(str(ROOT / "template.yaml"))
    assert not problems, problems
    setting = declared()[field]
    assert setting.parameter is not None
    allowed = template["Parameters"][setting.parameter]["AllowedValues"]
    assert sorted(allowed) == sorted(["", *REGISTRIES[field]])


@pytest.mark.parametrize("field", sorted(REGISTRIES))
def test_the_settings_row_names_every_registered_name(field: str) -> None:
    doc = declared()[field].doc
    assert all(f"`{name}`" in doc for name in REGISTRIES[field]), doc


@pytest.mark.parametrize("field", sorted(REGISTRIES))
def test_the_parser_takes_the_registry_s_names_only(field: str) -> None:
    env = declared()[field].env
    with pytest.raises(SettingsError, match="must be one of"):
        settings_from_env({env: "nosuch"})
    name = REGISTRIES[field][0]
    extra = {"GATEWAY_WEB_SEARCH_URL": "http://search:8080",
             "GATEWAY_WEB_SEARCH_API_KEY": "k"} if field == "web_search_provider" else {}
    assert getattr(settings_from_env({env: name, **extra}), field) == name

"""The API's documentation pages, served with no network at all.

FastAPI's own ``/docs`` and ``/redoc`` load their scripts, styles and fonts from public
CDNs: on a machine without internet access they are blank.  Here both pages load them
from this server, under :data:`ASSETS`, from the files the ``fastapi-offline`` package
ships (Swagger UI and ReDoc bundles).  Like the pages themselves, the assets are served
without the token: they hold no data.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from sidecar.shells.operations import BY_NAME


def _path(name: str) -> str:
    """The path :mod:`sidecar.shells.operations` declares for the page ``name``."""
    http = BY_NAME[name].http
    assert http is not None, name
    return http.path


ASSETS = _path("docs_assets")


def asset_folder() -> str:
    """Where the installed package keeps the Swagger UI and ReDoc bundles."""
    return str(resources.files("fastapi_offline") / "static")


BEARER = "bearer"
"""The OpenAPI security scheme every route but the public ones requires."""


def add_docs(api: FastAPI, public: Iterable[str] = ()) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` on ``api``, whose ``FastAPI`` was made with
    ``docs_url=None, redoc_url=None``.  The OpenAPI document declares the bearer token
    (so that Swagger UI's *Authorize* sends it with every "Try it out"), required by
    every operation but those of the ``public`` paths."""
    api.mount(ASSETS, StaticFiles(directory=asset_folder()), name="docs-assets")
    _declare_bearer(api, frozenset(public))
    openapi = api.openapi_url or "/openapi.json"

    @api.get(_path("swagger"), include_in_schema=False)
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi,
            title=f"{api.title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )

    @api.get(_path("redoc"), include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi,
            title=f"{api.title} - ReDoc",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/favicon.png",
            with_google_fonts=False,
        )


def _declare_bearer(api: FastAPI, public: frozenset[str]) -> None:
    build = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {})["securitySchemes"] = {
                BEARER: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the token in the sidecar home's `token` file (or "
                    "$SIDECAR_TOKEN), or a named token",
                }
            }
            schema["security"] = [{BEARER: []}]
            for path, item in schema.get("paths", {}).items():
                if path in public:
                    for operation in item.values():
                        operation["security"] = []
            api.openapi_schema = schema
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]

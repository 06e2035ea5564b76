"""The console as the tests use it: a home with demo data, signing in, reading a form's
CSRF token and a page's rows."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx

from sidecar import Sidecar, Tool
from sidecar.demo import ABANDONED, demo_tools
from tests.support.shop import good_session
from tests.support.tokens import fabricated, tokens_file

OPS = "ops-token-0123456789abcdef"
"""A named operator token (beside the agents of :mod:`tests.support.tokens`)."""
OPS_ENTRY = {"name": "ops", "role": "operator", "token": OPS}


def console_home(folder: Path) -> Path:
    """A home (``folder/home``) whose tokens file names the agents of
    :mod:`tests.support.tokens` and the operator ``ops``."""
    home = folder / "home"
    home.mkdir()
    path = tokens_file(home / "tokens.json")
    data = json.loads(path.read_text())
    data["tokens"].append(OPS_ENTRY)
    path.write_text(json.dumps(data))
    return home


def fill(sc: Sidecar) -> None:
    """The demo catalog, the demo's abandoned chain, and call conditions taught by two
    agents (so that rules have sources of their own)."""
    sc.add_tools(demo_tools())
    sc.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
    sc.report(ABANDONED)
    sc.report_many([good_session(n) for n in range(20)])
    sc.report_many([fabricated(n, "alice") for n in range(4)], source="alice", role="agent")
    sc.report_many([fabricated(0, "bob")], source="bob", role="agent")


def sign_in(client: Any, token: str) -> Any:
    """Post the sign-in form as a browser would (its nonce from the page first)."""
    page = client.get("/console/sign-in")
    nonce = re.search(r'name="nonce" value="([^"]+)"', page.text)
    assert nonce is not None, page.text
    return client.post(
        "/console/sign-in",
        data={"nonce": nonce.group(1), "token": token},
        follow_redirects=False,
    )


def csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def rows(html: str, attribute: str) -> list[str]:
    """The values of ``data-<attribute>`` on a page's table rows, in order."""
    return re.findall(rf'data-{attribute}="([^"]+)"', html)


def text_of(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', html)
    assert found is not None, element_id
    return found.group(1)


def cookie_headers(response: httpx.Response) -> list[str]:
    return response.headers.get_list("set-cookie")

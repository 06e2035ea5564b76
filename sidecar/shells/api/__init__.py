"""The HTTP shell (FastAPI) and its server."""

from sidecar.shells.api.app import create_app
from sidecar.shells.api.serve import serve, token_for

__all__ = ["create_app", "serve", "token_for"]

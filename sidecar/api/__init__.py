"""The HTTP shell (FastAPI) and its server."""

from sidecar.api.app import create_app
from sidecar.api.serve import serve, token_for

__all__ = ["create_app", "serve", "token_for"]

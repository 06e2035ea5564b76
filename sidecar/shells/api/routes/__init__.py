"""The HTTP API's routes, one router per concern; each route calls one library method."""

from sidecar.shells.api.routes import archive, eviction, lookup, operations, review, tools

ROUTERS = (
    operations.router,
    tools.router,
    lookup.router,
    archive.router,
    eviction.router,
    review.router,
)

"""The shells around the library: the ``sidecar`` command line (:mod:`.cli`), the HTTP
API (:mod:`.api`), the MCP server (:mod:`.mcp_server`) and the HTTP client that speaks to
a running server with the library's own signatures (:mod:`.client`).  Each parses its
input, calls :class:`~sidecar.Sidecar` and renders the answer; none holds logic of its
own."""

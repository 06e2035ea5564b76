"""The gateway as an MCP proxy: its upstream links, the relay of requests and
notifications, the catalog of the tools it exposes, and serving over HTTP and stdio."""

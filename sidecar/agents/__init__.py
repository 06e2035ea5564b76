"""What watches agents at work and turns it into reports: the MCP gateway in front of the
agent's tool servers (:mod:`.gateway`) and the OTLP intake of the agent's traces
(:mod:`.otlp`).  Each keeps its open sessions in a book of its own and reports them
through the same library call; they share what lives beside them, never each other's
modules: the step evidence (:mod:`.evidence`: clipped, redacted, capped) and the outcome
a session's steps imply (:mod:`.outcome`)."""

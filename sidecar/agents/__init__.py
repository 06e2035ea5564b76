"""What watches agents at work and turns it into reports: the MCP gateway in front of the
agent's tool servers (:mod:`.gateway`) and the OTLP intake of the agent's traces
(:mod:`.otlp`).  Both keep their open sessions in a :mod:`.sessions` book and report them
through the same library call."""

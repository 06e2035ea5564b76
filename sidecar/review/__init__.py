"""What waits for a person: calls held until an operator approves them
(:mod:`.approvals`) and agents' appeals against blocks (:mod:`.appeals`)."""

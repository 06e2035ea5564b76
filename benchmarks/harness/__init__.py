"""What every benchmark repeats, in one place: starting services (:mod:`.services`),
timing against a baseline measured in the same run (:mod:`.timing`), writing results
(:mod:`.results`) and showing progress (:mod:`.progress`).

Nothing heavy is imported at module level here or in the modules below (no numpy,
chromadb, torch, matplotlib, httpx): ``benchmarks.run`` imports them to parse its
arguments and must stay instant.
"""

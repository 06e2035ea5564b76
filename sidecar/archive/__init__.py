"""The archive's sidecar side: what a chain's cold record holds (:mod:`.chains`), how
acknowledged records reach the cold store (:mod:`.publish`), and the archive as an
operator reads and keeps it (:mod:`.audit`)."""

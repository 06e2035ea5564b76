"""Who may do what, and what may be shown: the tokens and their roles
(:mod:`.principals`), which sources a rule may rest on (:mod:`.sources`), secrets kept
out of everything stored or shown (:mod:`.redact`, :mod:`.secretshapes`,
:mod:`.secretblocks`), text made safe to put before a model (:mod:`.neutralize`), and
tool names told apart from their look-alikes (:mod:`.toolnames`)."""

"""The gateway as a guard: each call checked against the memory before it is forwarded
(the verdict decided by the library, the gateway's policy after it), the session it
belongs to, and what it teaches."""

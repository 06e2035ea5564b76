"""The shop server after it has written to its stderr what a deployment's log holds:
secrets whose shape spans lines or hides behind a label (a PGP private key block, an AWS
secret access key after its label, YAML values on the lines under their key), among
lines that hold none.  Run by the gateway's stdio tests as the gateway's upstream."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

PGP_BODY = (
    "lQOYBGXyZ3sBCADQk7x2n5e4Hh2yPq9u3L8mFq1vB3b6xWc0mXvQ1pR2tS3uV4w5",
    "xY6z7A8B9C0D1E2F3G4H5I6J7K8L9M0N1O2P3Q4R5S6T7U8V9W0X1Y2Z3a4b5c6d",
)
PGP_HEADER = "Zq7HdrComment"
PGP_CHECKSUM = "=Xk4d"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
YAML_BLOCK = ("Yaml-Pw-7Qx2Lm9Kd4", "Yaml-Pw-Line2-Rt5")
YAML_BARE = "tkn-Bare-5Wq8Zr3Vy1"
SECRETS = (*PGP_BODY, PGP_HEADER, PGP_CHECKSUM, AWS_SECRET, *YAML_BLOCK, YAML_BARE)
"""The secret material: none of it may reach the gateway's log."""

PUBLIC_KEY = (
    "-----BEGIN PGP PUBLIC KEY BLOCK-----",
    "mQENBF2lnPIBCADKb8rQ5Y0bF1cXgZ0s9F2kTq3Yh7Vn4Wx6Lm8Pz1Qa2Rb3Sc4Td5U",
    "-----END PGP PUBLIC KEY BLOCK-----",
)
COMMIT = "commit: 3f9c2a7d41b0e8c6a5f1d2e3b4c5d6e7f8a9b0c1"
LINES = (
    "ctx-kept upstream starting",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----",
    "Version: GnuPG v2",
    f"Comment: {PGP_HEADER}",
    "",
    *PGP_BODY,
    PGP_CHECKSUM,
    "-----END PGP PRIVATE KEY BLOCK-----",
    *PUBLIC_KEY,
    COMMIT,
    f"secret key: {AWS_SECRET}",
    "database:",
    "  password: |",
    *(f"    {line}" for line in YAML_BLOCK),
    "  host: db.internal",
    "  token:",
    f"    {YAML_BARE}",
    "ctx-kept upstream ready",
)
KEPT = (
    "ctx-kept upstream starting",
    *PUBLIC_KEY,
    COMMIT,
    "secret key: ",
    "  password: |",
    "  host: db.internal",
    "ctx-kept upstream ready",
)
"""Lines (or their start) that hold no secret and must reach the log as written."""

if __name__ == "__main__":
    for line in LINES:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    shop = str(Path(__file__).with_name("shop_server.py"))
    sys.argv = [shop]
    runpy.run_path(shop, run_name="__main__")

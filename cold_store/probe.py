"""Does the store refuse a second put-if-absent of one key?  Asked before a Delta table
is opened for writing.

A Delta commit is the creation of the log entry ``_delta_log/<version>.json`` only if it
does not exist yet; two writers that both succeed at creating version N would each
believe their own commit is N, and one of them would be lost.  A store that ignores the
condition (an S3-compatible server without ``If-None-Match`` support, a filesystem
without hard links) looks fine until two writers race, so the store is asked once, at
start: the same probe key is put twice with the condition, and the second put must be
refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import httpx

from cold_store.errors import StoreUnavailable, UnsafeStore

PROBE_FOLDER = "_probe"
"""Where probe keys go, under the store's root (Delta ignores names starting with _)."""


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3 (or S3-compatible) object store.  Nothing here is read from the
    environment by this package; a value left ``None`` may still be filled in by the
    object store client underneath Delta from the standard ``AWS_*`` variables."""

    endpoint_url: str | None = None
    """``http://127.0.0.1:9000`` for a local server; ``None``: AWS itself."""
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    timeout_s: float = 30.0
    """Per-request timeout, for the probe and for Delta's object store client."""
    max_retries: int | None = None
    """Retries of a failed request by Delta's object store client (``None``: its
    default, 10, which rides out a short outage but makes a long one fail slowly)."""

    def storage_options(self) -> dict[str, str]:
        """The options Delta's object store client takes."""
        options = {"AWS_REGION": self.region, "timeout": f"{max(1, round(self.timeout_s))}s"}
        if self.max_retries is not None:
            options["max_retries"] = str(self.max_retries)
        if self.endpoint_url is not None:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
            if self.endpoint_url.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        for name, value in (
            ("AWS_ACCESS_KEY_ID", self.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", self.secret_access_key),
            ("AWS_SESSION_TOKEN", self.session_token),
        ):
            if value is not None:
                options[name] = value
        return options

    def object_url(self, bucket: str, key: str) -> str:
        """Path-style under a custom endpoint, virtual-hosted on AWS."""
        path = quote(key, safe="/-_.~")
        if self.endpoint_url is not None:
            return f"{self.endpoint_url.rstrip('/')}/{bucket}/{path}"
        return f"https://{bucket}.s3.{self.region}.amazonaws.com/{path}"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def signed_headers(
    options: S3Options,
    method: str,
    url: str,
    body: bytes,
    extra: dict[str, str],
    now: datetime | None = None,
) -> dict[str, str]:
    """The headers of an AWS Signature Version 4 request to S3 (``extra`` is signed too).
    Unsigned when no access key is given."""
    parsed = httpx.URL(url)
    payload = hashlib.sha256(body).hexdigest()
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    headers = {
        "host": parsed.netloc.decode("ascii"),
        "x-amz-content-sha256": payload,
        "x-amz-date": stamp,
        **{k.lower(): v for k, v in extra.items()},
    }
    if options.session_token is not None:
        headers["x-amz-security-token"] = options.session_token
    if options.access_key_id is None or options.secret_access_key is None:
        return headers
    names = sorted(headers)
    canonical = "\n".join(
        [
            method,
            parsed.raw_path.decode("ascii").split("?", 1)[0] or "/",
            "",
            "".join(f"{n}:{headers[n].strip()}\n" for n in names),
            ";".join(names),
            payload,
        ]
    )
    scope = f"{stamp[:8]}/{options.region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(f"AWS4{options.secret_access_key}".encode(), stamp[:8])
    for part in (options.region, "s3", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={options.access_key_id}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return headers


def probe_s3(bucket: str, prefix: str, options: S3Options) -> None:
    """Put one probe key twice with ``If-None-Match: *``; the second must be refused
    (412, or 409 for a conditional write still in progress).  Raises
    :class:`UnsafeStore` when it is not, :class:`StoreUnavailable` when the store
    cannot be asked."""
    key = "/".join(p for p in (prefix.strip("/"), PROBE_FOLDER, uuid.uuid4().hex) if p)
    url = options.object_url(bucket, key)
    where = f"s3://{bucket}/{key}"

    def put(client: httpx.Client, body: bytes) -> httpx.Response:
        headers = signed_headers(options, "PUT", url, body, {"if-none-match": "*"})
        return client.put(url, content=body, headers=headers)

    try:
        with httpx.Client(timeout=options.timeout_s) as client:
            first = put(client, b"first")
            if first.status_code == 501:
                raise UnsafeStore(
                    f"{where}: the store does not implement conditional writes "
                    f"(If-None-Match answered 501); concurrent Delta commits would be unsafe"
                )
            if not first.is_success:
                raise StoreUnavailable(
                    f"{where}: the probe write was refused ({first.status_code}): "
                    f"{first.text[:300]}"
                )
            try:
                second = put(client, b"second")
            finally:
                with contextlib.suppress(httpx.HTTPError):
                    client.delete(url, headers=signed_headers(options, "DELETE", url, b"", {}))
    except httpx.HTTPError as exc:
        raise StoreUnavailable(f"{where}: the object store cannot be reached: {exc}") from exc
    if second.is_success:
        raise UnsafeStore(
            f"{where}: the object store accepted a second put-if-absent of one key "
            f"(If-None-Match ignored), so two writers could both commit one Delta version; "
            f"refusing to open it"
        )
    if second.status_code not in (409, 412):
        raise StoreUnavailable(
            f"{where}: the second probe write answered {second.status_code}, neither "
            f"'precondition failed' nor a success: {second.text[:300]}"
        )


def probe_folder(root: Path) -> None:
    """The local counterpart: Delta creates a log entry only if absent by hard-linking a
    staged file to its final name, so the second link to one name must fail."""
    folder = root / PROBE_FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / f".{uuid.uuid4().hex}.staged"
        target = folder / uuid.uuid4().hex
        staged.write_bytes(b"probe")
    except OSError as exc:
        raise StoreUnavailable(f"{folder}: cannot write the probe file: {exc}") from exc
    try:
        os.link(staged, target)
        try:
            os.link(staged, target)
        except FileExistsError:
            return
        raise UnsafeStore(
            f"{folder}: a second hard link to one name succeeded, so two writers could "
            f"both commit one Delta version; refusing to open it"
        )
    except OSError as exc:
        raise UnsafeStore(
            f"{folder}: this filesystem cannot create a file only if absent by hard link "
            f"({exc}), which Delta's commits need"
        ) from exc
    finally:
        for path in (target, staged):
            with contextlib.suppress(OSError):
                path.unlink()

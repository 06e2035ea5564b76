"""Secret redaction by key name and by value pattern; secret-looking credential refs."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from sidecar.trust.redact import MASK, line_redactor, looks_like_secret, redact, redact_text

SECRETS = {
    "aws access key": "AKIAIOSFODNN7EXAMPLE",
    "github token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "openai key": "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34",
    "anthropic key": "sk-ant-api03-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2",
    "stripe key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "slack token": "xoxb-" + "123456789012-abcdefghijkl",
    "google key": "AIza" + "SyA-1234567890abcdefghijklmnopqrstu",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "gitlab token": "glpat-" + "abcdefghij1234567890",
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_known_token_formats_are_masked_in_text(name: str) -> None:
    secret = SECRETS[name]
    out = redact_text(f"request failed with credential {secret} at step 3")
    assert secret not in out and MASK in out
    assert out.startswith("request failed with credential")


def test_private_key_block_is_masked() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
    assert "MIIEow" not in redact_text(f"key: {pem} done")


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abc.def.ghi123", "abc.def.ghi123"),
        ("GET /v1?api_key=hunter2hunter2&q=x", "hunter2hunter2"),
        ("password=correct-horse", "correct-horse"),
        ("https://bob:s3cr3t@db.internal/x", "s3cr3t"),
        ("Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ],
)
def test_credentials_in_text_are_masked(text: str, secret: str) -> None:
    assert secret not in redact_text(text)


def test_mapping_values_under_sensitive_keys_are_masked() -> None:
    data = {
        "headers": {"Authorization": "Token abc", "X-Api-Key": "k", "Accept": "json"},
        "client_secret": "shh",
        "nested": [{"password": "p"}, {"note": "fine"}],
        "cookies": {"session": "s"},
    }
    out = redact(data)
    assert out["headers"] == {"Authorization": MASK, "X-Api-Key": MASK, "Accept": "json"}
    assert out["client_secret"] == MASK
    assert out["nested"] == [{"password": MASK}, {"note": "fine"}]
    assert out["cookies"] == {"session": MASK}
    assert data["client_secret"] == "shh"  # the input is not modified


def test_ordinary_text_is_left_alone() -> None:
    text = "llm_extractor timed out after 30s on a 7.2 MB payload; the token budget was fine"
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "ref",
    [
        "vault://kv/openai#api_key",
        "env:OPENAI_API_KEY",
        "oauth:mail-client",
        "kid-2024-01",
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/db",
    ],
)
def test_references_are_not_secrets(ref: str) -> None:
    assert looks_like_secret(ref) is None


@pytest.mark.parametrize(
    "value", [*SECRETS.values(), "Zx8Qw3Er7Ty1Ui5Op9As2Df6Gh0Jk4L", "Bearer abcdefgh12345678"]
)
def test_secret_values_are_recognised(value: str) -> None:
    assert looks_like_secret(value) is not None


# ---- formats a maintained detector knows ---------------------------------------------------
# Each sample is flagged by detect-secrets (its plugins are the oracle of what is a secret;
# the sidecar redacts with its own table, ~100x cheaper per string, and must agree).
DETECTED = {
    "AzureStorageKeyDetector": "conn AccountKey=" + "Q" * 86 + "== ;EndpointSuffix=x",
    "NpmDetector": "//registry.npmjs.org/:_authToken=npm_" + "a1B2c3D4e5f6" * 3,
    "GitHubTokenDetector": "token ghp_" + "Ab1Cd2Ef3G" * 3 + "h4I5j6",
    "GitLabTokenDetector": "use glpat-" + "x1Y2z3W4v5" * 2 + "u6",
    "SendGridDetector": "key SG." + "a" * 22 + "." + "b" * 43,
    "StripeDetector": "sk_live_" + "0aB1cD2eF3gH4iJ5kL6mN7oP",
    "SlackDetector": "xoxb-123456789012-abcdefghijklmnop",
    "TwilioKeyDetector": "sid AC" + "0a1b2c3d4e" * 3 + "ff",
    "JwtTokenDetector": "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    + "c2lnbmF0dXJlLXNpZ25hdHVyZQ",
    "BasicAuthDetector": "https://svc:s3cretPassw0rd99@host.example.com/x",
    "TelegramBotTokenDetector": "bot 123456789:" + "AbCdEfGhIj" * 3 + "KlMnO",
}


@pytest.mark.parametrize("plugin", sorted(DETECTED))
def test_what_detect_secrets_flags_is_redacted(plugin: str) -> None:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    detector = {c.__name__: c for c in get_mapping_from_secret_type_to_class().values()}[plugin]()
    sample = DETECTED[plugin]
    found = {s for s in detector.analyze_string(sample)}
    assert found, f"{plugin} does not flag the sample"
    redacted = redact_text(sample)
    assert MASK in redacted
    for secret in found:
        if len(secret) >= 8:  # some plugins report only a prefix group ("ghp")
            assert secret not in redacted, (plugin, secret, redacted)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("cannot read /etc/passwd: see cold://chains/0a1b", "cold://chains/0a1b"),
        ("passwd: cold://chains/0a1b2c", "cold://chains/0a1b2c"),
        ("password reset link sent", "password reset link sent"),
        ("Cookie: sid=abcdef123456; ctx017 next", "ctx017 next"),
    ],
)
def test_redaction_keeps_ordinary_words(text: str, kept: str) -> None:
    assert kept in redact_text(text)


def test_a_password_holding_an_at_sign_is_masked_whole() -> None:
    out = redact_text("dsn postgres://svc:abcDEF123456@ghiJKL789012@db.example.com/app")
    assert "abcDEF123456" not in out and "ghiJKL789012" not in out
    assert out.endswith("@db.example.com/app")


def test_a_secret_used_as_a_key_is_masked() -> None:
    token = "ghp_" + "Zz9Yy8Xx7W" * 4
    out = redact({"error": {token: "bad", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY": 1}})
    assert token not in str(out) and "wJalrXUtnFEMI" not in str(out)
    assert sorted(out["error"]) == [MASK, f"{MASK}#2"]


def _every_pattern(text: str) -> str:
    from sidecar.trust.redact import RULES, apply_rule

    for rule in RULES:
        text = apply_rule(rule, text)
    return text


@pytest.mark.parametrize(
    "text",
    [
        "pwd=abc",
        "a:@b",
        "x://u:p@host",
        "token abcdefghijklmnop1",
        "AKIAABCDEFGHIJKLMNOP",
        "bearer abcdefgh",
        "hat",
        "",
        "cookie:a=b",
    ],
)
def test_skipping_patterns_longer_than_the_text_changes_nothing(text: str) -> None:
    # the shortcut skips a pattern whose shortest match is longer than the text; a text
    # exactly as long as a pattern's shortest match must still be masked
    assert redact_text(text) == _every_pattern(text)


def test_skipping_patterns_agrees_with_every_pattern_on_random_text() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    alphabet = st.sampled_from(list("aAkKsS0189:=@/._- \"'tokenpwdbearerAKIA"))

    @settings(max_examples=400, deadline=None)
    @given(st.text(alphabet, max_size=40))
    def agree(text: str) -> None:
        assert redact_text(text) == _every_pattern(text)

    agree()


def test_a_key_that_looks_like_a_secret_is_masked_every_time() -> None:
    # keys are cached: the second sighting must be masked like the first
    key = "ghp_" + "a1B2c3D4e5" * 4
    for _ in range(2):
        assert list(redact({key: 1})) == [MASK]


# ---- every common shape ----------------------------------------------------------------
SECRET = "Zq8wLp3xKd7Rt2Vb"


@pytest.mark.parametrize(
    "key",
    [
        "auth", "Auth", "AUTH", "x-auth", "basicAuth",
        "pwd", "PWD", "db_pwd", "pass", "otp",
        "passphrase", "key_passphrase", "passPhrase",
        "session", "sessionid", "session_id", "sessionId", "Session-ID", "JSESSIONID",
        "PHPSESSID", "session_token", "sessionKey",
        "cookie", "Cookie", "cookies", "set-cookie",
        "apikey", "api_key", "apiKey", "API-KEY", "X-API-Key", "x_api_key", "XApiKey",
        "Ocp-Apim-Subscription-Key", "access_token", "refreshToken", "id_token",
        "client_secret", "AWS_SECRET_ACCESS_KEY", "private_key", "credentials", "jwt",
        "csrftoken", "X-CSRF-Token", "password_confirmation",
    ],
)  # fmt: skip
def test_sensitive_key_names_in_any_spelling(key: str) -> None:
    assert redact({key: SECRET}) == {key: MASK}


@pytest.mark.parametrize(
    "key",
    [
        "author", "authority", "oauth_provider", "auth_method", "auth_type", "passenger",
        "passwordless", "bypass", "compass", "sessions", "session_timeout", "token_type",
        "max_tokens", "total_tokens", "prompt_tokens", "token_count", "tokenizer",
        "cookie_name", "cookie_domain", "password_length", "password_policy",
        "api_key_name", "secret_name", "monkey", "keyword", "key", "order_id", "status",
    ],
)  # fmt: skip
def test_structural_key_names_keep_their_values(key: str) -> None:
    """A name that describes a secret, or only looks like one, keeps its value (the
    memory may learn from it); the value rules still apply to it."""
    assert redact({key: "pending"}) == {key: "pending"}
    assert redact({key: "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"}) == {key: MASK}


def test_booleans_are_never_masked_by_name() -> None:
    assert redact({"password": True, "session": False}) == {"password": True, "session": False}


@pytest.mark.parametrize(
    "pairs",
    [
        [{"name": "X-API-Key", "value": SECRET}, {"name": "Accept", "value": "json"}],
        [{"key": "Authorization", "value": {"stringValue": SECRET}}],
        [{"name": "DB_PASSWORD", "value": SECRET}],
        [["Cookie", SECRET], ["Accept", "json"]],
        [("x-auth-token", SECRET)],
    ],
)
def test_name_value_pairs_with_a_sensitive_name(pairs: list[object]) -> None:
    out = redact({"headers": pairs})
    assert SECRET not in str(out) and MASK in str(out)
    assert "Accept" not in str(pairs) or "json" in str(out)


@pytest.mark.parametrize(
    "text",
    [
        f"GET https://maps.example.com/geo?q=paris&key={SECRET}&lang=en failed",
        f"https://api.example.com/v1?token={SECRET}",
        f"https://acct.blob.example.net/c/b?sv=2024&sig={SECRET}",
        f"https://h.example.com/a?access_token={SECRET}#frag",
        f"https://h.example.com/app;jsessionid={SECRET}?x=1",
        f"https://h.example.com/cb?X-Amz-Signature={SECRET}&X-Amz-Date=1",
        f"redirect to /login?next=/home&auth={SECRET}",
    ],
)
def test_url_query_parameters(text: str) -> None:
    out = redact_text(text)
    assert SECRET not in out and MASK in out


def test_ordinary_query_parameters_are_kept() -> None:
    text = "GET https://shop.example.com/items?page=2&sort=asc&q=blue+shirt"
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "text",
    [
        f'upstream 401: {{"error": {{"auth": "{SECRET}"}}}}',
        f'body was {{\\"api_key\\": \\"{SECRET}\\", \\"ok\\": false}}',
        f'log: "{{\\\\\\"pwd\\\\\\": \\\\\\"{SECRET}\\\\\\"}}"',
        f"{{'passphrase': '{SECRET}', 'user': 'bob'}}",
        json.dumps({"request": json.dumps({"headers": [{"name": "X-API-Key", "value": SECRET}]})}),
        json.dumps([{"session_id": SECRET}]),
    ],
)
def test_json_inside_strings_escaped_or_not(text: str) -> None:
    out = redact_text(text)
    assert SECRET not in out and MASK in out


def test_a_json_text_with_no_secret_is_left_as_written() -> None:
    text = '{"status":  "pending", "items": [1, 2]}'
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "text",
    [
        f"Invalid API key '{SECRET}'",
        f'invalid token "{SECRET}" expired',
        f"Authentication failed: password `{SECRET}` rejected",
        f"Incorrect API key provided: {SECRET}. You can find your key in the dashboard.",
        f"401 Unauthorized: bad credentials \u2018{SECRET}\u2019",
        f"Session ID '{SECRET}' is not valid",
    ],
)
def test_quoted_values_in_error_messages(text: str) -> None:
    out = redact_text(text)
    assert SECRET not in out and MASK in out


@pytest.mark.parametrize(
    "text",
    [
        f"my password is {SECRET}",
        "My password is hunter2, please log in",
        f"the new api key for prod was {SECRET}",
        f"our passphrase is now {SECRET}",
        "password is Summer2024!",
        f"pin set to {SECRET}",
    ],
)
def test_password_phrases(text: str) -> None:
    out = redact_text(text)
    assert MASK in out and SECRET not in out and "hunter2" not in out and "Summer2024" not in out


@pytest.mark.parametrize(
    "text",
    [
        "password is required",
        "The password is too short",
        "the token is invalid",
        "Your API key is invalid or expired",
        "token: expired",
        "session: expired",
        "auth: failed",
        "field 'password' is required",
        "Unexpected token '}' in JSON at position 3",
        "Error: Non-delivered order cannot be exchanged",
        "Item 55501 is out of stock",
        "order #W2466703 has status 'pending'",
        "the token budget was fine",
        "author: Bob; oauth: enabled",
    ],
)
def test_error_prose_about_secrets_is_kept(text: str) -> None:
    """Validation errors name secrets all the time; they are what the memory learns."""
    assert redact_text(text) == text


# ---- connection strings, command lines, login failures ---------------------------------
PW = "Xk9pQ2mLw7vB"


@pytest.mark.parametrize(
    "text",
    [
        f"redis://:{PW}@cache.internal:6379/0",
        f"rediss://default:{PW}@cache.internal:6380",
        f"postgresql://app:{PW}@db.internal:5432/app",
        f"connect postgresql://app:ab/{PW}@db.internal/app failed",
        f"amqp://guest:{PW}@rabbit:5672/vhost",
        f"mongodb+srv://admin:{PW}@cluster0.ab1cd.mongodb.net/test?retryWrites=true",
        f"mysql://root:{PW}@localhost:3306/app",
        f"ftp://anonymous:{PW}@ftp.example.com/pub",
        f"connect failed: host=db port=5432 user=app password={PW} dbname=app",
        f"host=db user=app password='{PW[:4]} {PW[4:]}' dbname=app",
        f"host=db password='it\\'s {PW}' dbname=app",
        f"Server=tcp:db,1433;Database=app;User ID=app;Password={{{PW};x}};Encrypt=true",
        f"curl -u admin:{PW} https://api.example.com/",
        f"curl -s --user 'admin:{PW[:5]} {PW[5:]}' https://api.example.com/",
        f"curl --proxy-user proxy:{PW} -x http://proxy:3128 https://x",
        f"sshpass -p {PW} ssh deploy@host",
        f"sshpass -e -p '{PW[:6]} {PW[6:]}' scp a host:b",
        f"mysql -h db -u root -p{PW} app",
        f"mysqldump -uroot -p'{PW}' app > dump.sql",
        f"mysql -u root --password {PW} app",
        f"gh auth login --with-token --token {PW}",
        f"az login --service-principal -u app --client-secret {PW}",
        f"redis-cli -h cache -a {PW} ping",
        f"openssl pkcs12 -in k.p12 -passin pass:{PW}",
        f"smbclient //srv/share -U alice%{PW}",
        f"login failed, password {PW} is invalid",
        f"Login failed: password {PW} is incorrect for user bob",
        "login failed: password hunter2 is wrong",
        f"invalid password {PW} for user bob",
        f"Rejected token {PW}: try again",
        f"api key {PW} is not valid",
        # a login failure that quotes the password with nothing after it
        f"login failed, password {PW}",
        "login failed, password hunter2",
        f"Login failed for user bob, password {PW} (attempt 3)",
        f"authentication failed with password {PW}",
        f"logon failed: password {PW} incorrect",
        # registry logins (the -p of docker, podman, helm and the like)
        f"docker login -u deploy -p {PW} registry.example.com",
        f"podman login registry.example.com --username deploy -p '{PW}'",
        f"helm registry login r.example.com -u deploy -p{PW}",
    ],
)
def test_secrets_in_the_shapes_deployments_write(text: str) -> None:
    out = redact_text(text)
    secret = PW if PW in text else "hunter2"
    pieces = [secret] if secret in text else [PW[:4], PW[4:], PW[:5], PW[5:], PW[:6], PW[6:]]
    assert MASK in out and not any(p in out for p in pieces if p in text), out


@pytest.mark.parametrize(
    "text",
    [
        "docker run -u 1000:1000 app",
        "ps -u root",
        "see http://localhost:8080/@user for details",
        "https://medium.com/@alice/post-1",
        "ssh://git@github.com:org/repo.git",
        "postgres://db.internal:5432/app",
        "password hash is invalid",
        "the password field is invalid",
        "password confirmation is incorrect",
        "token signature is invalid",
        "Invalid token format",
        "wrong password, try again",
        "incorrect password entered",
        "Invalid password provided",
        "invalid token for user bob",
        "pin code is invalid",
        "psql --no-password app",
        "sidecar serve --token-file tokens.json",
        "mysql -u root -p app",
        "curl -u user https://example.com/",
        "npm install @scope/pkg",
        "git log --author=bob",
        "login failed, password required",
        "login failed, password is required",
        "Login failed: password incorrect",
        "authentication failed: password authentication failed for user app",
        "login failed, password reset needed",
        "Access denied for user 'root'@'localhost' (using password: YES)",
        "docker login --password-stdin registry.example.com",
        "docker run -p 8080:80 app",
    ],
)
def test_ordinary_text_near_those_shapes_is_kept(text: str) -> None:
    assert redact_text(text) == text


def test_the_secrets_of_a_connection_string_as_messages_quote_them() -> None:
    from sidecar.trust.redact import scrub
    from sidecar.trust.secretshapes import url_secrets

    url = "postgresql://app:pa/ss w0rd%zz@db.internal:5432/app?sslmode=require"
    secrets = url_secrets(url)
    assert "pa/ss w0rd%zz" in secrets and "w0rd%zz" in secrets and "pa" not in secrets
    message = 'cannot parse "pa/ss w0rd%zz": invalid percent-encoded token "w0rd%zz"'
    assert "w0rd" not in scrub(message, secrets)
    dsn = "host=db user=app password='a b\\'cdef' dbname=app"
    assert "a b\\'cdef" in url_secrets(dsn)
    assert url_secrets("postgresql://app@db/app?password=Zz9yY8xX7w") == ("Zz9yY8xX7w",)
    assert url_secrets("postgresql://db/app") == () and url_secrets(None) == ()


# ---- secrets over several lines, whole and a line at a time ------------------------------
def by_lines(text: str) -> str:
    """``text`` redacted as the gateway redacts an upstream's stderr: a line at a time."""
    redactor = line_redactor()
    return "\n".join(redactor.line(line) for line in text.split("\n"))


HOW = pytest.mark.parametrize("how", [redact_text, by_lines], ids=["whole", "by lines"])
KEY_BODY = (
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
    "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ",
)
PRIVATE_KEYS = ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY",
                "ENCRYPTED PRIVATE KEY", "OPENSSH PRIVATE KEY",
                "PGP PRIVATE KEY BLOCK"]  # fmt: skip


@HOW
@pytest.mark.parametrize("label", PRIVATE_KEYS)
def test_every_line_of_a_private_key_block_is_masked(how: Callable[[str], str], label: str) -> None:
    text = "\n".join(
        ["loading the deploy key", f"-----BEGIN {label}-----", *KEY_BODY, f"-----END {label}-----",
         "key loaded"]
    )  # fmt: skip
    out = how(text)
    assert not any(line in out for line in KEY_BODY), out
    assert out.startswith("loading the deploy key\n") and out.endswith("\nkey loaded")
    assert MASK in out and "BEGIN" not in out


@HOW
def test_a_pgp_private_key_block_is_masked_with_its_armour_headers_and_checksum(
    how: Callable[[str], str],
) -> None:
    text = "\n".join(
        ["gpg: exporting", "-----BEGIN PGP PRIVATE KEY BLOCK-----", "Version: GnuPG v2",
         "Comment: Zq7HdrComment", "", *KEY_BODY, "=Xk4d", "-----END PGP PRIVATE KEY BLOCK-----",
         "gpg: done"]
    )  # fmt: skip
    out = how(text)
    secrets = [*KEY_BODY, "GnuPG", "Zq7HdrComment", "=Xk4d"]
    assert [s for s in secrets if s in out] == [], out
    assert out.startswith("gpg: exporting\n") and out.endswith("\ngpg: done")


@HOW
def test_public_keys_and_certificates_are_kept(how: Callable[[str], str]) -> None:
    text = "\n".join(
        ["-----BEGIN PGP PUBLIC KEY BLOCK-----", "Comment: release signing key", "",
         "mQENBF2lnPIBCADKb8rQ5Y0bF1cXgZ0s9F2kTq3Yh7Vn4Wx6Lm8Pz1Qa2Rb3Sc4Td5U", "=Ab1c",
         "-----END PGP PUBLIC KEY BLOCK-----", "-----BEGIN CERTIFICATE-----",
         "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ",
         "-----END CERTIFICATE-----"]
    )  # fmt: skip
    assert how(text) == text


@HOW
def test_a_private_key_block_that_never_ends_is_masked_to_the_end(
    how: Callable[[str], str],
) -> None:
    out = how("\n".join(["before", "-----BEGIN RSA PRIVATE KEY-----", *KEY_BODY]))
    assert out.startswith("before\n") and not any(line in out for line in KEY_BODY), out


def test_after_a_key_block_ends_its_line_and_the_next_are_redacted_as_usual() -> None:
    text = "\n".join(
        ["-----BEGIN EC PRIVATE KEY-----", KEY_BODY[0],
         "-----END EC PRIVATE KEY----- then token=Zx81Kq2Lm0Nb7V", "next line"]
    )  # fmt: skip
    assert by_lines(text) == f"{MASK}\n{MASK}\n{MASK} then token={MASK}\nnext line"


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@HOW
@pytest.mark.parametrize(
    "label",
    ["secret key: ", "Secret Key = ", "secret_key=", "secret-key: ", "aws_secret_access_key = ",
     "AWS_SECRET_ACCESS_KEY=", "SecretAccessKey: ", "aws secret access key: ",
     "AWS Secret Access Key [None]: ", "AWS Secret Access Key [****************EKEY]: ",
     "loaded profile prod, secret key: "],
)  # fmt: skip
def test_an_aws_secret_access_key_after_its_label_is_masked(
    how: Callable[[str], str], label: str
) -> None:
    assert how(f"{label}{AWS_SECRET} (region us-east-1)") == f"{label}{MASK} (region us-east-1)"


@HOW
@pytest.mark.parametrize(
    "text",
    ["commit: 3f9c2a7d41b0e8c6a5f1d2e3b4c5d6e7f8a9b0c1",
     "tree 3f9c2a7d41b0e8c6a5f1d2e3b4c5d6e7f8a9b0c1",
     "sha1=0123456789abcdef0123456789abcdef01234567", "secret key: not configured",
     "secret key length: 40", "aws secret access key: missing", f"public key: {AWS_SECRET}"],
)  # fmt: skip
def test_forty_characters_after_a_label_that_names_no_secret_are_kept(
    how: Callable[[str], str], text: str
) -> None:
    assert how(text) == text


@HOW
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # a block scalar: every line under the key, a blank line inside it too
        ("database:\n  password: |\n    Yaml-Pw-7Qx2Lm9Kd4\n    Yaml-Pw-Line2-Rt5\n  host: db",
         f"database:\n  password: |\n    {MASK}\n    {MASK}\n  host: db"),
        ("password: >-\n  Yaml-Pw-7Qx2Lm9Kd4\n\n  after-a-blank-Kk3\nuser: app",
         f"password: >-\n  {MASK}\n\n  {MASK}\nuser: app"),
        ("passwd: |+  # kept for the old client\n    Pw-Kept-9z\nuser: app",
         f"passwd: |+  # kept for the old client\n    {MASK}\nuser: app"),
        # a tag before the header (masked as a one-line value would be)
        ("passwd: !!binary |\n    UHctS2VwdC05eg==\nuser: app",
         f"passwd: {MASK} |\n    {MASK}\nuser: app"),
        ("- api_key: >\n    k-123-Zx9\n  name: search",
         f"- api_key: >\n    {MASK}\n  name: search"),
        ('"client_secret": |\n  cs-Abc123Qw\nnext: 1', f'"client_secret": |\n  {MASK}\nnext: 1'),
        # a bare key, its value on the lines under it
        ("  token:\n    tkn-Bare-5Wq8Zr3Vy1\n  ttl: 60", f"  token:\n    {MASK}\n  ttl: 60"),
        ("secret:\n  - first-Sx1\n  - second-Sx2\nother: 1",
         f"secret:\n  {MASK}\n  {MASK}\nother: 1"),
        # a value on the line after its name, not indented: read across the line end
        ("Your password:\nXk3-9abc", f"Your password:\n{MASK}"),
    ],
)  # fmt: skip
def test_a_yaml_value_on_the_lines_under_its_key_is_masked(
    how: Callable[[str], str], text: str, shown: str
) -> None:
    assert how(text) == shown


@HOW
@pytest.mark.parametrize(
    "text",
    [
        "password: ok",
        "token: expired\n  retrying in 5 s",
        "password_policy:\n  min_length: 8\n  require_digit: true",
        "auth:\n  type: basic\n  realm: shop",
        "max_tokens:\n  4096",
        "Error: invalid password:\n    at check (auth.js:10:5)",
        "password: |\npassword_length: 12",
        "notes: |\n  rotated monthly\n  see the runbook",
    ],
)
def test_lines_under_a_key_that_names_no_secret_are_kept(
    how: Callable[[str], str], text: str
) -> None:
    assert how(text) == text

"""Credentials out of everything loopscribe writes or prints: URIs lose their user info and query values.

Object-store URIs can carry secrets (`s3://KEY:SECRET@bucket/x`, presigned `https://host/x?X-Amz-Signature=...`);
`_config.json`, `_summary.json`, the output's columns, error rows, log lines and the job's messages pass every URI
through `redact`, so a secret given in a URI or a `--config` file is never written down. Secrets given through the
environment (AWS_SECRET_ACCESS_KEY and the like) are never read by loopscribe itself; the storage libraries use
them and do not put them in their messages (tests/pipeline/io/test_redact.py checks both).
"""

from __future__ import annotations

import re
from typing import Any

HIDDEN = "***"
MIN_SECRET_CHARS = 4  # shorter user infos and query values are not hunted for elsewhere in a text
_URI = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
_USER_INFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@?#]*@")
_QUERY_VALUE = re.compile(r"([?&;][^=&;#?]+)=[^&;#]*")


def _redact_uri(match: re.Match[str]) -> str:
    uri = _USER_INFO.sub(lambda m: m.group(1) + HIDDEN + "@", match.group(0))
    if "?" not in uri or uri.startswith("file:"):  # a local name is literal, '?' included
        return uri
    head, query = uri.split("?", 1)
    return head + _QUERY_VALUE.sub(lambda m: m.group(1) + "=" + HIDDEN, "?" + query)


def _secrets(uri: str) -> list[str]:
    """The user info and query values of one URI: what `_redact_uri` hides."""
    found = [m.group(0)[len(m.group(1)):-1] for m in [_USER_INFO.match(uri)] if m]
    if "?" in uri and not uri.startswith("file:"):
        found += [m.group(0).split("=", 1)[1] for m in _QUERY_VALUE.finditer("?" + uri.split("?", 1)[1])]
    return [secret for secret in found if len(secret) >= MIN_SECRET_CHARS]


def secrets_in(value: Any) -> set[str]:
    """The user info and query values of every URI in the strings inside `value` (nested dicts, lists, tuples,
    dataclasses' `asdict`): what `redact(text, secrets_in(settings))` hides in a text that quotes them without
    the URI around them."""
    if isinstance(value, str):
        return {secret for match in _URI.finditer(value) for secret in _secrets(match.group(0))}
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return set().union(*(secrets_in(item) for item in value))
    return set()


def redact(text: str, secrets: set[str] | frozenset[str] = frozenset()) -> str:
    """`text` with every URI's user info and query values replaced by `***`, also where they appear again
    outside the URI (a storage library quoting `KEY:SECRET@bucket` as an invalid bucket name), and so are
    `secrets` (`secrets_in` of the job's settings); the rest unchanged."""
    secrets = set(secrets) | secrets_in(text)
    if "://" in text:
        text = _URI.sub(_redact_uri, text)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def redact_values(value: Any) -> Any:
    """Every string inside nested dicts, lists and tuples redacted (for JSON written beside the output)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_values(item) for item in value)
    return value
